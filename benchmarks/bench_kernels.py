"""Per-phase wall time of the kernel suite: worker start, torch import, CUDA init, cases.

    python benchmarks/bench_kernels.py [--repeat 3] [--suite default] [--json FILE]

Runs plan_cases(None, installed) + run_cases the given number of times (each run starts a
fresh worker, so every repeat pays the interpreter start, torch import and CUDA init) and
prints a markdown table plus the slowest cases of the last run. The budget in
docs/kernels.md is: default suite <= 10 s wall on an H100/H200, everything included.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from doctor.verify import installed_backends, plan_cases, run_cases  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--suite", default="default", choices=("default", "full"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--json", help="also write the raw numbers here")
    args = ap.parse_args()
    rows: List[Dict[str, Any]] = []
    last = None
    for i in range(args.repeat):
        t0 = time.perf_counter()
        cases = plan_cases(None, installed_backends(), suite=args.suite)
        t_plan = time.perf_counter() - t0
        run = run_cases(cases, device=args.device)
        wall = time.perf_counter() - t0
        p = run.phases
        rows.append({"run": i + 1, "cases": len(cases), "plan_s": t_plan,
                     "worker_start_s": p.worker_start_s, "import_s": p.import_s,
                     "cuda_init_s": p.cuda_init_s, "cases_s": p.cases_s,
                     "restart_s": p.restart_s, "workers": p.workers, "wall_s": wall,
                     "counts": {k: v for k, v in run.counts().items() if v}})
        last = run
    env = last.environment if last else None
    print(f"device: {env.gpu or env.device if env else '?'}  torch {env.torch if env else '?'}  "
          f"cuDNN {env.cudnn if env else '?'}  suite: {args.suite}")
    print()
    print("| run | cases | plan s | worker start s | import torch s | CUDA init s | cases s "
          "| wall s | statuses |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['cases']} | {r['plan_s']:.3f} | {r['worker_start_s']:.3f} "
              f"| {r['import_s']:.2f} | {r['cuda_init_s']:.2f} | {r['cases_s']:.2f} "
              f"| {r['wall_s']:.2f} | {r['counts']} |")
    if last is not None:
        slow = sorted(last.details, key=lambda d: -(d.seconds or 0.0))[:10]
        print()
        print("slowest cases (last run):")
        for d in slow:
            print(f"  {d.seconds or 0.0:7.3f} s  {d.id}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "environment":
                                               last.to_json()["environment"] if last else None},
                                              indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
