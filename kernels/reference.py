"""Inputs, float64 reference, low-precision baseline and judging for the kernel cases.

Loaded by worker.py (sys.path points at this folder); it is not an importable package of
attn-doctor. Everything here is plain torch and runs on CPU as well as CUDA.

Tensors use the flash-attn layout throughout: q (B, Sq, Hq, Dqk), k (B, Skv, Hkv, Dqk),
v (B, Skv, Hkv, Dv), out (B, Sq, Hq, Dv); varlen cases pack all sequences into
(total_tokens, H, D) with cumulative offsets `cu_seqlens`.

Judging (docs/kernels.md has the full rule): for each of out, dq, dk, dv

    rel_error = max|kernel - ref64| / max|ref64|
    baseline  = max|naive(dtype) - ref64| / max|ref64|
    passed   <=> finite and rel_error <= K * baseline + F * eps(dtype)

where ref64 is the same attention computed in float64 from the same (rounded) inputs and
naive(dtype) is the textbook computation carried out in the case's own dtype (matmuls with
fp32 accumulation, softmax output rounded to dtype), which is what FlashAttention's own
tests use as the error budget. K is 3 for the forward output and 4 for gradients; the floor
F * eps (F = 2 forward, 8 gradients) covers reductions the naive form does in one pass but a
kernel does in several (GQA/MQA dk, dv sum over every query head of a group).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

DTYPES: Dict[str, torch.dtype] = {
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp32": torch.float32,
}
if hasattr(torch, "float8_e4m3fn"):
    DTYPES["fp8"] = torch.float8_e4m3fn

# Machine epsilon per case dtype: the absolute floor of the tolerance (relative to max|ref|).
EPS: Dict[str, float] = {"fp16": 2.0**-10, "bf16": 2.0**-7, "fp32": 2.0**-23, "fp8": 2.0**-3}
K_FWD = 3.0
K_BWD = 4.0
F_FWD = 2.0
F_BWD = 8.0
POISON_BYTE = 0xFF  # 0xFFFF is a NaN in fp16 and bf16, 0xFFFFFFFF a NaN in fp32


@dataclass
class Inputs:
    """The tensors one case runs on. q/k/v are views in bshd (or packed thd) layout."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    dout: torch.Tensor
    leaves: Dict[str, torch.Tensor]  # tensors whose .grad holds dq/dk/dv (or the fused qkv)
    sbhd: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None  # strided-qkv views
    cu_seqlens: Optional[torch.Tensor] = None  # int32, varlen only
    max_seqlen: int = 0

    def grads(self) -> Dict[str, Optional[torch.Tensor]]:
        """dq, dk, dv after backward (slices of the fused grad for strided-qkv)."""
        if "qkv" in self.leaves:
            g = self.leaves["qkv"].grad
            if g is None:
                return {"dq": None, "dk": None, "dv": None}
            hq, hkv = self.q.shape[2], self.k.shape[2]
            gq, gk, gv = g.split([hq, hkv, hkv], dim=2)
            return {n: t.transpose(0, 1) for n, t in (("dq", gq), ("dk", gk), ("dv", gv))}
        return {f"d{n}": self.leaves[n].grad for n in ("q", "k", "v")}

    def zero_grads(self) -> None:
        for t in self.leaves.values():
            t.grad = None


def case_seed(case_id: str, seed: int = 0) -> int:
    """A stable seed per case id, so a rerun sees the same random inputs."""
    digest = hashlib.sha256(f"{seed}:{case_id}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def _randn(shape: Sequence[int], gen: torch.Generator, device: torch.device) -> torch.Tensor:
    # Generated on CPU in float32 so CPU and GPU runs of a case see the same numbers.
    return torch.randn(*shape, generator=gen, dtype=torch.float32).to(device)


def make_inputs(spec: Mapping[str, Any], device: torch.device) -> Inputs:
    """Random inputs for a case (never zeros). Dropout cases use a diagonal V so that the
    dropout mask can be read back from the output (see `dropout_keep`)."""
    dt = DTYPES[spec["dtype"]]
    store = torch.bfloat16 if spec["dtype"] == "fp8" else dt  # fp8 kernels take casts of these
    gen = torch.Generator().manual_seed(case_seed(spec["id"], spec.get("seed", 0)))
    b, hq, hkv = spec["batch"], spec["heads_q"], spec["heads_kv"]
    sq, skv, dqk, dv = spec["seq_q"], spec["seq_kv"], spec["head_dim_qk"], spec["head_dim_v"]
    layout = spec.get("layout", "bshd")
    grad = spec.get("direction") == "fwdbwd"  # forward-only kernels may refuse grad inputs

    def finish(t: torch.Tensor) -> torch.Tensor:
        t = t.to(store)
        if spec["dtype"] == "fp8":  # round through fp8 so the reference sees the same values
            t = t.to(dt).to(store)
        return t

    if layout == "varlen":
        lens = list(spec["seqlens"])
        total = sum(lens)
        cu = torch.tensor([0] + list(_cumsum(lens)), dtype=torch.int32, device=device)
        q = finish(_randn((total, hq, dqk), gen, device)).requires_grad_(grad)
        k = finish(_randn((total, hkv, dqk), gen, device)).requires_grad_(grad)
        v = finish(_randn((total, hkv, dv), gen, device)).requires_grad_(grad)
        dout = finish(_randn((total, hq, dv), gen, device))
        return Inputs(q, k, v, dout, {"q": q, "k": k, "v": v}, cu_seqlens=cu, max_seqlen=max(lens))

    if layout == "strided-qkv":
        # One fused (S, B, Hq + 2*Hkv, D) tensor split along heads: q/k/v are strided views,
        # exactly what a fused QKV projection hands to attention (seed 004).
        if dqk != dv or sq != skv:
            raise ValueError("strided-qkv needs head_dim_qk == head_dim_v and seq_q == seq_kv")
        qkv = finish(_randn((sq, b, hq + 2 * hkv, dqk), gen, device)).requires_grad_(grad)
        qs, ks, vs = qkv.split([hq, hkv, hkv], dim=2)
        dout = finish(_randn((b, sq, hq, dv), gen, device))
        return Inputs(
            qs.transpose(0, 1), ks.transpose(0, 1), vs.transpose(0, 1), dout,
            {"qkv": qkv}, sbhd=(qs, ks, vs),
        )

    q = finish(_randn((b, sq, hq, dqk), gen, device))
    k = finish(_randn((b, skv, hkv, dqk), gen, device))
    if spec.get("dropout", 0.0) > 0.0:
        if dv < skv:
            raise ValueError("dropout cases need head_dim_v >= seq_kv (diagonal V)")
        diag = 0.5 + torch.rand(skv, generator=gen)
        eye = torch.zeros(skv, dv)
        eye[torch.arange(skv), torch.arange(skv)] = diag
        v = eye.view(1, skv, 1, dv).expand(b, skv, hkv, dv).contiguous().to(device).to(store)
    else:
        v = finish(_randn((b, skv, hkv, dv), gen, device))
    dout = finish(_randn((b, sq, hq, dv), gen, device))
    for t in (q, k, v):
        t.requires_grad_(grad)
    return Inputs(q, k, v, dout, {"q": q, "k": k, "v": v})


def _cumsum(xs: Sequence[int]) -> List[int]:
    out, acc = [], 0
    for x in xs:
        acc += x
        out.append(acc)
    return out


def allowed(sq: int, skv: int, mask: str, window: Optional[Sequence[int]],
            device: Optional[torch.device] = None) -> torch.Tensor:
    """Bool (sq, skv): which keys each query may attend to.

    causal: top-left aligned (SDPA is_causal); causal_bottom_right: the diagonal ends in the
    bottom-right corner (flash-attn >= 2.1, KV cache). window (left, right) is bottom-right
    aligned as in flash-attn; -1 means unbounded on that side."""
    i = torch.arange(sq, device=device).view(-1, 1)
    j = torch.arange(skv, device=device).view(1, -1)
    ok = torch.ones(sq, skv, dtype=torch.bool, device=device)
    if mask == "causal":
        ok &= j <= i
    elif mask == "causal_bottom_right":
        ok &= j <= i + (skv - sq)
    elif mask != "no_mask":
        raise ValueError(f"unknown mask {mask!r}")
    if window is not None:
        left, right = int(window[0]), int(window[1])
        diag = i + (skv - sq)
        if left >= 0:
            ok &= j >= diag - left
        if right >= 0:
            ok &= j <= diag + right
    return ok


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ok: torch.Tensor, *,
                    softcap: float = 0.0, keep: Optional[torch.Tensor] = None,
                    dropout: float = 0.0) -> torch.Tensor:
    """Textbook attention in the dtype of its inputs; bshd in, bshd out. `keep` is the
    dropout keep-mask (B, Hq, Sq, Skv) when the case has dropout."""
    hq, hkv = q.shape[2], k.shape[2]
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if hq != hkv:
        kh = kh.repeat_interleave(hq // hkv, dim=1)
        vh = vh.repeat_interleave(hq // hkv, dim=1)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if softcap > 0.0:
        s = torch.tanh(s / softcap) * softcap
    s = s.masked_fill(~ok, float("-inf"))
    p = torch.softmax(s, dim=-1)
    if keep is not None:
        p = p * keep.to(p.dtype) * (1.0 / (1.0 - dropout))
    return torch.matmul(p, vh).transpose(1, 2)


def dropout_keep(spec: Mapping[str, Any], out: torch.Tensor) -> torch.Tensor:
    """Read the dropout keep-mask back from a kernel output computed with a diagonal V:
    out[b, i, h, j] is non-zero exactly where key j was kept for query i."""
    skv = spec["seq_kv"]
    ok = allowed(spec["seq_q"], skv, spec["mask"], spec.get("window"), out.device)
    keep = out.detach()[..., :skv].transpose(1, 2) != 0  # (B, Hq, Sq, Skv)
    return keep & ok


def _per_sequence(spec: Mapping[str, Any], inp: Inputs, dtype: Optional[torch.dtype],
                  fn: Callable[..., torch.Tensor]) -> Tuple[torch.Tensor, ...]:
    """Run `fn(q, k, v, ok)` per varlen sequence (or once) with autograd; return out and
    the gradients w.r.t. q/k/v under dout, all in the layout of the inputs."""
    def prep(t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(dtype if dtype is not None else t.dtype).requires_grad_()

    q, k, v = prep(inp.q), prep(inp.k), prep(inp.v)
    dout = inp.dout.to(q.dtype)
    if inp.cu_seqlens is not None:
        cu = inp.cu_seqlens.tolist()
        outs = []
        for s, e in zip(cu[:-1], cu[1:]):
            n = e - s
            ok = allowed(n, n, spec["mask"], spec.get("window"), q.device)
            outs.append(fn(q[s:e].unsqueeze(0), k[s:e].unsqueeze(0), v[s:e].unsqueeze(0), ok)[0])
        out = torch.cat(outs, dim=0)
    else:
        ok = allowed(spec["seq_q"], spec["seq_kv"], spec["mask"], spec.get("window"), q.device)
        out = fn(q, k, v, ok)
    if spec["direction"] == "fwdbwd":
        out.backward(dout)
        return out.detach(), q.grad, k.grad, v.grad
    return (out.detach(),)


def reference(spec: Mapping[str, Any], inp: Inputs, keep: Optional[torch.Tensor] = None,
              dtype: Optional[torch.dtype] = torch.float64) -> Dict[str, torch.Tensor]:
    """out (and dq, dk, dv) in `dtype`: float64 for the reference, the case dtype for the
    baseline. Same inputs, same mask, same dropout keep-mask as the kernel."""
    p = float(spec.get("dropout", 0.0))
    sc = float(spec.get("softcap", 0.0))

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
        return naive_attention(q, k, v, ok, softcap=sc, keep=keep, dropout=p)

    res = _per_sequence(spec, inp, dtype, fn)
    return dict(zip(("out", "dq", "dk", "dv"), res))


def baseline_dtype(spec: Mapping[str, Any]) -> torch.dtype:
    return torch.bfloat16 if spec["dtype"] == "fp8" else DTYPES[spec["dtype"]]


@dataclass
class TensorCheck:
    name: str
    rel_error: Optional[float]  # None when the tensor is missing or not finite
    baseline: float
    tolerance: float
    nonfinite: int = 0
    unwritten: int = 0  # elements still holding the poison pattern

    @property
    def passed(self) -> bool:
        return (self.rel_error is not None and self.nonfinite == 0
                and self.rel_error <= self.tolerance)

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "rel_error": self.rel_error, "baseline": self.baseline,
                "tolerance": self.tolerance, "nonfinite": self.nonfinite,
                "unwritten": self.unwritten}


def count_bad(t: torch.Tensor) -> Tuple[int, int]:
    """(non-finite elements, elements that still hold the poison bit pattern)."""
    nonfinite = int((~torch.isfinite(t.float())).sum().item())
    unwritten = 0
    if nonfinite and t.element_size() == 2:
        unwritten = int((t.contiguous().view(torch.int16) == -1).sum().item())
    elif nonfinite and t.element_size() == 4:
        unwritten = int((t.contiguous().view(torch.int32) == -1).sum().item())
    return nonfinite, unwritten


def check(name: str, got: Optional[torch.Tensor], ref: torch.Tensor, base: torch.Tensor,
          dtype_name: str) -> TensorCheck:
    """Judge one tensor against the float64 reference with the baseline's error budget."""
    k, f = (K_FWD, F_FWD) if name == "out" else (K_BWD, F_BWD)
    scale = float(ref.abs().max().item()) or 1.0
    base_rel = float((base.double() - ref).abs().max().item()) / scale
    tol = k * base_rel + f * EPS[dtype_name]
    if got is None:
        return TensorCheck(name, None, base_rel, tol)
    nonfinite, unwritten = count_bad(got)
    if nonfinite:
        return TensorCheck(name, None, base_rel, tol, nonfinite, unwritten)
    if tuple(got.shape) != tuple(ref.shape):
        raise ValueError(f"{name} has shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
    rel = float((got.detach().double() - ref).abs().max().item()) / scale
    return TensorCheck(name, rel, base_rel, tol)


def finite_only(name: str, got: Optional[torch.Tensor]) -> TensorCheck:
    """For timing-only cases: no reference, but NaN/Inf and unwritten outputs still fail."""
    if got is None:
        return TensorCheck(name, None, 0.0, 0.0)
    nonfinite, unwritten = count_bad(got)
    return TensorCheck(name, None if nonfinite else 0.0, 0.0, 0.0, nonfinite, unwritten)


def keep_fraction_ok(spec: Mapping[str, Any], keep: torch.Tensor) -> Tuple[bool, str]:
    """Dropout sanity: the kept fraction of allowed entries is within 6 sigma of 1 - p."""
    p = float(spec["dropout"])
    ok = allowed(spec["seq_q"], spec["seq_kv"], spec["mask"], spec.get("window"), keep.device)
    n = int(ok.sum().item()) * keep.shape[0] * keep.shape[1]
    kept = int(keep.sum().item())
    frac = kept / max(n, 1)
    sigma = math.sqrt(p * (1 - p) / max(n, 1))
    good = abs(frac - (1 - p)) <= 6 * sigma + 1e-9
    return good, f"kept {frac:.4f} of entries, expected {1 - p:.4f} +- {6 * sigma:.4f}"


def attention_flops(spec: Mapping[str, Any]) -> float:
    """Matmul FLOPs of one call: 2*Dqk + 2*Dv per allowed (query, key) pair and head;
    the backward counts 2.5x the forward (FlashAttention's convention)."""
    if spec.get("layout") == "varlen":
        pairs = sum(int(allowed(n, n, spec["mask"], spec.get("window")).sum()) for n in spec["seqlens"])
    else:
        pairs = spec["batch"] * int(allowed(spec["seq_q"], spec["seq_kv"], spec["mask"],
                                            spec.get("window")).sum())
    fwd = 2.0 * pairs * spec["heads_q"] * (spec["head_dim_qk"] + spec["head_dim_v"])
    return fwd * (3.5 if spec["direction"] == "fwdbwd" else 1.0)


def poison_allocator(sizes_bytes: Sequence[int], device: torch.device, copies: int = 2) -> None:
    """Fill freed blocks of the sizes the kernel will allocate with 0xFF bytes, so outputs
    a kernel forgets to write read as NaN (CUDA caching allocator; best effort on CPU)."""
    held = []
    for n in sizes_bytes:
        for _ in range(copies):
            t = torch.empty(int(n), dtype=torch.uint8, device=device)
            t.fill_(POISON_BYTE)
            held.append(t)
    del held
