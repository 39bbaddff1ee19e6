"""Speed of the static check.

1. `attn-doctor check --no-kernels --format json` wall time (probe + every rule), median of N
   runs, as a user runs it (a fresh process each time).
2. Evaluating the whole catalogue (backends + findings, no fix re-checks) against 1,000
   varied snapshots in one process.

    python benchmarks/bench_check.py [--runs 15] > benchmarks/results/check.md
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def wall(cmd: list, runs: int) -> list:
    times = []
    env = {**os.environ, "NO_COLOR": "1"}
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/tmp")
        times.append(time.perf_counter() - t0)
    return times


def snapshots(n: int) -> list:
    rng = random.Random(0)
    gpus = ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]
    out = []
    for _ in range(n):
        out.append(
            {
                "packages": {
                    "torch": rng.choice(["2.1.2", "2.3.1+cu121", "2.4.1", "2.5.0", "2.6.0+cu124", "2.7.1", "2.9.1", "2.13.0"]),
                    "flash-attn": rng.choice(["2.3.0", "2.5.8", "2.6.3", "2.7.4.post1", "2.8.3"]),
                    "transformer-engine": rng.choice(["1.9.0", "1.11.0", "1.13.0", "2.3.0", "2.8.0", "2.17.0"]),
                    "transformers": rng.choice(["4.36.2", "4.42.4", "4.44.2", "4.48.0", "4.57.1"]),
                    "xtuner": rng.choice(["0.1.23", "0.2.0"]),
                },
                "gpus": [{"index": 0, "name": "gpu", "compute_capability": rng.choice(gpus)}],
                "cudnn": {"version": rng.choice(["8.9.2", "9.1.0", "9.3.0", "9.5.1", "9.10.2", "9.20.0"])},
                "cuda": {"driver_version": "550.54.15", "driver_cuda": rng.choice(["12.1", "12.4", "12.8", "13.0"])},
                "torch": {"cuda": rng.choice(["12.1", "12.4", "12.8", "13.0"])},
                "env": rng.choice([{}, {"NVTE_FLASH_ATTN": "0"}, {"NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"}]),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("attn-doctor"))
    wall([exe, "check", "--no-kernels", "--format", "json"], 2)  # warm the catalogue and probe caches
    static = wall([exe, "check", "--no-kernels", "--static", "--format", "json"], args.runs)
    check = wall([exe, "check", "--no-kernels", "--format", "json"], args.runs)
    snap = ROOT / "docs" / "examples" / "seeds" / "003-te-mla-a100-no-backend.snapshot.json"
    check_env = wall([exe, "check", "--no-kernels", "--format", "json", "--env", str(snap)], args.runs)
    os.environ["ATTN_DOCTOR_NO_CACHE"] = "1"  # the loaded-facts child with no cache: it imports torch
    cold = wall([exe, "check", "--no-kernels", "--format", "json"], 3)
    del os.environ["ATTN_DOCTOR_NO_CACHE"]

    from doctor.snapshot import facts_from_snapshot
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue
    from doctor.workload import default_workload

    cat = load_catalogue()
    docs = snapshots(1000)
    w = default_workload()
    facts = [facts_from_snapshot(d) for d in docs]
    t0 = time.perf_counter()
    for f in facts:
        diagnose(cat, f, w)
    fleet = time.perf_counter() - t0

    print("# check benchmark\n")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"catalogue: {len(cat.rules)} rules, {len(cat.frameworks)} frameworks\n")
    help_t = wall([exe, "--help"], args.runs)
    print("| what | median | min | max | target |")
    print("|---|---|---|---|---|")
    rows = (
        ("`attn-doctor --help` (floor: Python + typer + rich)", help_t, ""),
        ("`check --no-kernels --static --format json` (static probe + every rule)", static, "<= 150 ms"),
        ("`check --no-kernels --format json` (loaded facts from the one-hour cache)", check, "<= 150 ms"),
        ("`check --no-kernels --format json --env seed snapshot`", check_env, "<= 150 ms"),
        ("`check --no-kernels --format json`, cache off (child imports torch)", cold, "(not a target)"),
    )
    for label, t, target in rows:
        print(f"| {label} | {statistics.median(t)*1000:.0f} ms | {min(t)*1000:.0f} ms | {max(t)*1000:.0f} ms | {target} |")
    print(f"| whole catalogue x 1,000 snapshots (one process) | {fleet*1000:.0f} ms total | | | <= 1,000 ms |")


if __name__ == "__main__":
    main()
