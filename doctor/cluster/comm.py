"""Communication smoke test: all_reduce and all_gather of known tensors, checked, then timed.

Runs on the job's own process group (NCCL on GPUs, gloo on CPU) with the tensors on this
rank's device. Every element has a known expected value (small integers, exact in float32),
so a wrong route, a corrupted buffer or a rank that sums something else shows up as an error
on the rank that sees it. Bandwidth follows the nccl-tests convention (algbw = bytes / time;
busbw = algbw * 2(n-1)/n for all_reduce, * (n-1)/n for all_gather). torch is imported lazily.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, List, Optional, Sequence, Tuple

from doctor.cluster.report import CommCheck, CommResult

GPU_BYTES = 256 * 1024 * 1024
CPU_BYTES = 1024 * 1024
GPU_ITERS = 20
CPU_ITERS = 3
WARMUP = 2


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn: Any, device: Any, iters: int) -> float:
    """Mean seconds per call of `fn` after WARMUP calls."""
    for _ in range(WARMUP):
        fn()
    _sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / iters


def _all_reduce(dist: Any, group: Any, device: Any, rank: int, world: int, nbytes: int, iters: int) -> CommCheck:
    import torch

    n = max(1, nbytes // 4)
    pattern = torch.arange(n, device=device, dtype=torch.int64).remainder_(251).to(torch.float32)
    x = pattern + float(rank + 1)
    dist.all_reduce(x, group=group)
    expected = pattern * world + float(world * (world + 1) // 2)
    err = float((x - expected).abs().max().item())
    ok = err == 0.0
    del x, expected, pattern
    buf = torch.zeros(n, device=device, dtype=torch.float32)
    seconds = _time(lambda: dist.all_reduce(buf, group=group), device, iters)
    algbw = n * 4 / seconds / 1e9
    return CommCheck(
        op="all_reduce",
        dtype="float32",
        bytes=n * 4,
        ok=ok,
        max_error=err,
        ms=seconds * 1e3,
        algbw_gbps=algbw,
        busbw_gbps=algbw * 2 * (world - 1) / world,
        detail="" if ok else f"sum over ranks wrong by up to {err:g} on rank {rank}",
    )


def _all_gather(dist: Any, group: Any, device: Any, rank: int, world: int, nbytes: int, iters: int) -> CommCheck:
    import torch

    n = max(1, nbytes // 4 // world)
    base = torch.arange(n, device=device, dtype=torch.int64).remainder_(997).to(torch.float32)
    mine = base + float(rank * 1000)
    out = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(out, mine, group=group)
    err = max(float((out[j] - (base + float(j * 1000))).abs().max().item()) for j in range(world))
    wrong = [j for j in range(world) if not torch.equal(out[j], base + float(j * 1000))]
    ok = not wrong
    seconds = _time(lambda: dist.all_gather(out, mine, group=group), device, iters)
    total = n * 4 * world
    algbw = total / seconds / 1e9
    return CommCheck(
        op="all_gather",
        dtype="float32",
        bytes=total,
        ok=ok,
        max_error=err,
        ms=seconds * 1e3,
        algbw_gbps=algbw,
        busbw_gbps=algbw * (world - 1) / world,
        detail="" if ok else f"rank {rank} received wrong data from ranks {wrong}",
    )


def smoke_test(
    rank: int,
    world_size: int,
    device: Any,
    group: Any = None,
    nbytes: Optional[int] = None,
    iters: Optional[int] = None,
) -> CommResult:
    """This rank's view of the smoke test on `group` (None: the default group).

    `device` is a torch.device; sizes default to 256 MiB / 20 iterations on CUDA and
    1 MiB / 3 iterations on CPU. A collective that raises is a failed check, not an exception.
    """
    import torch.distributed as dist

    cuda = device.type == "cuda"
    nbytes = nbytes or (GPU_BYTES if cuda else CPU_BYTES)
    iters = iters or (GPU_ITERS if cuda else CPU_ITERS)
    backend = str(dist.get_backend(group))
    checks: List[CommCheck] = []
    for op, fn in (("all_reduce", _all_reduce), ("all_gather", _all_gather)):
        try:
            checks.append(fn(dist, group, device, rank, world_size, nbytes, iters))
        except Exception as exc:  # noqa: BLE001 - a failing collective is the finding
            checks.append(
                CommCheck(op=op, dtype="float32", bytes=nbytes, ok=False, detail=f"{type(exc).__name__}: {exc}")
            )
    ok = all(c.ok for c in checks)
    return CommResult(
        backend=backend, device=device.type, world_size=world_size, ok=ok, checks=tuple(checks)
    )


def merge(per_rank: Sequence[Tuple[int, Optional[CommResult]]]) -> Optional[CommResult]:
    """One result for the job: rank 0's timings, values checked on every rank.

    A check fails if it failed on any rank; `failed_ranks` names them.
    """
    results = [(r, c) for r, c in per_rank if c is not None]
    if not results:
        return None
    results.sort(key=lambda rc: rc[0])
    base = results[0][1]
    merged: List[CommCheck] = []
    for i, check in enumerate(base.checks):
        failed: List[int] = []
        details: List[str] = []
        for r, res in results:
            other = res.checks[i] if i < len(res.checks) else None
            if other is None or not other.ok:
                failed.append(r)
                if other is not None and other.detail:
                    details.append(other.detail)
        merged.append(
            replace(
                check,
                ok=not failed,
                failed_ranks=tuple(failed),
                max_error=max((res.checks[i].max_error or 0.0) for _, res in results if i < len(res.checks)),
                detail="; ".join(dict.fromkeys(details)),
            )
        )
    ok = None if base.ok is None else all(c.ok for c in merged)
    return replace(base, ok=ok, checks=tuple(merged))
