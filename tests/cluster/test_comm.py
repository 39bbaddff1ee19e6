"""The comm smoke test checks values: a collective that returns wrong data fails it."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from doctor.cluster.comm import smoke_test  # noqa: E402


def test_correct_collectives_pass(one_rank: None) -> None:
    res = smoke_test(0, 1, torch.device("cpu"), nbytes=4096, iters=1)
    assert res.ok is True and res.backend == "gloo"
    assert [(c.op, c.ok, c.max_error) for c in res.checks] == [("all_reduce", True, 0.0), ("all_gather", True, 0.0)]
    assert all(c.ms and c.algbw_gbps and c.bytes == 4096 for c in res.checks)


def test_wrong_sum_and_a_raising_collective_fail(one_rank: None, monkeypatch: pytest.MonkeyPatch) -> None:
    real = dist.all_reduce

    def off_by_one(t: Any, *a: Any, **kw: Any) -> Any:
        out = real(t, *a, **kw)
        t.add_(1)
        return out

    def broken(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("NCCL error: unhandled system error")

    monkeypatch.setattr(dist, "all_reduce", off_by_one)
    monkeypatch.setattr(dist, "all_gather", broken)
    res = smoke_test(0, 1, torch.device("cpu"), nbytes=4096, iters=1)
    ar, ag = res.checks
    assert res.ok is False
    assert not ar.ok and ar.max_error == 1.0 and "wrong by up to 1" in ar.detail
    assert not ag.ok and "unhandled system error" in ag.detail
