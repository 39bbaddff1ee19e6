"""Shared memory that flex_attention's Triton kernels need, per config, head_dim and GPU arch.

Runs on one CUDA GPU (any arch): every Triton compile inductor does is repeated for the target
archs sm86, sm89 and sm120 (Triton cross-compiles; the figure is the compiler's own
`metadata.shared`, the number its launcher compares with the 101376-byte opt-in limit of those
GPUs). The configs are the defaults inductor's tables give per torch release (listed in
rules/findings/flex.yaml); they are forced through `kernel_options`, so one torch measures them
all (the kernel templates of other torch releases may differ by a few KB).

`--dec` measures flex_decoding instead (queries shorter than 128 tokens, inductor's own default
tiles, no kernel_options): each entry is [query tokens, query heads per key/value head], run at
every head dim of --head-dims against 1024 keys.

    python benchmarks/flex_smem/measure.py --out results.json [--jobs 8]
    python benchmarks/flex_smem/measure.py --out dec.json --dec '[[1,1],[16,1],[17,1]]' --head-dims '[320,512]'
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

BWD = [  # (BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2, num_stages, num_warps)
    (64, 128, 128, 64, 3, 8), (32, 128, 128, 32, 3, 4), (64, 64, 64, 64, 3, 4),
    (64, 64, 64, 64, 2, 4), (64, 64, 64, 64, 1, 4), (32, 32, 32, 32, 2, 4), (32, 32, 32, 32, 1, 4),
    (16, 16, 16, 16, 1, 4),
]
FWD = [  # (BLOCK_M, BLOCK_N, num_stages, num_warps)
    (128, 64, 3, 4), (128, 64, 3, 8), (32, 64, 3, 4), (64, 64, 3, 4), (128, 128, 3, 4), (64, 32, 3, 4),
    (64, 64, 2, 4), (64, 64, 1, 4),
]
HEAD_DIMS = (64, 128, 192, 256)
TARGETS = tuple(int(a) for a in os.environ.get("FLEX_SMEM_TARGETS", "86,89,120").split(","))
# the sm75 table (flex-smem-sm75.json) ran with FLEX_SMEM_TARGETS=70,75 FLEX_SMEM_DTYPE=float16
# (Triton 3.6 has no sm70 target; T4s have no bf16 tensor cores)
DTYPE = os.environ.get("FLEX_SMEM_DTYPE", "bfloat16")


def one(kind: str, cfg: tuple, hd: int) -> list:
    import torch
    import triton
    from triton.backends.compiler import GPUTarget

    records: list = []
    real = triton.compile

    def spy(src, target=None, options=None, **kw):  # type: ignore[no-untyped-def]
        text = getattr(getattr(src, "fn", None), "src", "") or ""
        role = "bwd" if "dkdv" in text.lower() or "bwd_dq" in text else "fwd"
        for arch in TARGETS:
            try:
                b = real(src, target=GPUTarget("cuda", arch, 32), options=options, **kw)
                records.append({"role": role, "arch": arch, "shared": int(b.metadata.shared)})
            except Exception as exc:  # noqa: BLE001
                records.append({"role": role, "arch": arch, "error": f"{type(exc).__name__}: {exc}"[:300]})
        b = real(src, target=target, options=options, **kw)
        records.append({"role": role, "arch": target.arch, "shared": int(b.metadata.shared)})
        return b

    triton.compile = spy
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.config.cache_size_limit = 64
    flex = torch.compile(flex_attention, dynamic=False)
    q, k, v = (torch.randn(1, 2, 256, hd, device="cuda", dtype=getattr(torch, DTYPE), requires_grad=(kind == "bwd")) for _ in range(3))
    if kind == "dec":
        q_len, groups = cfg
        dt = getattr(torch, DTYPE)
        q = torch.randn(1, 2 * groups, q_len, hd, device="cuda", dtype=dt)
        k, v = (torch.randn(1, 2, 1024, hd, device="cuda", dtype=dt) for _ in range(2))
        with torch.no_grad():
            flex(q, k, v, enable_gqa=groups > 1)
        torch.cuda.synchronize()
        return records
    if kind == "fwd":
        m, n, s, w = cfg
        opts = {"fwd_BLOCK_M": m, "fwd_BLOCK_N": n, "fwd_num_stages": s, "fwd_num_warps": w}
        with torch.no_grad():
            flex(q, k, v, kernel_options=opts)
    else:
        m1, n1, m2, n2, s, w = cfg
        opts = {"fwd_BLOCK_M": 32, "fwd_BLOCK_N": 32, "fwd_num_stages": 1, "fwd_num_warps": 4,
                "bwd_BLOCK_M1": m1, "bwd_BLOCK_N1": n1, "bwd_BLOCK_M2": m2, "bwd_BLOCK_N2": n2,
                "bwd_num_stages": s, "bwd_num_warps": w}
        flex(q, k, v, kernel_options=opts).sum().backward()
    torch.cuda.synchronize()
    return [r for r in records if r["role"] == kind]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--fwd", help="JSON list of forward configs instead of FWD")
    ap.add_argument("--bwd", help="JSON list of backward configs instead of BWD")
    ap.add_argument("--head-dims", help="JSON list instead of HEAD_DIMS")
    ap.add_argument("--dec", help="JSON list of [query tokens, query heads per kv head]: flex_decoding only")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        kind, cfg, hd = json.loads(a.one)
        try:
            print(json.dumps({"ok": one(kind, tuple(cfg), hd)}))
        except Exception as exc:  # noqa: BLE001
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:500]}))
        return
    bwd = json.loads(a.bwd) if a.bwd else BWD
    fwd = json.loads(a.fwd) if a.fwd else FWD
    hds = json.loads(a.head_dims) if a.head_dims else HEAD_DIMS
    if a.dec:
        jobs = [("dec", c, h) for c in json.loads(a.dec) for h in hds]
    else:
        jobs = [("bwd", c, h) for c in bwd for h in hds] + [("fwd", c, h) for c in fwd for h in hds]
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1", TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    running: list = []
    results = []
    pending = list(jobs)
    while pending or running:
        while pending and len(running) < a.jobs:
            j = pending.pop(0)
            p = subprocess.Popen([sys.executable, __file__, "--one", json.dumps(j)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            running.append((j, p))
        j, p = running.pop(0)
        out, _ = p.communicate(timeout=600)
        line = (out.strip().splitlines() or ['{"error": "no output"}'])[-1]
        res = json.loads(line)
        results.append({"kind": j[0], "config": j[1], "head_dim": j[2], **res})
        print(j, str(res)[:200], flush=True)
    import torch
    import triton

    doc = {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name(),
           "limit_sm86_89_120": 101376, "results": results}
    with open(a.out, "w") as fh:
        json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
