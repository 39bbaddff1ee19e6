"""Context-parallel attention across the ranks, checked against a float64 reference.

The sequence is sharded the way Megatron-LM / TransformerEngine shard it for causal
attention: cut into 2*N chunks, rank r holds chunks r and 2N-1-r (load balanced). Two schemes:

- `all_gather` (TE cp_comm_type="all_gather"): K/V are all-gathered; each local query chunk
  attends to the keys up to its own end with a *bottom-right* aligned causal mask (query chunk
  shorter than the keys: its last row sees the last key). Computed with PyTorch SDPA and
  `causal_lower_right`, the fused path a real CP implementation takes; a top-left mask here
  would be silently wrong.
- `p2p` (ring attention, TE cp_comm_type="p2p"): K/V blocks travel around the ring with
  send/recv (batch_isend_irecv, overlapped with compute); each step's partial output and
  log-sum-exp are merged by online softmax. Block pairs above the diagonal are skipped,
  diagonal ones masked, the rest computed in full, as ring implementations do.

Every rank draws the same full Q/K/V from one seed, keeps its shard, runs the scheme; outputs
are all-gathered and rank 0 compares them with single-device float64 attention over the whole
sequence. torch is imported inside the functions only.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, List, Optional, Tuple

from doctor.cluster.report import CpResult

SCHEMES = ("all_gather", "p2p")
# On max|out - ref| / max|ref|: the forward floor the kernel stage uses (2 x machine epsilon,
# kernels/reference.py), wider for fp32 where SDPA's CPU path is a few ulps off in one pass.
TOLERANCE = {"bf16": 2.0**-6, "fp16": 2.0**-9, "fp32": 1e-5, "fp64": 1e-12}
TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp64": "float64"}


@dataclass(frozen=True)
class CpConfig:
    """Shape of the CP check. seq_len must divide into 2 * world_size chunks."""

    seq_len: int = 8192
    batch: int = 1
    heads: int = 16
    head_dim: int = 128
    dtype: str = "bf16"
    causal: bool = True
    seed: int = 1234
    schemes: Tuple[str, ...] = SCHEMES

    @classmethod
    def for_device(cls, cuda: bool, world: int = 1) -> "CpConfig":
        """Defaults: a training-like shape on GPUs, a tiny float32 one on CPU (tests); the
        sequence is rounded up to a multiple of 2 x world so every rank gets two equal chunks."""
        cfg = cls() if cuda else cls(seq_len=16 * world, heads=2, head_dim=16, dtype="fp32")
        step = 2 * world
        return replace(cfg, seq_len=-(-cfg.seq_len // step) * step)


# --------------------------------------------------------------------------- sharding


def chunk_ids(rank: int, world: int) -> Tuple[int, int]:
    """The two load-balanced chunks rank `rank` holds: (r, 2N-1-r)."""
    return rank, 2 * world - 1 - rank


def _shard(x: Any, rank: int, world: int, dim: int = 2) -> Any:
    import torch

    chunks = x.chunk(2 * world, dim=dim)
    a, b = chunk_ids(rank, world)
    return torch.cat([chunks[a], chunks[b]], dim=dim)


def _unshard(parts: List[Any], world: int, dim: int = 2) -> Any:
    """Inverse of `_shard` over all ranks: parts[r] is rank r's two chunks."""
    import torch

    chunks: List[Any] = [None] * (2 * world)
    for r, part in enumerate(parts):
        first, second = part.chunk(2, dim=dim)
        a, b = chunk_ids(r, world)
        chunks[a], chunks[b] = first, second
    return torch.cat(chunks, dim=dim)


# --------------------------------------------------------------------------- blocks


def _bottom_right_mask(lq: int, lk: int, device: Any) -> Any:
    """Boolean (lq, lk): query i sees key j iff j <= i + (lk - lq)."""
    import torch

    q = torch.arange(lq, device=device).unsqueeze(1)
    k = torch.arange(lk, device=device).unsqueeze(0)
    return k <= q + (lk - lq)


def _sdpa_bottom_right(q: Any, k: Any, v: Any, causal: bool) -> Tuple[Any, str]:
    """Attention of q over k/v, causal aligned bottom-right. Returns (out, what computed it).

    On CUDA through `causal_lower_right`, which SDPA hands to its fused kernels (what CP
    implementations run); on CPU through an explicit boolean mask (same semantics, and
    it spares CPU runs the ~1 s import of torch.nn.attention.bias)."""
    import torch.nn.functional as F

    if not causal:
        return F.scaled_dot_product_attention(q, k, v), "sdpa"
    lq, lk = q.shape[-2], k.shape[-2]
    if q.device.type == "cuda":
        try:
            from torch.nn.attention.bias import causal_lower_right

            out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(lq, lk))
            return out, "sdpa causal_lower_right"
        except ImportError:  # torch < 2.3
            pass
    mask = _bottom_right_mask(lq, lk, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), "sdpa explicit bottom-right mask"


def _partial(q: Any, k: Any, v: Any, mask: Optional[Any]) -> Tuple[Any, Any]:
    """Float32 attention of one block pair: (out, lse); rows with no visible key give lse=-inf, out=0."""
    import torch

    scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))
    p = torch.nan_to_num(p, nan=0.0)
    return torch.matmul(p, v.float()), lse


def _merge(out: Any, lse: Any, out_b: Any, lse_b: Any) -> Tuple[Any, Any]:
    """Online-softmax merge of two partial results over disjoint key sets."""
    import torch

    new = torch.logaddexp(lse, lse_b)
    finite = torch.isfinite(new)
    w_a = torch.where(finite, torch.exp(lse - new), torch.zeros_like(new)).unsqueeze(-1)
    w_b = torch.where(finite, torch.exp(lse_b - new), torch.zeros_like(new)).unsqueeze(-1)
    return out * w_a + out_b * w_b, new


# --------------------------------------------------------------------------- schemes


def all_gather_attention(q: Any, k: Any, v: Any, rank: int, world: int, causal: bool, group: Any = None) -> Tuple[Any, str]:
    """This rank's output (its two chunks) under the all-gather scheme."""
    import torch
    import torch.distributed as dist

    kv = torch.cat([k, v], dim=-1).contiguous()
    parts = [torch.empty_like(kv) for _ in range(world)]
    dist.all_gather(parts, kv, group=group)
    full = _unshard(parts, world)
    k_full, v_full = full.split([k.shape[-1], v.shape[-1]], dim=-1)
    chunk = q.shape[2] // 2
    outs: List[Any] = []
    kernel = ""
    for i, cid in enumerate(chunk_ids(rank, world)):
        q_c = q[:, :, i * chunk : (i + 1) * chunk]
        end = (cid + 1) * chunk if causal else k_full.shape[2]
        out, kernel = _sdpa_bottom_right(
            q_c, k_full[:, :, :end].contiguous(), v_full[:, :, :end].contiguous(), causal
        )
        outs.append(out)
    return torch.cat(outs, dim=2), kernel


def _positions(rank: int, world: int, chunk: int, device: Any) -> Any:
    import torch

    a, b = chunk_ids(rank, world)
    return torch.cat(
        [torch.arange(a * chunk, (a + 1) * chunk, device=device), torch.arange(b * chunk, (b + 1) * chunk, device=device)]
    )


def ring_attention(q: Any, k: Any, v: Any, rank: int, world: int, causal: bool, group: Any = None) -> Tuple[Any, str]:
    """This rank's output under the p2p ring scheme (online-softmax merge of partials)."""
    import torch
    import torch.distributed as dist

    chunk = q.shape[2] // 2
    q_pos = _positions(rank, world, chunk, q.device)
    b, h, _, d = q.shape
    out = torch.zeros(b, h, 2 * chunk, v.shape[-1], device=q.device, dtype=torch.float32)
    lse = torch.full((b, h, 2 * chunk), float("-inf"), device=q.device, dtype=torch.float32)
    kv = torch.cat([k, v], dim=-1).contiguous()
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for step in range(world):
        src = (rank - step) % world
        reqs: List[Any] = []
        recv = None
        if step < world - 1:
            recv = torch.empty_like(kv)
            ops = [
                dist.P2POp(dist.isend, kv, nxt, group=group),
                dist.P2POp(dist.irecv, recv, prv, group=group),
            ]
            reqs = dist.batch_isend_irecv(ops)
        k_blk, v_blk = kv.split([k.shape[-1], v.shape[-1]], dim=-1)
        k_pos = _positions(src, world, chunk, q.device)
        for qi in range(2):
            qs = slice(qi * chunk, (qi + 1) * chunk)
            for ki in range(2):
                ks = slice(ki * chunk, (ki + 1) * chunk)
                qp, kp = q_pos[qs], k_pos[ks]
                mask = None
                if causal:
                    if int(kp.min()) > int(qp.max()):
                        continue  # above the diagonal: nothing visible
                    if int(kp.max()) > int(qp.min()):
                        mask = kp.unsqueeze(0) <= qp.unsqueeze(1)
                o_b, l_b = _partial(q[:, :, qs], k_blk[:, :, ks], v_blk[:, :, ks], mask)
                out[:, :, qs], lse[:, :, qs] = _merge(out[:, :, qs], lse[:, :, qs], o_b, l_b)
        for req in reqs:
            req.wait()
        if recv is not None:
            kv = recv
    return out.to(q.dtype), "float32 block matmul + online softmax"


SCHEME_FN: dict = {"all_gather": all_gather_attention, "p2p": ring_attention}


# --------------------------------------------------------------------------- check


def make_qkv(cfg: CpConfig, device: Any) -> Tuple[Any, Any, Any]:
    """The full Q, K, V (batch, heads, seq, dim), identical on every rank (CPU generator)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(cfg.seed)
    dtype = getattr(torch, TORCH_DTYPE[cfg.dtype])
    shape = (cfg.batch, cfg.heads, cfg.seq_len, cfg.head_dim)
    return tuple(torch.randn(shape, generator=gen).to(device=device, dtype=dtype) for _ in range(3))  # type: ignore[return-value]


def reference(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """Float64 attention over the whole sequence, one head at a time (bounded memory)."""
    import torch

    scale = 1.0 / math.sqrt(q.shape[-1])
    out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=torch.float64, device=q.device)
    n = q.shape[2]
    mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril() if causal else None
    for bi in range(q.shape[0]):
        for hi in range(q.shape[1]):
            s = (q[bi, hi].double() @ k[bi, hi].double().T) * scale
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            out[bi, hi] = torch.softmax(s, dim=-1) @ v[bi, hi].double()
    return out


def _not_run(cfg: CpConfig, scheme: str, world: int, detail: str) -> CpResult:
    return CpResult(
        scheme=scheme,
        causal=cfg.causal,
        dtype=cfg.dtype,
        world_size=world,
        seq_len=cfg.seq_len,
        heads=cfg.heads,
        head_dim=cfg.head_dim,
        ok=None,
        detail=detail,
    )


def _barrier(group: Any, device: Any) -> None:
    """A barrier through the data backend (an all_reduce: NCCL barriers need a device guess)."""
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.zeros(1, device=device), group=group)


def check(
    rank: int, world: int, device: Any, cfg: CpConfig, group: Any = None
) -> Tuple[Tuple[CpResult, ...], Tuple[str, ...]]:
    """Run every scheme of `cfg` on all ranks: (results on rank 0 else (), this rank's errors).

    Each scheme runs once to warm up, then once timed; the timed output is compared. A rank
    whose scheme raises still takes part in the output all_gather with NaNs, so rank 0 names
    it as the rank with non-finite output.
    """
    import torch
    import torch.distributed as dist

    if cfg.seq_len % (2 * world):
        why = f"seq_len {cfg.seq_len} is not divisible by 2 x {world} ranks"
        return tuple(_not_run(cfg, s, world, why) for s in cfg.schemes), ()
    q, k, v = make_qkv(cfg, device)
    ref = reference(q, k, v, cfg.causal) if rank == 0 else None
    mine = [_shard(t, rank, world) for t in (q, k, v)]
    del q, k, v
    results: List[CpResult] = []
    errors: List[str] = []
    for scheme in cfg.schemes:
        fn: Callable[..., Tuple[Any, str]] = SCHEME_FN[scheme]
        kernel, ms, out = "", None, None
        _barrier(group, device)
        try:
            fn(*mine, rank, world, cfg.causal, group)  # warm-up: kernel choice, communicator set-up
        except Exception as exc:  # noqa: BLE001 - a failing scheme is a result
            errors.append(f"CP {scheme}: {type(exc).__name__}: {exc}")
            out = torch.full_like(mine[0], float("nan"))
        _barrier(group, device)
        if out is None:
            try:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                out, kernel = fn(*mine, rank, world, cfg.causal, group)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                ms = (time.perf_counter() - start) * 1e3
            except Exception as exc:  # noqa: BLE001
                errors.append(f"CP {scheme}: {type(exc).__name__}: {exc}")
                out = torch.full_like(mine[0], float("nan"))
        parts = [torch.empty_like(out) for _ in range(world)]
        dist.all_gather(parts, out.contiguous(), group=group)
        if rank == 0:
            results.append(_compare(cfg, scheme, world, parts, ref, kernel, ms))
    return tuple(results), tuple(errors)


def _compare(cfg: CpConfig, scheme: str, world: int, parts: List[Any], ref: Any, kernel: str, ms: Optional[float]) -> CpResult:
    """Rank 0: the gathered CP output against the float64 reference."""
    import torch

    bad = [r for r, p in enumerate(parts) if not bool(torch.isfinite(p).all().item())]
    full = _unshard(parts, world).double()
    err = (full - ref).abs()
    max_abs = float(torch.nan_to_num(err, nan=float("inf")).max().item())
    max_rel = max_abs / max(float(ref.abs().max().item()), 1e-30)
    tol = TOLERANCE[cfg.dtype]
    ok = not bad and max_rel <= tol
    if bad:
        detail = f"non-finite output from rank(s) {bad} (an error there, or NaN/Inf in the kernel)"
    elif not ok:
        detail = f"max relative error {max_rel:.3g} exceeds {tol:.3g} for {cfg.dtype}"
    else:
        detail = ""
    return replace(
        _not_run(cfg, scheme, world, detail),
        ok=ok,
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        tolerance=tol,
        ms=ms,
        kernel=kernel,
    )
