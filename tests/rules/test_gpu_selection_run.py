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


def _selection() -> Any:
    spec = importlib.util.spec_from_file_location("te_selection", ROOT / "benchmarks" / "gpu" / "te_selection.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    bad = [(r["name"], r["library_pick"], r["doctor_pick"], r["mismatches"]) for r in out["rows"]
           if r["verdict"] != "confirmed" or r["mismatches"]]
    assert bad[:5] == []
    assert torch["availability_agree"] == torch["availability_pairs"] == 8000


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
