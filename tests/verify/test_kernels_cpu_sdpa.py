"""Real SDPA runs on CPU through the whole runner (worker process, judge, report): the math
backend for every feature the default matrix covers, and refusals recorded as unsupported."""

from __future__ import annotations

import pytest

from doctor.verify import make_case, run_cases

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

SMALL = dict(batch=1, heads_q=4, heads_kv=4, seq_q=64, seq_kv=64, head_dim_qk=32,
             head_dim_v=32)


def _cases():
    m = "sdpa.math"
    return [
        make_case(m, **SMALL),
        make_case(m, **{**SMALL, "heads_kv": 2}),
        make_case(m, **{**SMALL, "seq_q": 32, "seq_kv": 96}, mask="causal_bottom_right"),
        make_case(m, **{**SMALL, "head_dim_qk": 48}),  # MLA: d_qk != d_v
        make_case(m, **{**SMALL, "window": (8, 0)}),
        make_case(m, **{**SMALL, "head_dim_v": 64, "dropout": 0.25, "mask": "no_mask"}),
        make_case(m, dtype="fp16", head_dim_qk=64, head_dim_v=64, heads_q=16, heads_kv=1,
                  seq_q=128, seq_kv=128, batch=1, layout="strided-qkv"),
        make_case(m, head_dim_qk=32, head_dim_v=32, heads_q=4, heads_kv=4, seq_q=40,
                  seq_kv=40, batch=3, layout="varlen", mask="no_mask"),
        make_case("sdpa.flash", **SMALL),  # torch's CPU flash kernel
        make_case("sdpa.efficient", **SMALL),  # CUDA only: refused on CPU
        make_case("sdpa.flash", **SMALL, bench=True, judge=False, shape="s"),
    ]


def test_cpu_sdpa_cases_pass_and_refusals_are_unsupported() -> None:
    cases = _cases()
    run = run_cases(cases, device="cpu", timeout_s=120)
    res = {r.id: r for r in run.results}
    assert run.environment.device == "cpu" and run.environment.torch
    for c in cases[:9]:
        assert res[c.id].status == "passed", (c.id, res[c.id].detail)
        assert res[c.id].max_rel_error is not None and res[c.id].max_rel_error < 0.05
    refused = res[cases[9].id]
    assert refused.status == "unsupported" and "No viable backend" in refused.detail
    timed = res[cases[10].id]
    assert timed.status == "passed" and timed.ms > 0 and timed.tflops > 0
    assert "dropout kept" in res[cases[5].id].detail
    details = {d.id: d for d in run.details}
    assert {t.name for t in details[cases[0].id].checks} == {"out", "dq", "dk", "dv"}
    assert run.phases.import_s > 0 and run.phases.workers == 1

