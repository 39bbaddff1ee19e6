"""Wall times of the check's phases on a GPU machine, side by side in one run.

    python benchmarks/gpu/bench_device.py OUT.json [--repeat N] [--drop-caches]

Commands (each a fresh process, run with this interpreter and the doctor on PYTHONPATH):
`import torch` + CUDA init, the loaded-facts probe (child imports torch; cache off),
`check --format json` with kernels (as shipped; with the warm start off, as before; and with the
loaded-facts cache on), `check --no-kernels`, and torch's own
`python -m torch.utils.collect_env`. Pass 1 drops the page cache before every command
when --drop-caches is given and /proc/sys/vm/drop_caches is writable (a "fresh machine"
for each command, not just the first); later passes run warm.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List

PY = sys.executable
COMMANDS = {
    "import torch + CUDA init": [PY, "-c", "import torch; torch.cuda.init(); "
                                 "torch.empty(1, device='cuda').add_(1); torch.cuda.synchronize()"],
    "probe (loaded facts, cache off)": [PY, "-m", "doctor", "probe", "--format", "json"],
    "check --no-kernels (cache off)": [PY, "-m", "doctor", "check", "--no-kernels", "--format", "json"],
    "check with kernels (cache off)": [PY, "-m", "doctor", "check", "--format", "json"],
    "check with kernels (cache off; no warm start, as before)":
        ["env", "ATTN_DOCTOR_WARM_WORKER=0", PY, "-m", "doctor", "check", "--format", "json"],
    "check with kernels (loaded facts cached)": ["env", "-u", "ATTN_DOCTOR_NO_CACHE",
                                                 PY, "-m", "doctor", "check", "--format", "json"],
    "torch.utils.collect_env": [PY, "-m", "torch.utils.collect_env"],
}


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


def main(argv: List[str]) -> int:
    out = argv[0]
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 2
    drop = "--drop-caches" in argv
    env = dict(os.environ, ATTN_DOCTOR_NO_CACHE="1")
    rows: List[Dict[str, Any]] = []
    for p in range(repeat):
        for name, cmd in COMMANDS.items():
            dropped = drop_caches() if (drop and p == 0) else False
            t = time.perf_counter()
            r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            wall = time.perf_counter() - t
            row: Dict[str, Any] = {"pass": p + 1, "what": name, "wall_s": round(wall, 3),
                                   "rc": r.returncode, "page_cache_dropped": dropped}
            if r.returncode not in (0, 1):
                row["stderr_tail"] = r.stderr.decode("utf-8", "replace")[-600:]
            if name.startswith("check with kernels"):
                try:
                    doc = json.loads(r.stdout)
                    counts: Dict[str, int] = {}
                    for c in doc.get("kernels") or []:
                        counts[c.get("status")] = counts.get(c.get("status"), 0) + 1
                    row["kernel_counts"] = counts
                except ValueError:
                    pass
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"python": PY, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
