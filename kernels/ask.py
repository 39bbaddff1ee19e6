"""Ask the installed libraries which attention backend they would pick for a workload.

Loaded by worker.py before any kernel runs (the `ask` list of the request), and runnable on
its own: `python ask.py [--libraries torch,te] < {"workloads": [...]}` prints one JSON
object per workload. A workload here is a dict with doctor.model.Workload's field names
(dtype, head_dim_qk, head_dim_v, num_heads, num_kv_heads, seq_len_q, seq_len_kv,
batch_size, mask, window_size, softcap, alibi, dropout, qkv_format, qkv_packed, varlen,
training, deterministic, fp8, cp_size); missing fields take Workload's defaults.

Nothing here launches an attention kernel: torch answers from `torch._fused_sdp_choice` on
empty tensors of the workload's shape, TransformerEngine from `get_attention_backend` with
its debug log captured (the same call DotProductAttention makes, with the real cuDNN
deciding the fused sub-backend). An answer records what the library said, or why it could
not be asked; it never raises.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings
from typing import Any, Dict, List, Mapping, Optional, Tuple

DEFAULTS: Dict[str, Any] = dict(
    dtype="bf16", head_dim_qk=128, head_dim_v=128, num_heads=32, num_kv_heads=8,
    seq_len_q=4096, seq_len_kv=4096, batch_size=1, mask="causal", window_size=None,
    softcap=0.0, alibi=False, dropout=0.0, qkv_format="bshd", qkv_packed=False, varlen=False,
    training=True, deterministic=False, fp8=False, cp_size=1,
)
# Elements per tensor above which the torch question is asked on a shorter sequence (the
# choice reads shapes and strides, not values; SDPA's checks do not depend on length).
MAX_ELEMENTS = 1 << 28


def _w(workload: Mapping[str, Any]) -> Dict[str, Any]:
    w = dict(DEFAULTS)
    w.update({k: v for k, v in workload.items() if v is not None or k == "window_size"})
    return w


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}.get(
        name, torch.bfloat16)


def _messages(caught: List[Any]) -> List[str]:
    out: List[str] = []
    for w in caught:
        m = str(getattr(w, "message", w)).split("(Triggered internally")[0].strip()
        if m and m not in out:
            out.append(m)
    return out


def _with_fd2(fn: Any) -> Tuple[Any, str]:
    """Call fn with fd 2 sent to a temporary file: c10 prints SDPA's refusal reasons there
    (TORCH_WARN), not as Python warnings. Returns (fn's value, what was printed)."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            value = fn()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode("utf-8", "replace")
    return value, text


def native_warning_lines(text: str) -> List[str]:
    """Native warning lines (c10's "[W ...] Warning: X (function f)") as their messages, once each;
    the kernel worker reads its teed stderr the same way."""
    import re

    out: List[str] = []
    for line in text.splitlines():
        m = re.search(r"Warning:\s*(.*?)\s*(?:\(function .*\))?\s*$", line)
        msg = (m.group(1) if m else "").strip()
        if msg and msg not in out:
            out.append(msg)
    return out


# --------------------------------------------------------------------------- torch SDPA

_SDPA_NAMES = {0: "sdpa.math", 1: "sdpa.flash", 2: "sdpa.efficient", 3: "sdpa.cudnn"}
_SDPA_CHECKS = {"sdpa.flash": "can_use_flash_attention",
                "sdpa.efficient": "can_use_efficient_attention",
                "sdpa.cudnn": "can_use_cudnn_attention"}


def torch_choice(workload: Mapping[str, Any], device: Any = None) -> Dict[str, Any]:
    """torch's own SDPA pick for the workload's dense shape, and each fused backend's
    can_use_* verdict with the reason torch gives when it says no."""
    t0 = time.perf_counter()
    ans: Dict[str, Any] = {"library": "torch", "selected": None, "available": {},
                           "reasons": {}, "error": None}
    try:
        import torch
        import torch.nn.functional  # noqa: F401  (SDPAParams lives under torch.backends.cuda)

        w = _w(workload)
        dev = device if device is not None else torch.device(
            "cuda" if torch.cuda.is_available() else "cpu")
        ans["torch"] = torch.__version__
        if w["varlen"] or w["qkv_format"] == "thd":
            ans["note"] = "asked for the dense shape: SDPA's varlen path is nested tensors"
        b, sq, skv = int(w["batch_size"]), int(w["seq_len_q"]), int(w["seq_len_kv"])
        hq, hkv = int(w["num_heads"]), int(w["num_kv_heads"])
        dqk, dv = int(w["head_dim_qk"]), int(w["head_dim_v"])
        while b * hq * max(sq, skv) * max(dqk, dv) > MAX_ELEMENTS and max(sq, skv) > 256:
            sq, skv = max(1, sq // 2), max(1, skv // 2)
        if w["dtype"] == "fp8" or w["fp8"]:
            raise ValueError("SDPA has no FP8 attention")
        dt = _torch_dtype(torch, w["dtype"])
        grad = bool(w["training"])
        q = torch.empty(b, hq, sq, dqk, dtype=dt, device=dev, requires_grad=grad)
        k = torch.empty(b, hkv, skv, dqk, dtype=dt, device=dev, requires_grad=grad)
        v = torch.empty(b, hkv, skv, dv, dtype=dt, device=dev, requires_grad=grad)
        mask = None
        causal = False
        window = w["window_size"]
        if window is not None and tuple(window) != (-1, -1) or w["mask"] == "arbitrary" or \
                (w["mask"].endswith("bottom_right") and sq != skv) or w["alibi"]:
            mask = torch.empty(sq, skv, dtype=dt, device=dev)  # an explicit additive mask
        elif w["mask"] != "no_mask" and "causal" in w["mask"]:
            causal = True
        p = float(w["dropout"])
        gqa = hq != hkv
        was_det = torch.are_deterministic_algorithms_enabled()
        was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
        if w["deterministic"]:  # what a deterministic training run sets
            torch.use_deterministic_algorithms(True)
        try:
            idx = int(torch._fused_sdp_choice(q, k, v, mask, p, causal, enable_gqa=gqa))
        except TypeError:  # torch < 2.5: no enable_gqa argument
            idx = int(torch._fused_sdp_choice(q, k, v, mask, p, causal))
        except Exception:
            torch.use_deterministic_algorithms(was_det, warn_only=was_warn)
            raise
        ans["selected"] = _SDPA_NAMES.get(idx, f"backend {idx}")
        cuda = torch.backends.cuda
        for bid, fn in _SDPA_CHECKS.items():
            check = getattr(cuda, fn, None)
            if check is None or not hasattr(cuda, "SDPAParams"):
                continue
            try:
                params = cuda.SDPAParams(q, k, v, mask, p, causal, gqa)
            except TypeError:
                params = cuda.SDPAParams(q, k, v, mask, p, causal)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                ok, native = _with_fd2(lambda: bool(check(params, True)))
            ans["available"][bid] = ok
            if not ok:
                ans["reasons"][bid] = (_messages(caught) + native_warning_lines(native))[:4]
        torch.use_deterministic_algorithms(was_det, warn_only=was_warn)
        ans["available"]["sdpa.math"] = True
        ans["asked_shape"] = [b, hq, hkv, sq, skv, dqk, dv]
    except Exception as exc:
        ans["error"] = f"{type(exc).__name__}: {exc}"
    ans["ms"] = round((time.perf_counter() - t0) * 1e3, 3)
    return ans


# --------------------------------------------------------------------------- TransformerEngine

TE_IDS = ("te.flash", "te.fused", "te.unfused")


def te_qkv_layout(w: Mapping[str, Any]) -> str:
    """The qkv_layout DotProductAttention derives from the tensors this workload passes."""
    fmt = "thd" if (w["varlen"] or w["qkv_format"] == "thd") else w["qkv_format"]
    if fmt not in ("bshd", "sbhd", "thd"):
        fmt = "bshd"
    if not w["qkv_packed"]:
        return f"{fmt}_{fmt}_{fmt}"
    same = w["num_heads"] == w["num_kv_heads"] and w["head_dim_qk"] == w["head_dim_v"]
    # qkv_weight_interleaved: the fused tensor is [..., heads, 3, d] (TE's bsh3d/sbh3d/th3d, the
    # default of its MultiheadAttention) rather than [..., 3, heads, d]; not stated, the latter
    if w.get("qkv_weight_interleaved"):
        packed = {"bshd": ("bsh3d", "bshd_bsh2d"), "sbhd": ("sbh3d", "sbhd_sbh2d"),
                  "thd": ("th3d", "thd_th2d")}[fmt]
    else:
        packed = {"bshd": ("bs3hd", "bshd_bs2hd"), "sbhd": ("sb3hd", "sbhd_sb2hd"),
                  "thd": ("t3hd", "thd_t2hd")}[fmt]
    return packed[0] if same else packed[1]


def te_mask(w: Mapping[str, Any]) -> str:
    mask = str(w["mask"])
    if (w["varlen"] or w["qkv_format"] == "thd") and not mask.startswith("padding"):
        mask = "padding" if mask == "no_mask" else "padding_" + mask
    return mask


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(record.getMessage())
        except Exception:
            pass


def _te_debug_on() -> Tuple[Any, Any]:
    """Switch TE's attention logger to DEBUG (what NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 does) and
    return (restore state, capture handler)."""
    from transformer_engine.pytorch.attention.dot_product_attention import utils as dpa_utils

    logging_cls = getattr(dpa_utils, "AttentionLogging", None)
    saved = getattr(logging_cls, "_log_level", None) if logging_cls is not None else None
    if logging_cls is not None:
        logging_cls._log_level = logging.DEBUG
    handler = _LogCapture()
    logging.getLogger("DotProductAttention").addHandler(handler)
    return (logging_cls, saved), handler


def _te_debug_off(state: Tuple[Any, Any], handler: logging.Handler) -> None:
    logging.getLogger("DotProductAttention").removeHandler(handler)
    cls, saved = state
    if cls is not None and saved is not None:
        cls._log_level = saved


def te_choice(workload: Mapping[str, Any]) -> Dict[str, Any]:
    """TE's get_attention_backend for the workload, as DotProductAttention would call it."""
    t0 = time.perf_counter()
    ans: Dict[str, Any] = {"library": "transformer-engine", "selected": None, "available": {},
                           "fused_sub_backend": None, "flash_version": None, "log": [],
                           "error": None}
    try:
        import torch
        from importlib import metadata

        from transformer_engine.pytorch.attention.dot_product_attention import utils as dpa_utils

        ans["transformer_engine"] = metadata.version("transformer-engine")
        w = _w(workload)
        layout = te_qkv_layout(w)
        thd = layout.startswith("t")
        kw: Dict[str, Any] = dict(
            qkv_type=torch.Tensor, qkv_dtype=_torch_dtype(torch, w["dtype"]),
            qkv_layout=layout, batch_size=int(w["batch_size"]), num_heads=int(w["num_heads"]),
            num_gqa_groups=int(w["num_kv_heads"]), max_seqlen_q=int(w["seq_len_q"]),
            max_seqlen_kv=int(w["seq_len_kv"]), head_dim_qk=int(w["head_dim_qk"]),
            head_dim_v=int(w["head_dim_v"]), attn_mask_type=te_mask(w),
            attention_dropout=float(w["dropout"]), deterministic=bool(w["deterministic"]),
            is_training=bool(w["training"]),
            # DotProductAttention passes True only for a bias tensor that needs a gradient
            core_attention_bias_requires_grad=False,
        )
        fields = getattr(dpa_utils.AttentionParams, "__dataclass_fields__", {})
        if thd and "num_tokens_q" in fields:
            kw["num_tokens_q"] = int(w["batch_size"]) * int(w["seq_len_q"])
            kw["num_tokens_kv"] = int(w["batch_size"]) * int(w["seq_len_kv"])
        window = w["window_size"]
        if window is not None:
            kw["window_size"] = tuple(int(x) for x in window)
        elif "causal" in kw["attn_mask_type"]:
            kw["window_size"] = (-1, 0)
        else:
            kw["window_size"] = (-1, -1)
        if "bottom_right_diagonal" in fields:
            # what DotProductAttention derives when the caller leaves it unset: top-left only
            # for the two top-left causal masks, bottom-right for every other mask
            kw["bottom_right_diagonal"] = kw["attn_mask_type"] not in ("causal", "padding_causal")
        if float(w["softcap"]):
            if "softcap" not in fields:
                raise ValueError("this TransformerEngine has no softcap parameter")
            kw["softcap"] = float(w["softcap"])
        if w["alibi"]:
            kw["core_attention_bias_type"] = "alibi"
            kw["alibi_slopes_shape"] = torch.Size([int(w["num_heads"])])
        if int(w.get("cp_size") or 1) > 1:
            kw.update(context_parallel=True, cp_size=int(w["cp_size"]))
            if w.get("cp_comm_type"):
                kw["cp_comm_type"] = str(w["cp_comm_type"])
        if w["fp8"] or w["dtype"] == "fp8":  # FP8 attention: bf16 tensors under fp8_dpa
            from transformer_engine.common.recipe import DelayedScaling

            kw.update(fp8=True, fp8_meta={"recipe": DelayedScaling(fp8_dpa=True)})
            try:
                from transformer_engine.pytorch.tensor.float8_tensor import Float8Tensor

                kw["qkv_type"] = Float8Tensor
            except Exception:
                pass
        kw = {k: v for k, v in kw.items() if k in fields or not fields}
        ans["params"] = {k: (str(v) if not isinstance(v, (int, float, bool, str, type(None)))
                             else v) for k, v in kw.items() if k not in ("fp8_meta",)}
        params = dpa_utils.AttentionParams(**kw)
        state, handler = _te_debug_on()
        try:
            got = dpa_utils.get_attention_backend(params)
        finally:
            _te_debug_off(state, handler)
        use_flash, flash_backend, use_fused, fused_backend, use_unfused, avail = got
        ans["available"] = dict(zip(TE_IDS, (bool(x) for x in avail)))
        ans["selected"] = ("te.flash" if use_flash else "te.fused" if use_fused
                           else "te.unfused" if use_unfused else None)
        if fused_backend is not None:
            ans["fused_sub_backend"] = int(fused_backend)
        if flash_backend is not None:
            ans["flash_version"] = str(flash_backend)
        ans["log"] = [line for line in handler.lines if "Running with config" not in line][:40]
    except Exception as exc:
        ans["error"] = f"{type(exc).__name__}: {exc}"
    ans["ms"] = round((time.perf_counter() - t0) * 1e3, 3)
    return ans


ASKERS = {"torch": torch_choice, "te": te_choice}


def ask(workload: Mapping[str, Any], libraries: Optional[List[str]] = None,
        device: Any = None) -> List[Dict[str, Any]]:
    """Every requested library's answer for one workload (libraries that are not installed
    answer with an error line, not an exception)."""
    out = []
    for lib in libraries or ["torch", "te"]:
        if lib == "te":
            from importlib.util import find_spec

            if find_spec("transformer_engine") is None:
                continue
            out.append(te_choice(workload))
        elif lib == "torch":
            out.append(torch_choice(workload, device))
    return out


def main(argv: Optional[List[str]] = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--libraries", default="torch,te")
    ap.add_argument("--input", help="JSON file with {'workloads': [...]} (default: stdin)")
    args = ap.parse_args(argv)
    text = open(args.input, encoding="utf-8").read() if args.input else sys.stdin.read()
    doc = json.loads(text)
    libs = [x for x in args.libraries.split(",") if x]
    for i, w in enumerate(doc.get("workloads", [])):
        name = w.get("name", str(i)) if isinstance(w, dict) else str(i)
        fields = {k: v for k, v in w.items() if k != "name"}
        print(json.dumps({"name": name, "workload": fields, "answers": ask(fields, libs)},
                         default=str), flush=True)
    return 0


if __name__ == "__main__":
    if os.environ.get("NVTE_DEBUG") is None:
        os.environ["NVTE_DEBUG"], os.environ["NVTE_DEBUG_LEVEL"] = "1", "2"
    sys.exit(main())
