"""Asking the libraries for their own backend pick (kernels/ask.py) and the join with the
doctor's prediction (doctor/verify/asked.py): on CPU with torch, without TransformerEngine."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from doctor.verify.asked import asked_lines, compare
from doctor.model import BackendStatus, Facts, Report, Workload
from doctor.resources import kernels_dir
from doctor.verify import CaseSpec, ask_request, run_cases


@pytest.fixture(scope="module")
def ask() -> Any:
    pytest.importorskip("torch")
    path = str(kernels_dir())
    if path not in sys.path:
        sys.path.insert(0, path)
    import ask as mod

    return mod


SMALL = dict(seq_len_q=64, seq_len_kv=64, num_heads=4, num_kv_heads=4, head_dim_qk=32,
             head_dim_v=32, batch_size=1)


def test_torch_answers_with_a_pick_and_keeps_math_available(ask: Any) -> None:
    ans = ask.torch_choice(SMALL)
    assert ans["error"] is None
    assert ans["selected"] in ("sdpa.flash", "sdpa.efficient", "sdpa.cudnn", "sdpa.math")
    assert ans["available"]["sdpa.math"] is True
    assert ans["asked_shape"] == [1, 4, 4, 64, 64, 32, 32]


def test_deterministic_question_leaves_the_global_switch_as_it_was(ask: Any) -> None:
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    ans = ask.torch_choice({**SMALL, "deterministic": True})
    assert ans["error"] is None
    assert torch.are_deterministic_algorithms_enabled() == before


def test_fp8_is_not_asked_of_sdpa(ask: Any) -> None:
    ans = ask.torch_choice({**SMALL, "dtype": "fp8"})
    assert ans["selected"] is None and "FP8" in ans["error"]


def test_te_layout_and_mask_follow_the_tensors_dot_product_attention_gets(ask: Any) -> None:
    w = ask._w
    assert ask.te_qkv_layout(w({})) == "bshd_bshd_bshd"
    assert ask.te_qkv_layout(w({"qkv_packed": True, "num_heads": 16, "num_kv_heads": 16})) == "bs3hd"
    assert ask.te_qkv_layout(w({"qkv_packed": True, "num_heads": 16, "num_kv_heads": 1})) == "bshd_bs2hd"
    assert ask.te_qkv_layout(w({"varlen": True})) == "thd_thd_thd"
    # an interleaved fused QKV ([..., heads, 3, d], TE MultiheadAttention's default) is TE's h3d family
    assert ask.te_qkv_layout(w({"qkv_packed": True, "qkv_weight_interleaved": True, "num_heads": 16, "num_kv_heads": 16})) == "bsh3d"
    assert ask.te_qkv_layout(w({"qkv_packed": True, "qkv_weight_interleaved": True, "varlen": True, "num_heads": 16, "num_kv_heads": 16})) == "th3d"
    assert ask.te_qkv_layout(w({"qkv_packed": True, "qkv_weight_interleaved": True, "qkv_format": "sbhd", "num_heads": 16, "num_kv_heads": 2})) == "sbhd_sbh2d"
    assert ask.te_mask(w({"varlen": True, "mask": "causal"})) == "padding_causal"
    assert ask.te_mask(w({"varlen": True, "mask": "no_mask"})) == "padding"
    assert ask.te_mask(w({"mask": "causal_bottom_right"})) == "causal_bottom_right"


def test_without_transformer_engine_only_torch_answers(ask: Any) -> None:
    from importlib.util import find_spec

    if find_spec("transformer_engine") is not None:
        pytest.skip("TransformerEngine is installed here")
    libs = [a["library"] for a in ask.ask(SMALL, ["torch", "te"])]
    assert libs == ["torch"]


@pytest.mark.slow
def test_worker_asks_before_the_cases_and_the_run_keeps_the_answers() -> None:
    pytest.importorskip("torch")
    case = CaseSpec(id="selftest.pass/x", backend="selftest.pass", dtype="bf16", head_dim_qk=32,
                    head_dim_v=32, heads_q=4, heads_kv=4, seq_q=64, seq_kv=64, batch=1,
                    mask="causal", direction="fwd")
    req = ask_request(Workload(seq_len_q=64, seq_len_kv=64, num_heads=4, num_kv_heads=4,
                               head_dim_qk=32, head_dim_v=32), name="w")
    run = run_cases([case], device="cpu", env={"ATTN_DOCTOR_WORKER_SELFTEST": "1"}, ask=[req],
                    timeout_s=120)
    assert run.results[0].status == "passed"
    assert [a["name"] for a in run.asked] == ["w"]
    assert run.asked[0]["answers"][0]["library"] == "torch"
    assert run.to_json()["asked"][0]["name"] == "w"


def _status(bid: str, fw: str, available: bool, selected: bool = False) -> BackendStatus:
    return BackendStatus(id=bid, framework=fw, name=bid, available=available, selected=selected)


def test_compare_names_the_verdict_and_each_availability_disagreement() -> None:
    ans = {"library": "transformer-engine", "selected": "te.flash",
           "available": {"te.flash": True, "te.fused": False, "te.unfused": True}}
    c = compare(ans, "te.fused", {"te.flash": True, "te.fused": True, "te.unfused": True})
    assert c["verdict"] == "refuted"
    assert c["mismatches"] == [{"backend": "te.fused", "library": False, "doctor": True}]
    same = compare(ans, "te.flash", {"te.flash": True, "te.fused": False, "te.unfused": None})
    assert same["verdict"] == "confirmed" and same["mismatches"] == []  # unknown: not counted
    assert compare({"error": "ImportError: x"}, "te.fused", {})["verdict"] == "not_asked"


def test_asked_lines_join_answers_to_the_reported_selection() -> None:
    report = Report(facts=Facts(), workload=Workload(), backends=(
        _status("te.fused", "transformer-engine", True, selected=True),
        _status("te.flash", "transformer-engine", True),
        _status("sdpa.cudnn", "torch-sdpa", True, selected=True)), findings=())

    class Run:
        asked = ({"name": "workload", "answers": [
            {"library": "transformer-engine", "selected": "te.fused", "fused_sub_backend": 1,
             "available": {"te.fused": True, "te.flash": False}},
            {"library": "torch", "selected": "sdpa.cudnn", "available": {"sdpa.cudnn": True}}]},)

    lines = dict(asked_lines(report, Run()))
    assert "confirmed" in lines["transformer-engine asked (workload)"]
    assert "sub-backend 1" in lines["transformer-engine asked (workload)"]
    assert lines["transformer-engine asked: te.flash"] == "library says unavailable, doctor said available"
    assert "confirmed" in lines["torch-sdpa asked (workload)"]
