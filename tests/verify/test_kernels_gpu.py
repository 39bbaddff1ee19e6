"""Real kernel runs on a CUDA GPU (skipped without one): the product's key claims."""

from __future__ import annotations

import pytest

from doctor.verify import make_case, run_cases

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _run(*cases):
    run = run_cases(list(cases), device="cuda", timeout_s=120)
    return {r.id: r for r in run.results}, run


def test_flash_and_cudnn_refuse_head_dim_320_and_math_passes() -> None:
    cases = [make_case(b, head_dim_qk=320, head_dim_v=320, mask="no_mask", direction="fwd")
             for b in ("sdpa.flash", "sdpa.cudnn", "sdpa.math")]
    res, run = _run(*cases)
    assert run.environment.device == "cuda"
    assert res[cases[0].id].status == "unsupported"
    assert res[cases[1].id].status == "unsupported"
    assert res[cases[2].id].status == "passed"


def test_seed004_strided_gqa_passes_on_sdpa_flash_and_math() -> None:
    cases = [make_case(b, dtype="fp16", head_dim_qk=64, head_dim_v=64, heads_q=16, heads_kv=1,
                       seq_q=2048, seq_kv=2048, batch=1, layout="strided-qkv")
             for b in ("sdpa.flash", "sdpa.math")]
    res, _ = _run(*cases)
    for c in cases:
        assert res[c.id].status == "passed", res[c.id].detail
        assert res[c.id].max_rel_error is not None and res[c.id].max_rel_error < 0.05


def test_bottom_right_causal_with_short_queries_passes_on_flash() -> None:
    c = make_case("sdpa.flash", seq_q=128, seq_kv=384, mask="causal_bottom_right")
    res, _ = _run(c)
    assert res[c.id].status == "passed", res[c.id].detail


def test_timing_case_reports_ms_and_tflops() -> None:
    c = make_case("sdpa.flash", batch=1, heads_q=16, heads_kv=16, seq_q=2048, seq_kv=2048,
                  bench=True, judge=False, shape="s")
    res, _ = _run(c)
    assert res[c.id].status == "passed"
    assert res[c.id].ms and res[c.id].ms > 0 and res[c.id].tflops and res[c.id].tflops > 1
