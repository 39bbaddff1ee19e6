"""TransformerEngine's own backend selection, recorded by tools/te_oracle.py, replayed offline.

docs/te-oracle/cases-subset.jsonl holds cases drawn from the oracle's matrix (16 per TE
release, 1.9 to 2.20) with the answer TE's get_attention_backend gave for them: which of
FlashAttention, FusedAttention and UnfusedDotProductAttention are available and which one
runs. The doctor's catalogue, evaluated through its own engine, must give the same answer.

The releases with no wheel on PyPI, run from their git tags, follow (16 each): TE 2.0 through
get_attention_backend, TE 1.0-1.8 through DotProductAttention.forward, where only the backend
TE called (or the error it raised) is recorded ("mode": "forward"). The catalogue checks TE
from 1.9 on (the framework's `covers:`), so for 1.0-1.8 the doctor must decide nothing.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUBSET = REPO / "docs" / "te-oracle" / "cases-subset.jsonl"


def _oracle():
    spec = importlib.util.spec_from_file_location("te_oracle", REPO / "tools" / "te_oracle.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def oracle():
    return _oracle()


@pytest.fixture(scope="module")
def model(oracle):
    return oracle.DoctorModel()


def _records():
    return [json.loads(line) for line in SUBSET.read_text(encoding="utf-8").splitlines() if line.strip()]


def _covered(model, rec) -> bool:
    from doctor.versions import below_release

    return not below_release(rec["case"]["te_version"], model.catalogue.floors["transformer-engine"])


def test_subset_covers_every_release_and_both_cpp_verdicts():
    recs = _records()
    versions = {r["case"]["te_version"] for r in recs}
    assert len(recs) >= 300
    assert {"1.9.0.post1", "1.13.0", "2.3.0", "2.18.0", "2.20.2"} <= versions
    assert {r["case"]["cpp"] for r in recs} == {"supported", "none"}
    assert {r["te"].get("selected") for r in recs if r["te"]["status"] == "ok"} >= {"te.flash", "te.fused", "te.unfused", None}


def test_doctor_agrees_with_recorded_te_choices(oracle, model):
    wrong = []
    for rec in (r for r in _records() if _covered(model, r)):
        diff = oracle.compare(rec["te"], model.answer(rec["case"]))
        if diff is not None:
            wrong.append(f"{rec['case']['te_version']} sm{rec['case']['sm']}: {diff}")
    assert not wrong, f"{len(wrong)} recorded TE choices the doctor now contradicts:\n" + "\n".join(wrong[:20])


def test_a_changed_rule_is_caught(oracle, model):
    """The replay is not vacuous: dropping the rule for NVTE_FUSED_ATTN=0 breaks agreement."""
    from dataclasses import replace

    broken = oracle.DoctorModel.__new__(oracle.DoctorModel)
    broken.catalogue = replace(model.catalogue, rules=tuple(r for r in model.catalogue.rules if r.id != "TE-ENV-FUSED-OFF"))
    recs = [r for r in _records() if r["case"]["env"].get("NVTE_FUSED_ATTN") == "0" and r["case"]["cpp"] == "supported"]
    assert recs
    assert any(oracle.compare(r["te"], broken.answer(r["case"])) for r in recs)


def test_subset_covers_the_releases_run_from_tags():
    recs = _records()
    versions = {r["case"]["te_version"] for r in recs}
    assert {"1.0.0", "1.2.1", "1.5.0", "1.8.0", "2.0.0"} <= versions
    forward = [r for r in recs if r["te"].get("mode") == "forward"]
    assert {r["te"]["status"] for r in forward} >= {"ok", "raised"}
    assert {r["te"].get("selected") for r in forward if r["te"]["status"] == "ok"} >= {"te.flash", "te.fused", "te.unfused"}


def test_releases_below_the_coverage_are_left_undecided(oracle, model):
    """TE 1.0-1.8 (run from tags) are recorded, but the doctor judges none of them: no backend
    available or out, none selected, whatever TE did."""
    old = [r for r in _records() if not _covered(model, r)]
    assert {r["case"]["te_version"] for r in old} >= {"1.0.0", "1.8.0"}
    judged = [r["case"]["te_version"] for r in old if not oracle.left_undecided(model.answer(r["case"]))]
    assert not judged, f"releases below the coverage judged anyway: {judged[:10]}"


SINKS = REPO / "docs" / "te-oracle" / "cases-softmax-type.jsonl"


def _sink_records():
    return [json.loads(line) for line in SINKS.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_doctor_agrees_with_recorded_te_choices_for_sink_softmax(oracle, model):
    """TE 2.8-2.20.2 with softmax_type off-by-one / learnable (sample 28 row 28): FlashAttention
    off, FusedAttention's FP8 / THD / CP / determinism filters, unfused attention's FP8 and THD."""
    recs = _sink_records()
    assert {r["case"]["te_version"] for r in recs} >= {"2.8.0", "2.11.0", "2.12.0", "2.15.0", "2.20.2"}
    assert any("determinism reasons with softmax_type" in x for r in recs for x in r["te"]["reasons"])
    wrong = []
    for rec in recs:
        diff = oracle.compare(rec["te"], model.answer(rec["case"]))
        if diff is not None:
            wrong.append(f"{rec['case']['te_version']} sm{rec['case']['sm']} {rec['case']['softmax_type']}: {diff}")
    assert not wrong, f"{len(wrong)} recorded TE choices the doctor now contradicts:\n" + "\n".join(wrong[:20])


def test_sink_softmax_replay_is_not_vacuous(oracle, model):
    """Taking the softmax type away from the doctor's side (it then reads as vanilla) breaks agreement."""
    recs = _sink_records()
    broken = [r for r in recs if oracle.compare(r["te"], model.answer({k: v for k, v in r["case"].items() if k != "softmax_type"}))]
    assert len(broken) >= 20  # 27 of the 94 recorded cases in the committed file
