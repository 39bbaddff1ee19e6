"""One adapter per attention backend: turn a case and its inputs into a forward callable.

Loaded by worker.py (sys.path points at this folder). `build(spec, inputs, device)` imports
the library, prepares arguments and returns `fn()` that runs the forward pass and returns
the output in the layout of the reference (bshd, or packed thd for varlen). Backward runs
through autograd on that output. Adapters never call .contiguous() on q/k/v: the
strided-qkv cases exist to hand kernels the views a fused QKV projection produces.

A library that refuses a case raises; the worker records that as `unsupported` with the
library's own message. `Unsupported` is raised here when the adapter itself knows the API
cannot express the case.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import torch

from reference import Inputs

Fn = Callable[[], torch.Tensor]


class Unsupported(Exception):
    """The backend's API cannot express this case (or the library is not importable)."""


def _import(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except Exception as exc:  # ImportError, or an ABI error raised while loading
        raise Unsupported(f"cannot import {name}: {type(exc).__name__}: {exc}") from exc


def _first(x: Any) -> torch.Tensor:
    """Several flash-attn versions return (out, lse); keep the output."""
    return x[0] if isinstance(x, (tuple, list)) else x


def _window(spec: Mapping[str, Any]) -> Tuple[int, int]:
    w = spec.get("window")
    return (-1, -1) if w is None else (int(w[0]), int(w[1]))


def _fa_causal(spec: Mapping[str, Any]) -> bool:
    """flash-attn style kernels only know bottom-right causal (identical when sq == skv)."""
    mask = spec["mask"]
    if mask == "causal" and spec["seq_q"] != spec["seq_kv"]:
        raise Unsupported("flash-attn style API: causal is bottom-right aligned; top-left "
                          "causal with seq_q != seq_kv cannot be expressed")
    return mask in ("causal", "causal_bottom_right")


# --------------------------------------------------------------------------- torch SDPA

_SDPA_BACKENDS = {
    "sdpa.flash": "FLASH_ATTENTION",
    "sdpa.efficient": "EFFICIENT_ATTENTION",
    "sdpa.cudnn": "CUDNN_ATTENTION",
    "sdpa.math": "MATH",
}


def _sdpa(spec: Mapping[str, Any], inp: Inputs, device: torch.device) -> Fn:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, _SDPA_BACKENDS[spec["backend"]])
    if spec.get("softcap", 0.0):
        raise Unsupported("SDPA has no softcap (use flex_attention)")
    gqa = spec["heads_q"] != spec["heads_kv"]
    kwargs: Dict[str, Any] = {"dropout_p": float(spec.get("dropout", 0.0))}
    if gqa:
        kwargs["enable_gqa"] = True

    if spec.get("layout") == "varlen":
        # Nested (jagged) tensors: one SDPA call over all sequences.
        if spec.get("window") is not None:
            raise Unsupported("SDPA with nested tensors takes no attn_mask (sliding window)")
        offsets = inp.cu_seqlens.to(torch.int64)
        nt = torch.nested.nested_tensor_from_jagged
        kwargs["is_causal"] = spec["mask"] != "no_mask"

        def fn_nested() -> torch.Tensor:
            q = nt(inp.q, offsets).transpose(1, 2)
            k = nt(inp.k, offsets).transpose(1, 2)
            v = nt(inp.v, offsets).transpose(1, 2)
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(q, k, v, **kwargs)
            return o.transpose(1, 2).values()

        return fn_nested

    q, k, v = (t.transpose(1, 2) for t in (inp.q, inp.k, inp.v))  # views: (B, H, S, D)
    sq, skv, mask, window = spec["seq_q"], spec["seq_kv"], spec["mask"], spec.get("window")
    if window is not None:
        from reference import allowed

        kwargs["attn_mask"] = allowed(sq, skv, mask, window, device)
    elif mask == "causal":
        kwargs["is_causal"] = True
    elif mask == "causal_bottom_right" and sq != skv:
        from torch.nn.attention.bias import causal_lower_right

        kwargs["attn_mask"] = causal_lower_right(sq, skv)
    elif mask == "causal_bottom_right":
        kwargs["is_causal"] = True

    def fn() -> torch.Tensor:
        try:
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(q, k, v, **kwargs)
        except RuntimeError as exc:
            if "No available kernel" not in str(exc):
                raise
            why = _sdpa_reasons(spec["backend"], q, k, v, kwargs)
            raise RuntimeError(f"{str(exc).strip()}{' | ' + why if why else ''}") from exc
        return o.transpose(1, 2)

    return fn


def _sdpa_reasons(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  kwargs: Mapping[str, Any]) -> str:
    """Ask torch why a forced SDPA backend refused (can_use_*(debug=True) warns the first
    failing check); the refusal itself only says 'No available kernel'."""
    import warnings

    cuda = torch.backends.cuda
    check = {"sdpa.flash": "can_use_flash_attention",
             "sdpa.efficient": "can_use_efficient_attention",
             "sdpa.cudnn": "can_use_cudnn_attention"}.get(backend)
    if check is None or not hasattr(cuda, check) or not hasattr(cuda, "SDPAParams"):
        return ""
    mask = kwargs.get("attn_mask")
    if mask is not None and not isinstance(mask, torch.Tensor):
        mask = None  # CausalBias: the dense checks below still name head-dim/dtype limits
    args = (q, k, v, mask, float(kwargs.get("dropout_p", 0.0)), bool(kwargs.get("is_causal")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            try:
                params = cuda.SDPAParams(*args, bool(kwargs.get("enable_gqa", False)))
            except TypeError:  # torch < 2.5: no enable_gqa
                params = cuda.SDPAParams(*args)
            getattr(cuda, check)(params, True)
        except Exception as exc:  # the probe is best effort
            return f"({check} failed: {exc})"
    msgs = []
    for w in caught:
        m = str(w.message).split("(Triggered internally")[0].strip()
        if m and m not in msgs:
            msgs.append(m)
    return " ".join(msgs)


# --------------------------------------------------------------------------- flex_attention

_FLEX_COMPILED: Dict[str, Any] = {}


def _flex(spec: Mapping[str, Any], inp: Inputs, device: torch.device) -> Fn:
    fa = _import("torch.nn.attention.flex_attention")
    if spec.get("dropout", 0.0):
        raise Unsupported("flex_attention has no dropout")
    if spec.get("layout") == "varlen":
        raise Unsupported("varlen is planned for flex_attention only as a document mask")
    if "fn" not in _FLEX_COMPILED:
        # Compiled on CUDA (the fused Triton kernel); eager on CPU (unfused, for tests).
        _FLEX_COMPILED["fn"] = (torch.compile(fa.flex_attention, dynamic=False)
                                if device.type == "cuda" else fa.flex_attention)
    flex = _FLEX_COMPILED["fn"]
    sq, skv, mask = spec["seq_q"], spec["seq_kv"], spec["mask"]
    left, right = _window(spec)
    offset = skv - sq
    softcap = float(spec.get("softcap", 0.0))

    def mask_mod(b: Any, h: Any, qi: Any, kj: Any) -> Any:
        ok = kj >= 0
        if mask == "causal":
            ok = ok & (kj <= qi)
        elif mask == "causal_bottom_right":
            ok = ok & (kj <= qi + offset)
        if left >= 0:
            ok = ok & (kj >= qi + offset - left)
        if right >= 0:
            ok = ok & (kj <= qi + offset + right)
        return ok

    needs_mask = mask != "no_mask" or left >= 0 or right >= 0
    block_mask = (fa.create_block_mask(mask_mod, None, None, sq, skv, device=str(device))
                  if needs_mask else None)
    score_mod = None
    if softcap > 0.0:
        def score_mod(score: Any, b: Any, h: Any, qi: Any, kj: Any) -> Any:
            return torch.tanh(score / softcap) * softcap

    gqa = spec["heads_q"] != spec["heads_kv"]
    q, k, v = (t.transpose(1, 2) for t in (inp.q, inp.k, inp.v))

    def fn() -> torch.Tensor:
        o = flex(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa)
        return _first(o).transpose(1, 2)

    return fn


# --------------------------------------------------------------------------- flash-attn 2/3/4


def _flash_attn(spec: Mapping[str, Any], inp: Inputs, device: torch.device) -> Fn:
    backend, layout = spec["backend"], spec.get("layout", "bshd")
    if backend == "flash_attn.fa2":
        mod = _import("flash_attn")
    elif backend == "flash_attn.fa3":
        try:
            mod = _import("flash_attn_interface")
        except Unsupported:
            mod = _import("flash_attn_3.flash_attn_interface")
    else:
        mod = _import("flash_attn.cute")
    causal = _fa_causal(spec)
    kw: Dict[str, Any] = {"causal": causal}
    left, right = _window(spec)
    if (left, right) != (-1, -1):
        kw["window_size"] = ((None if left < 0 else left, None if right < 0 else right)
                             if backend == "flash_attn.fa4" else (left, right))
    if spec.get("softcap", 0.0):
        kw["softcap"] = float(spec["softcap"])
    p = float(spec.get("dropout", 0.0))
    if p:
        if backend != "flash_attn.fa2":
            raise Unsupported(f"{backend} has no dropout")
        kw["dropout_p"] = p
    q, k, v = inp.q, inp.k, inp.v
    if spec["dtype"] == "fp8":
        if backend != "flash_attn.fa3":
            raise Unsupported(f"{backend}: fp8 is planned for FA3 only")
        fp8 = torch.float8_e4m3fn
        q, k, v = (t.detach().to(fp8) for t in (q, k, v))

    if layout == "varlen":
        # by keyword: FA4 puts `qv` where FA2/FA3 take cu_seqlens_q
        kw.update(cu_seqlens_q=inp.cu_seqlens, cu_seqlens_k=inp.cu_seqlens,
                  max_seqlen_q=inp.max_seqlen, max_seqlen_k=inp.max_seqlen)
        f = mod.flash_attn_varlen_func
        return lambda: _first(f(q, k, v, **kw))
    if layout == "kvcache":
        if not hasattr(mod, "flash_attn_with_kvcache"):
            raise Unsupported(f"{backend} has no flash_attn_with_kvcache")
        if spec["direction"] != "fwd":
            raise Unsupported("flash_attn_with_kvcache has no backward")
        seqlens = torch.full((spec["batch"],), spec["seq_kv"], dtype=torch.int32, device=device)
        kw.pop("dropout_p", None)
        f = mod.flash_attn_with_kvcache
        kc, vc = k.detach(), v.detach()
        return lambda: _first(f(q.detach(), kc, vc, cache_seqlens=seqlens, **kw))
    f = mod.flash_attn_func
    return lambda: _first(f(q, k, v, **kw))


# --------------------------------------------------------------------------- TransformerEngine

_TE_ENV = {
    "te.flash": ("1", "0", "0"),
    "te.fused": ("0", "1", "0"),
    "te.unfused": ("0", "0", "1"),
}


def _te(spec: Mapping[str, Any], inp: Inputs, device: torch.device) -> Fn:
    flash, fused, unfused = _TE_ENV[spec["backend"]]
    os.environ["NVTE_FLASH_ATTN"], os.environ["NVTE_FUSED_ATTN"] = flash, fused
    os.environ["NVTE_UNFUSED_ATTN"] = unfused
    te = _import("transformer_engine.pytorch")
    _te_reset_backend_cache()
    layout = spec.get("layout", "bshd")
    hq, hkv, dqk, dv = spec["heads_q"], spec["heads_kv"], spec["head_dim_qk"], spec["head_dim_v"]
    mask = spec["mask"]
    if mask == "causal" and spec["seq_q"] != spec["seq_kv"]:
        mask_type = "causal"  # TE's "causal" is top-left, like SDPA
    else:
        mask_type = mask
    kw: Dict[str, Any] = {}
    if layout == "varlen":
        fmt = "thd"
        mask_type = "padding" if mask == "no_mask" else "padding_" + mask_type
        kw.update(cu_seqlens_q=inp.cu_seqlens, cu_seqlens_kv=inp.cu_seqlens,
                  max_seqlen_q=inp.max_seqlen, max_seqlen_kv=inp.max_seqlen)
        q, k, v = inp.q, inp.k, inp.v
    elif layout == "strided-qkv":
        fmt = "sbhd"  # the split views exactly as a fused QKV projection produces them
        q, k, v = inp.sbhd  # type: ignore[misc]
    else:
        fmt = "bshd"
        q, k, v = inp.q, inp.k, inp.v
    module_kw: Dict[str, Any] = dict(
        num_attention_heads=hq, kv_channels=(dqk, dv) if dqk != dv else dqk,
        num_gqa_groups=hkv, attention_dropout=float(spec.get("dropout", 0.0)),
        qkv_format=fmt, attn_mask_type=mask_type,
    )
    accepted = _init_params(te.DotProductAttention)
    if spec.get("softcap", 0.0):
        if "softcap" not in accepted:  # TE grew a softcap argument in 2.x
            raise Unsupported("this TransformerEngine's DotProductAttention has no softcap")
        module_kw["softcap"] = float(spec["softcap"])
    if spec.get("window") is not None:
        module_kw["window_size"] = tuple(spec["window"])
    dpa = te.DotProductAttention(**module_kw)
    dpa = dpa.to(device)
    autocast = _te_fp8_autocast(te) if spec["dtype"] == "fp8" else None

    def call() -> torch.Tensor:
        try:
            if autocast is not None:
                with autocast():
                    return _first(dpa(q, k, v, **kw))
            return _first(dpa(q, k, v, **kw))
        except ValueError as exc:
            if "No dot product attention backend" not in str(exc):
                raise
            why = _te_reasons(spec)
            raise ValueError(f"{str(exc).strip()}{' | ' + why if why else ''}") from exc

    def fn() -> torch.Tensor:
        o = call()
        if fmt == "thd":
            return o.view(o.shape[0], hq, dv)
        o = o.view(o.shape[0], o.shape[1], hq, dv)
        return o.transpose(0, 1) if fmt == "sbhd" else o

    return fn


def _te_reasons(spec: Mapping[str, Any]) -> str:
    """TE refuses with "No dot product attention backend is available"; its reasons are in
    its debug log. Ask get_attention_backend (ask.py) for this case's shape and keep the
    'Disabling ...' lines."""
    try:
        import ask

        w = {"dtype": spec["dtype"], "head_dim_qk": spec["head_dim_qk"],
             "head_dim_v": spec["head_dim_v"], "num_heads": spec["heads_q"],
             "num_kv_heads": spec["heads_kv"], "seq_len_q": spec["seq_q"],
             "seq_len_kv": spec["seq_kv"], "batch_size": spec["batch"], "mask": spec["mask"],
             "window_size": spec.get("window"), "softcap": float(spec.get("softcap", 0.0)),
             "dropout": float(spec.get("dropout", 0.0)), "training": spec["direction"] == "fwdbwd",
             "varlen": spec.get("layout") == "varlen",
             "qkv_format": "thd" if spec.get("layout") == "varlen" else (
                 "sbhd" if spec.get("layout") == "strided-qkv" else "bshd"),
             "qkv_packed": spec.get("layout") == "strided-qkv"}
        ans = ask.te_choice(w)
    except Exception as exc:  # best effort: the refusal itself is already recorded
        return f"(could not ask TE why: {type(exc).__name__})"
    lines = [m for m in ans.get("log", []) if m.startswith("Disabling")]
    return " ".join(dict.fromkeys(lines))[:1200]


def _init_params(cls: Any) -> set:
    import inspect

    try:
        return set(inspect.signature(cls.__init__).parameters)
    except (TypeError, ValueError):
        return set()


def _te_fp8_autocast(te: Any) -> Callable[[], Any]:
    """FP8 attention in TE: bf16 tensors in, DotProductAttention run under the FP8 autocast
    with a recipe that asks for FP8 attention (fp8_dpa); TE quantises q/k/v itself."""
    from transformer_engine.common.recipe import DelayedScaling

    recipe = DelayedScaling(fp8_dpa=True)
    ctx = getattr(te, "autocast", None)
    if ctx is not None:
        return lambda: ctx(enabled=True, recipe=recipe)
    return lambda: te.fp8_autocast(enabled=True, fp8_recipe=recipe)


def _te_reset_backend_cache() -> None:
    """TE caches its backend choice; make it re-read NVTE_* for this case."""
    import importlib

    for name in ("transformer_engine.pytorch.attention.dot_product_attention.utils",
                 "transformer_engine.pytorch.attention.dot_product_attention.dot_product_attention",
                 "transformer_engine.pytorch.attention"):
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        cache = getattr(mod, "_attention_backends", None)
        if isinstance(cache, dict):
            cache["backend_selection_requires_update"] = True


# --------------------------------------------------------------------------- xformers


def _xformers(spec: Mapping[str, Any], inp: Inputs, device: torch.device) -> Fn:
    xops = _import("xformers.ops")
    fmha = xops.fmha
    if spec.get("layout") in ("varlen", "kvcache"):
        raise Unsupported("xformers cases cover the dense bshd/strided layouts only")
    if spec.get("softcap", 0.0) or spec.get("window") is not None:
        raise Unsupported("xformers adapter: no softcap / sliding window")
    bias_mod = fmha.attn_bias
    mask = spec["mask"]
    bias: Optional[Any] = None
    if mask == "causal":
        bias = bias_mod.LowerTriangularMask()
    elif mask == "causal_bottom_right":
        bias = bias_mod.LowerTriangularFromBottomRightMask()
    op = (fmha.cutlass.FwOp, fmha.cutlass.BwOp)
    hq, hkv = spec["heads_q"], spec["heads_kv"]
    p = float(spec.get("dropout", 0.0))
    q, k, v = inp.q, inp.k, inp.v

    def fn() -> torch.Tensor:
        if hq == hkv:
            return xops.memory_efficient_attention(q, k, v, attn_bias=bias, p=p, op=op)
        g = hq // hkv  # GQA: 5-D (B, S, groups, heads per group, D)
        b, sq, _, d = q.shape
        q5 = q.reshape(b, sq, hkv, g, d)
        k5 = k.unsqueeze(3).expand(-1, -1, -1, g, -1)
        v5 = v.unsqueeze(3).expand(-1, -1, -1, g, -1)
        o = xops.memory_efficient_attention(q5, k5, v5, attn_bias=bias, p=p, op=op)
        return o.reshape(b, sq, hq, -1)

    return fn


# --------------------------------------------------------------------------- registry

ADAPTERS: Dict[str, Callable[[Mapping[str, Any], Inputs, torch.device], Fn]] = {
    **{b: _sdpa for b in _SDPA_BACKENDS},
    "sdpa.flex": _flex,
    "flash_attn.fa2": _flash_attn,
    "flash_attn.fa3": _flash_attn,
    "flash_attn.fa4": _flash_attn,
    **{b: _te for b in _TE_ENV},
    "xformers.cutlass": _xformers,
}


def build(spec: Mapping[str, Any], inp: Inputs, device: torch.device) -> Fn:
    """The forward callable for a case; raises Unsupported / the library's error."""
    adapter = ADAPTERS.get(spec["backend"])
    if adapter is None:
        raise Unsupported(f"unknown backend {spec['backend']!r}")
    return adapter(spec, inp, device)
