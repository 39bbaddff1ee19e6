"""The five field reports: each plan names real versions, clears every error, and `check
--assume ... --assume-env ...` agrees. Then the same property for every rule in the catalogue
whose own fixes can clear it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from doctor.fix.recheck import apply_fix, recheck
from doctor.model import Fix
from doctor.cli import main
from doctor.fix.plan import plan_fixes
from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from tests.fix.conftest import SEEDS, write_snapshot

# The environments of the five reports in shared/seeds (what the reporters ran).
SEED_CASES: Dict[str, Dict[str, Any]] = {
    "000 TE CP + flash-attn 2.6 softcap": {
        "packages": {"transformer-engine": "1.13.0", "flash-attn": "2.6.3", "torch": "2.4.1"},
        "python": {"version": "3.10.14"},
        "gpu": "8.0",
        "workload": {"context_parallel": {"size": 2, "comm_type": "p2p"}},
    },
    "001 TE CP all_gather, cuDNN 9.1": {
        "packages": {"transformer-engine": "1.11.0", "torch": "2.4.1", "nvidia-cudnn-cu12": "9.1.0.70", "flash-attn": "2.5.8"},
        "python": {"version": "3.10.14"},
        "gpu": "9.0",
        "cudnn": {"version": "9.1.0"},
        "workload": {"dtype": "bf16", "seq_len": 4096, "context_parallel": {"size": 2, "comm_type": "all_gather"}},
    },
    "002 XTuner 0.1.23 + transformers 4.44": {
        "packages": {"xtuner": "0.1.23", "transformers": "4.44.2", "flash-attn": "2.6.3", "torch": "2.4.1"},
        "python": {"version": "3.10.14"},
        "gpu": "8.0",
        "workload": {"varlen": False},
    },
    "003 DeepSeek V3 MLA on A100, flash and unfused off": {
        "packages": {"transformer-engine": "2.3.0", "torch": "2.6.0", "flash-attn": "2.7.4.post1"},
        "python": {"version": "3.12.3"},
        "gpu": "8.0",
        "cudnn": {"version": "9.1.0"},
        "env": {"NVTE_FLASH_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"},
        "workload": {"head_dim_qk": 192, "head_dim_v": 128, "dtype": "bf16"},
    },
    "004 fused QKV split, GQA 16/1 on H100": {
        "packages": {"transformer-engine": "1.11.0", "flash-attn": "2.5.8", "torch": "2.4.1"},
        "python": {"version": "3.10.14"},
        "gpu": "9.0",
        "cudnn": {"version": "9.2.1"},
        "workload": {"num_heads": 16, "num_kv_heads": 1, "head_dim": 64, "dtype": "fp16", "qkv_packed": True, "qkv_format": "sbhd"},
    },
}

EXPECTED = {
    # seed: (rule the report is about, pins the plan must contain, env it must set)
    "000 TE CP + flash-attn 2.6 softcap": ("TE-CP-FLASH-ATTN-SOFTCAP", ["flash-attn==2.5.9.post1"], {}),
    "001 TE CP all_gather, cuDNN 9.1": ("TE-CP-ALLGATHER-CUDNN-LT-9-3", ["nvidia-cudnn-cu12==9.3.0.75"], {}),
    "002 XTuner 0.1.23 + transformers 4.44": ("XTUNER-01-TRANSFORMERS-FA-FORWARD", ["transformers==4.42.4"], {}),
    # NVTE_UNFUSED_ATTN=1 alone would clear the error but trigger TE-FALLS-BACK-TO-UNFUSED (slow
    # attention); TE 2.17 lets FlashAttention take MLA, which leaves no warning behind.
    "003 DeepSeek V3 MLA on A100, flash and unfused off": ("TE-NO-BACKEND", ["transformer-engine[pytorch,core-cu12]==2.17.0"], {"NVTE_FLASH_ATTN": "1"}),
    "004 fused QKV split, GQA 16/1 on H100": ("TE-FUSED-STRIDED-GQA-QKV", ["transformer-engine[pytorch]==1.12.0"], {}),
}


def _no_automatic_fix(cat, rule_id: str) -> bool:  # type: ignore[no-untyped-def]
    rule = cat.rule(rule_id)
    return not any(f.checkable for f in rule.fixes)


def _errors_after(cat, facts, workload, plan) -> List[str]:  # type: ignore[no-untyped-def]
    f, w = apply_fix(facts, workload, Fix("plan", pins=plan.pins, env=dict(plan.env), workload=dict(plan.workload_changes)))
    return [x.rule_id for x in diagnose(cat, f, w).findings if x.status == "fired" and x.severity == "error"]


@pytest.mark.parametrize("name", sorted(SEED_CASES))
def test_seed_plan(name: str, cat, rel) -> None:  # type: ignore[no-untyped-def]
    facts, workload = case_inputs(SEED_CASES[name])
    rule_id, pins, env = EXPECTED[name]
    plan = plan_fixes(rel, cat, facts, workload)
    assert rule_id in [f.rule_id for f in plan.targets], "the report's finding fires"
    assert rule_id in plan.cleared
    assert all(_no_automatic_fix(cat, r) for r in plan.unresolved), plan.unresolved
    assert plan.verified and not plan.new_findings
    for pin in pins:
        assert pin in [str(p) for p in plan.pins]
    for k, v in env.items():
        assert plan.env.get(k) == v
    assert "torch" not in [p.name for p in plan.pins], "no seed needs torch to move"
    assert _errors_after(cat, facts, workload, plan) == []


def test_seed_000_names_the_prebuilt_wheel(cat, rel) -> None:  # type: ignore[no-untyped-def]
    facts, workload = case_inputs(SEED_CASES["000 TE CP + flash-attn 2.6 softcap"])
    plan = plan_fixes(rel, cat, facts, workload)
    (wheel,) = plan.wheels
    assert wheel.available
    assert wheel.filename == "flash_attn-2.5.9.post1+cu122torch2.4cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    assert wheel.url.startswith("https://github.com/Dao-AILab/flash-attention/releases/download/v2.5.9.post1/")
    assert any("pre-release" in n for n in wheel.notes), "the torch2.4 wheel of 2.5.9.post1 was built against a nightly"


def test_seed_001_flags_the_cudnn_conflict_and_offers_a_torch(cat, rel) -> None:  # type: ignore[no-untyped-def]
    facts, workload = case_inputs(SEED_CASES["001 TE CP all_gather, cuDNN 9.1"])
    plan = plan_fixes(rel, cat, facts, workload)
    assert "torch 2.4.1 requires nvidia-cudnn-cu12==9.1.0.70" in plan.conflicts[0]
    assert any("constraints file" in c for c in plan.conflicts[1:]), "how to make the override stick"
    alt = plan.alternatives[0]
    assert "torch==2.7.1" in [str(p) for p in alt.pins] and not any(p.name.startswith("nvidia-cudnn") for p in alt.pins)
    # The alternative is itself verified: torch 2.7.1 bundles cuDNN 9.5.1.
    f, _ = apply_fix(facts, workload, alt.fix)
    assert "TE-CP-ALLGATHER-CUDNN-LT-9-3" not in [x.rule_id for x in diagnose(cat, f, workload).findings if x.status == "fired"]


@pytest.mark.parametrize("name", sorted(SEED_CASES))
def test_seed_plan_through_the_cli(name: str, tmp_path: Path, capsys, cat) -> None:  # type: ignore[no-untyped-def]
    """`fix --format json`, then `check --assume ... --assume-env ...` on the same snapshot."""
    case = SEED_CASES[name]
    snap = write_snapshot(tmp_path, case)
    wl = tmp_path / "workload.json"
    wl.write_text(json.dumps(case.get("workload", {})), encoding="utf-8")
    with pytest.raises(SystemExit) as exit_fix:
        main(["fix", "--env", str(snap), "--workload", str(wl), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1
    assert all(_no_automatic_fix(cat, r) for r in doc["unresolved"])
    assert exit_fix.value.code == (1 if doc["unresolved"] else 0)
    args = ["check", "--env", str(snap), "--workload", str(wl), "--format", "json", "--no-kernels"]
    for pin in doc["pins"]:
        args += ["--assume", pin]
    for k, v in doc["env"].items():
        args += ["--assume-env", f"{k}={v}"]
    with pytest.raises(SystemExit) as exit_check:
        main(args)
    report = json.loads(capsys.readouterr().out)
    errors = [f["rule_id"] for f in report["findings"] if f["status"] == "fired" and f["severity"] == "error"]
    assert errors == [] and exit_check.value.code == 0


def _fixable_cases(cat):  # type: ignore[no-untyped-def]
    out = []
    for rule in cat.rules:
        if rule.disables or not any(f.checkable for f in rule.fixes):
            continue
        for i, case in enumerate(rule.tests["fires"]):
            out.append(pytest.param(rule.id, case, id=f"{rule.id}-{i}"))
    return out


def pytest_generate_tests(metafunc):  # type: ignore[no-untyped-def]
    if "fixable_case" in metafunc.fixturenames:
        from doctor.rules.loader import load_catalogue

        metafunc.parametrize("rule_id,fixable_case", _fixable_cases(load_catalogue(use_cache=False)))


def test_every_rule_with_an_automatic_fix(rule_id: str, fixable_case, cat, rel) -> None:  # type: ignore[no-untyped-def]
    """Whenever one of a rule's own fixes clears it on its own, the plan clears it too; the plan
    never leaves an error it does not list as unresolved; every pin is a real release."""
    facts, workload = case_inputs(fixable_case)
    plan = plan_fixes(rel, cat, facts, workload)
    rule = cat.rule(rule_id)
    from doctor.rules.evaluate import diagnose, offered_fixes

    # a fix whose `when:` is false here is not offered, so not planned either
    ctx = diagnose(cat, facts, workload).context(facts, workload)
    clearable = any(
        f.checkable and recheck(cat, facts, workload, f, (rule_id,)).verified
        for f, _ in offered_fixes(rule.fixes, ctx)
        if all(rel.exists(p.name, p.version) or rel.torch_row(p.version) for p in f.pins)
    )
    if clearable and rule.severity == "warning" and (rule_id in plan.kept_warnings or rule_id in plan.unresolved):
        # a warning is cleared only without moving an installed package, adding a conflict or
        # bringing up another finding; its fixes are then listed as alternatives, with what they cost
        alts = [a for a in plan.alternatives if rule_id in a.rule_ids]
        assert alts, plan.alternatives
        assert rule_id in plan.kept_warnings or all(a.why for a in alts)
    elif clearable:
        assert rule_id in plan.cleared, (plan.pins, dict(plan.env), plan.notes)
    errors = _errors_after(cat, facts, workload, plan)
    assert set(errors) <= set(plan.unresolved), errors
    assert plan.verified, "a plan never brings up a new error"
    for pin in plan.pins:
        assert rel.exists(pin.name, pin.version) or (pin.name == "torch" and rel.torch_row(pin.version)), pin


def test_seed_rules_are_in_the_catalogue(cat) -> None:  # type: ignore[no-untyped-def]
    for rule_id in SEEDS:
        assert cat.rule(rule_id).fixes
