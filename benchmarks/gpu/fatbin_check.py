"""Check doctor/probe/fatbin.py against torch's own arch list on a GPU machine: every CUDA
library in torch's wheel and the nvidia-* wheels, read by header, timed; torch.cuda.get_arch_list()
for libtorch_cuda. Writes one JSON document (argv[1])."""

from __future__ import annotations

import glob
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())

from doctor.probe.fatbin import archs  # noqa: E402


def main(out: str) -> None:
    import torch

    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    site = os.path.dirname(os.path.dirname(torch.__file__))
    files = sorted(glob.glob(os.path.join(lib, "*.so*")) + glob.glob(os.path.join(site, "nvidia", "**", "*.so*"), recursive=True))
    rows = []
    for f in files:
        t0 = time.perf_counter()
        got, why = archs(f)
        rows.append({"file": os.path.relpath(f, site), "bytes": os.path.getsize(f), "archs": list(got) if got else None,
                     "why": why if got is None else None, "ms": round((time.perf_counter() - t0) * 1e3, 2)})
    torch_cuda = next((r for r in rows if os.path.basename(r["file"]).startswith("libtorch_cuda.so")), None)
    doc = {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
        "get_arch_list": torch.cuda.get_arch_list(),
        "libtorch_cuda_archs": torch_cuda["archs"] if torch_cuda else None,
        "agree": bool(torch_cuda and torch_cuda["archs"] and set(torch.cuda.get_arch_list()) <= set(torch_cuda["archs"])),
        "files": rows,
    }
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=1)
    print(json.dumps({k: v for k, v in doc.items() if k != "files"}))
    print(sum(1 for r in rows if r["archs"]), "of", len(rows), "libraries carry GPU code; slowest", max(r["ms"] for r in rows), "ms")


if __name__ == "__main__":
    main(sys.argv[1])
