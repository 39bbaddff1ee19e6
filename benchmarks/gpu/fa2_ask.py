"""flash-attn 2's own verdict on a GPU: call its kernels for each workload and record whether
they run, for comparing with the doctor's flash_attn.fa2 availability.

    python benchmarks/gpu/te_selection.py fa2-matrix N SEED W.json       (here)
    (device) python benchmarks/gpu/fa2_ask.py W.json > ANSWERS.jsonl
    python benchmarks/gpu/te_selection.py compare SNAPSHOT.json ANSWERS.jsonl OUT_PREFIX

flash-attn has no "can I run this" question, so the answer is the real call: forward
(`flash_attn_func`, or `flash_attn_varlen_func` for packed sequences), and backward for a
training workload, on the workload's dtype, heads, head dims, mask, window, softcap, ALiBi,
dropout (in training only, as callers pass it) and determinism. Lengths and batch are cut down (the checks read shapes, not
lengths; cross-attention keeps seq_q != seq_kv). An exception is a refusal; its first line is
kept as the reason. Each line: {"name", "workload", "answers": [{"library": "flash-attn",
"selected": "flash_attn.fa2" or null, "available": {"flash_attn.fa2": bool}, "reasons": ...}]}.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Dict, Mapping

MAX_SEQ = 512


def _short(n: int, other: int) -> int:
    if max(n, other) <= MAX_SEQ:
        return n
    return max(1, n * MAX_SEQ // max(n, other))


def fa2_answer(w: Mapping[str, Any]) -> Dict[str, Any]:
    t0 = time.perf_counter()
    ans: Dict[str, Any] = {"library": "flash-attn", "selected": None, "available": {}, "reasons": {},
                           "error": None}
    try:
        import torch
        import flash_attn
        from flash_attn import flash_attn_func, flash_attn_varlen_func

        ans["flash_attn"] = flash_attn.__version__
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[w.get("dtype", "bf16")]
        b = min(int(w.get("batch_size", 2)), 2)
        sq0, skv0 = int(w.get("seq_len_q", 512)), int(w.get("seq_len_kv", 512))
        sq, skv = _short(sq0, skv0), _short(skv0, sq0)
        hq, hkv = int(w.get("num_heads", 32)), int(w.get("num_kv_heads", 8))
        dqk, dv = int(w.get("head_dim_qk", 128)), int(w.get("head_dim_v", 128))
        training = bool(w.get("training", True))
        mask = str(w.get("mask", "causal"))
        # the workload's dropout is attention's training dropout: callers pass 0 in inference
        p = float(w.get("dropout") or 0.0) if training else 0.0
        kw: Dict[str, Any] = {"dropout_p": p, "causal": "causal" in mask}
        if w.get("window_size") is not None:
            kw["window_size"] = tuple(int(x) for x in w["window_size"])
        if w.get("softcap"):
            kw["softcap"] = float(w["softcap"])
        if w.get("alibi"):
            kw["alibi_slopes"] = torch.rand(hq, device="cuda", dtype=torch.float32)
        if w.get("deterministic"):
            kw["deterministic"] = True
        dev = "cuda"
        ok, why = True, None
        try:
            if w.get("varlen") or w.get("qkv_format") == "thd":
                cu_q = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32, device=dev)
                cu_k = torch.arange(0, (b + 1) * skv, skv, dtype=torch.int32, device=dev)
                q = torch.randn(b * sq, hq, dqk, dtype=dt, device=dev, requires_grad=training)
                k = torch.randn(b * skv, hkv, dqk, dtype=dt, device=dev, requires_grad=training)
                v = torch.randn(b * skv, hkv, dv, dtype=dt, device=dev, requires_grad=training)
                out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, sq, skv, **kw)
            else:
                q = torch.randn(b, sq, hq, dqk, dtype=dt, device=dev, requires_grad=training)
                k = torch.randn(b, skv, hkv, dqk, dtype=dt, device=dev, requires_grad=training)
                v = torch.randn(b, skv, hkv, dv, dtype=dt, device=dev, requires_grad=training)
                out = flash_attn_func(q, k, v, **kw)
            if isinstance(out, tuple):
                out = out[0]
            if training:
                out.float().sum().backward()
            torch.cuda.synchronize()
            if not bool(torch.isfinite(out).all()):
                ok, why = False, "non-finite output"
        except Exception as exc:  # a refusal: the library's own words
            ok, why = False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            torch.cuda.synchronize()
        ans["available"]["flash_attn.fa2"] = ok
        ans["selected"] = "flash_attn.fa2" if ok else None
        if why:
            ans["reasons"]["flash_attn.fa2"] = [why]
        ans["asked_shape"] = [b, hq, hkv, sq, skv, dqk, dv]
    except Exception as exc:
        ans["error"] = f"{type(exc).__name__}: {exc}"[:300]
    ans["ms"] = round((time.perf_counter() - t0) * 1e3, 3)
    return ans


def main(argv: list) -> int:
    doc = json.loads(open(argv[0], encoding="utf-8").read())
    for i, w in enumerate(doc.get("workloads", [])):
        fields = {k: v for k, v in w.items() if k != "name"}
        print(json.dumps({"name": w.get("name", str(i)), "workload": fields,
                          "answers": [fa2_answer(fields)]}, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
