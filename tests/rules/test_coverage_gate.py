"""Below a framework's `covers:` release nothing about its backends is decided.

TransformerEngine is checked from 1.9 on (rules/backends/transformer_engine.yaml). An older TE
must not get a backend choice, nor findings from rules written for newer releases: its backends
are undecided, the rules that would switch them off are "not evaluated" with the reason, and
TE-OLDER-THAN-COVERED tells the user. From 1.9 the same workload is judged as usual.
"""

from __future__ import annotations

from typing import Any, Dict

import pytest

from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalogue(use_cache=False)


def _diagnose(cat: Any, te: str, gpu: str = "7.5") -> Any:
    pkgs: Dict[str, str] = {"transformer-engine": te, "torch": "2.3.0", "flash-attn": "2.5.8"}
    facts, workload = case_inputs({"packages": pkgs, "gpu": gpu, "cudnn": {"version": "9.1.0"}, "workload": {"framework": "megatron"}})
    return diagnose(cat, facts, workload)


def test_te_below_1_9_is_not_judged(cat) -> None:  # type: ignore[no-untyped-def]
    d = _diagnose(cat, "1.8.0")
    te = [b for b in d.backends if b.framework == "transformer-engine"]
    assert {b.id for b in te} == {"te.flash", "te.fused", "te.unfused"}
    for b in te:
        assert b.available is None and not b.selected
        assert "older than 1.9" in b.reasons[0] and "TransformerEngine 1.8.0" in b.reasons[0]
        assert all(m.available is None for m in b.members)
    assert dict(d.selections)["transformer-engine"] is None
    # FusedAttention needs sm80: on a T4 that rule fires from 1.9, but is not evaluated on 1.8
    assert d.result("TE-FUSED-SM-LT-80").status == "not_evaluated"
    assert "older than 1.9" in d.result("TE-FUSED-SM-LT-80").missing[0]
    assert "TE-OLDER-THAN-COVERED" in {f.rule_id for f in d.findings if f.status == "fired"}


def test_te_1_9_is_judged(cat) -> None:  # type: ignore[no-untyped-def]
    d = _diagnose(cat, "1.9.0.post1")
    fused = next(b for b in d.backends if b.id == "te.fused")
    assert fused.available is False and "TE-FUSED-SM-LT-80" in fused.rule_ids
    assert d.result("TE-FUSED-SM-LT-80").status == "fired"
    assert "TE-OLDER-THAN-COVERED" not in {f.rule_id for f in d.findings}
    assert dict(d.selections)["transformer-engine"] is not None


@pytest.mark.parametrize("te", ["1.9.0rc1", "1.9.0.dev0", "1.9.0.dev0+abc123", "1.8.0+cuda12.4", "1.7.0a0+nv24.03", "0.8.0"])
def test_the_gate_never_closes_without_the_warning(cat, te: str) -> None:  # type: ignore[no-untyped-def]
    """Pre-releases, dev builds and NGC labels: either TE is judged as usual, or its backends are
    left undecided AND TE-OLDER-THAN-COVERED says why (the two read the same test)."""
    d = _diagnose(cat, te)
    undecided = all(b.available is None for b in d.backends if b.framework == "transformer-engine")
    warned = d.result("TE-OLDER-THAN-COVERED").status == "fired"
    assert undecided == warned, (te, undecided, warned)


def test_check_says_an_old_te_was_not_checked(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from doctor.cli import main

    env = tmp_path / "env.yaml"
    env.write_text("schema_version: 1\npackages: {transformer-engine: 1.8.0, torch: 2.3.0}\n"
                   "torch: {version: 2.3.0, cuda: '12.1'}\ngpus: [{index: 0, name: A100, compute_capability: '8.0'}]\n"
                   "cudnn: {version: 9.1.0}\nenv: {}\n")
    wl = tmp_path / "wl.yaml"
    wl.write_text("framework: megatron\n")
    with pytest.raises(SystemExit):
        main(["check", "--no-kernels", "--env", str(env), "--workload", str(wl)])
    out = " ".join(capsys.readouterr().out.split())
    assert "TransformerEngine 1.8.0: not checked: TransformerEngine 1.8.0 is older than 1.9" in out
    assert "TE-OLDER-THAN-COVERED" in out
    assert "backend(s) need facts" not in out  # the old TE is said once, not counted as unknown facts
