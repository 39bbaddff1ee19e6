"""The backend model against what the libraries themselves said on a real GPU.

docs/gpu-runs/2026-11-22-h100-te-fa/ holds TransformerEngine 2.20.2's get_attention_backend
answers and torch's _fused_sdp_choice answers for 62 workloads on an H100, and the probe
snapshot of that machine. Re-running the doctor's diagnosis on that snapshot must keep
agreeing with them: a rule change that contradicts the real selection fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "docs" / "gpu-runs" / "2026-11-22-h100-te-fa"
MATRIX = ROOT / "docs" / "gpu-runs" / "2026-11-22-h100-sdpa-matrix"
FA2_MATRIX = ROOT / "docs" / "gpu-runs" / "2026-11-22-h100-fa2-matrix"
TE_MATRIX = ROOT / "docs" / "gpu-runs" / "2026-11-22-h100-te-matrix"
# The workloads where TE 2.20.2 on the H100 still disagrees with the doctor, each explained in
# docs/gpu-runs/README.md; a new disagreement, or one that goes away, fails the test.
TE_MATRIX_KNOWN = {
    "wheelcudnn": {"t2482"},
    # TE loads the image's cuDNN 9.14 while torch loads its wheel's 9.19: the doctor reads 9.19
    "systemcudnn": {"t2482", "t0445", "t1342"},
}


def _selection() -> Any:
    spec = importlib.util.spec_from_file_location("te_selection", ROOT / "benchmarks" / "gpu" / "te_selection.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _disagreeing(out: Any) -> set:
    """The workloads where the library and the doctor differ in pick or in any availability
    (workloads the question cannot stand for, or that were not asked, left out)."""
    return {r["name"] for r in out["rows"]
            if r["verdict"] not in ("not_comparable", "not_asked") and (r["verdict"] != "confirmed" or r["mismatches"])}


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("sel") / "cmp"
    return _selection().compare(RUN / "probe.json", RUN / "te-select.jsonl", out)


def test_torch_sdpa_filters_agree_with_torch_on_the_2000_workload_matrix(tmp_path: Path) -> None:
    """torch 2.11's own can_use_* and _fused_sdp_choice on an H100 for 2,000 random workloads
    (dtype, head dims incl. odd and MLA pairs, GQA, lengths, masks, windows, dropout, training,
    determinism): the doctor's SDPA rules must give the same pick and per-backend availability."""
    out = _selection().compare(MATRIX / "probe.json", MATRIX / "answers.jsonl", tmp_path / "cmp")
    torch = out["libraries"]["torch"]
    assert torch["workloads"] == 2000
    assert _disagreeing(out) == set()
    assert torch["availability_agree"] == torch["availability_pairs"] == 8000


def test_flash_attn_2_kernels_agree_with_the_doctor_on_the_1500_workload_matrix(tmp_path: Path) -> None:
    """flash-attn 2.8.3.post2's real kernels (forward, and backward in training) on an H100 for
    1,500 random workloads (dtype, head dims, GQA, masks, windows, softcap, ALiBi, dropout,
    packed sequences, determinism): where the call ran, the doctor must call FA2 available, and
    where it raised, unavailable."""
    out = _selection().compare(FA2_MATRIX / "probe.json", FA2_MATRIX / "answers.jsonl", tmp_path / "cmp")
    fa = out["libraries"]["flash-attn"]
    assert fa["workloads"] == 1500
    assert _disagreeing(out) == set()
    refused = sum(1 for r in out["rows"] if r["library_pick"] is None)
    assert 0 < refused < 1500  # both kinds of answer are in the run


@pytest.mark.parametrize("cudnn", sorted(TE_MATRIX_KNOWN))
def test_transformer_engine_2_20_agrees_on_the_2500_workload_matrix(cudnn: str, tmp_path: Path) -> None:
    """TE 2.20.2's get_attention_backend on an H100, with the real cuDNN deciding the fused
    sub-backend, for 2,500 random workloads (fp8, THD, packed, every mask, windows, ALiBi,
    softcap, dropout, determinism, context parallelism): the doctor must pick the same backend
    and call each backend available or not as TE does, except on the listed workloads."""
    out = _selection().compare(TE_MATRIX / f"probe-{cudnn}.json", TE_MATRIX / f"answers-{cudnn}.jsonl",
                               tmp_path / "cmp")
    te = out["libraries"]["transformer-engine"]
    assert te["workloads"] >= 2300
    assert _disagreeing(out) == TE_MATRIX_KNOWN[cudnn]


def test_transformer_engine_selection_and_availability_agree_on_every_workload(result: Any) -> None:
    te = result["libraries"]["transformer-engine"]
    assert te["workloads"] >= 50
    bad = [(r["name"], r["library_pick"], r["doctor_pick"], r["mismatches"]) for r in result["rows"]
           if r["library"] == "transformer-engine" and (r["verdict"] != "confirmed" or r["mismatches"])]
    assert bad == []


def test_torch_sdpa_agrees_wherever_the_question_stands_for_the_workload(result: Any) -> None:
    bad = [(r["name"], r["library_pick"], r["doctor_pick"], r["mismatches"]) for r in result["rows"]
           if r["library"] == "torch" and r["verdict"] not in ("not_comparable", "not_asked")
           and (r["verdict"] != "confirmed" or r["mismatches"])]
    assert bad == []
    assert result["libraries"]["torch"]["workloads"] >= 40


def test_the_softcap_workloads_are_among_them(result: Any) -> None:
    rows = [r for r in result["rows"] if r["library"] == "transformer-engine" and "softcap" in r["name"]]
    assert rows and all(r["library_pick"] == "te.flash" for r in rows)
