"""`fix` against `check --no-kernels` on the five seeds: both read the same snapshot and workload,
both plan (check leads each finding with the change fix plans); fix also resolves the plan over
the catalogue's Requires-Dist and builds the install commands. Target: fix <= 1.5x check.

    PYTHONPATH=. python benchmarks/bench_fix.py [--runs 7] > benchmarks/results/fix.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "docs" / "examples" / "seeds"


def wall(cmd: List[str], runs: int) -> List[float]:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=str(ROOT))
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    base = [sys.executable, "-m", "doctor"]
    print("# fix benchmark\n")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}; min of {args.runs} fresh processes each, check and fix interleaved (the machine is shared: medians shown too)\n")
    print("| seed | check --no-kernels | fix | ratio (min) | target |")
    print("|---|---|---|---|---|")
    ratios = []
    for snap in sorted(SEEDS.glob("*.snapshot.json")):
        wl = snap.with_name(snap.name.replace(".snapshot.json", ".workload.yaml"))
        inputs = ["--env", str(snap), "--workload", str(wl), "--format", "json"]
        wall(base + ["fix", *inputs], 1)  # warm caches
        cs: List[float] = []
        fs: List[float] = []
        for _ in range(args.runs):  # interleaved, so load on a shared machine hits both alike
            cs += wall(base + ["check", "--no-kernels", *inputs], 1)
            fs += wall(base + ["fix", *inputs], 1)
        check, fix = min(cs), min(fs)
        ratios.append(fix / check)
        print(
            f"| {snap.name.split('.')[0]} | {check * 1000:.0f} ms (median {statistics.median(cs) * 1000:.0f}) "
            f"| {fix * 1000:.0f} ms (median {statistics.median(fs) * 1000:.0f}) | {fix / check:.2f}x | <= 1.5x |"
        )
    print(f"\nworst ratio: {max(ratios):.2f}x")


if __name__ == "__main__":
    main()
