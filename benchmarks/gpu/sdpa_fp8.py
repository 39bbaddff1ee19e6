"""What torch's scaled_dot_product_attention does with float8 q/k/v on a CUDA GPU.

The doctor models SDPA's math backend as refusing float8 inputs (SDPA-MATH-FP8). This runs the
call itself, once with torch's own backend choice and once with each backend forced through
torch.nn.attention.sdpa_kernel, and records what each raises.

    python benchmarks/gpu/sdpa_fp8.py --out sdpa-fp8.json
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    forced = {"default": None, "math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
              "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    rows = []
    for dtype in ("float8_e4m3fn", "float8_e5m2"):
        for causal in (False, True):
            q, k, v = (torch.randn(1, 2, 128, 64, device="cuda").to(getattr(torch, dtype)) for _ in range(3))
            for name, backend in forced.items():
                try:
                    if backend is None:
                        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    else:
                        with sdpa_kernel([backend]):
                            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    torch.cuda.synchronize()
                    res = {"ok": True, "out_dtype": str(out.dtype)}
                except Exception as exc:  # noqa: BLE001 - the point is to record what it raises
                    res = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
                rows.append({"dtype": dtype, "is_causal": causal, "backend": name, **res})
                print(rows[-1], flush=True)
    doc = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
           "capability": list(torch.cuda.get_device_capability()), "results": rows}
    with open(a.out, "w") as fh:
        json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
