"""Wall time of `attn-doctor probe --format json` against `python -m torch.utils.collect_env`.

Runs every command N times, round-robin (so load spikes hit all of them alike), after one
warm-up run each, and prints a markdown table of medians. Bytecode caching is left on for the
commands (PYTHONDONTWRITEBYTECODE removed), as on a user's machine.

    python benchmarks/bench_probe.py --reps 15 > benchmarks/results/probe.md
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]


def _time(argv: Sequence[str], env: Mapping[str, str]) -> float:
    start = time.perf_counter()
    res = subprocess.run(argv, cwd=ROOT, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.decode()[-500:]}")
    return elapsed


BREAKDOWN = """
import json, time
t0 = time.perf_counter()
import doctor.cli
t1 = time.perf_counter()
import doctor.app
t2 = time.perf_counter()
import doctor.probe
t3 = time.perf_counter()
doc = doctor.probe.collect(loaded=False)
t4 = time.perf_counter()
from doctor.report.json_report import dumps
dumps(doc)
t5 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4]))
"""
STAGES = (
    "import doctor.cli (typer, click, command modules)",
    "import doctor.app (rules loader, yaml)",
    "import doctor.probe",
    "collect(loaded=False)",
    "JSON dump",
)


def _breakdown(env: Mapping[str, str], reps: int) -> List[List[float]]:
    rows = []
    for _ in range(reps):
        out = subprocess.run([sys.executable, "-c", BREAKDOWN], cwd=ROOT, env=dict(env), capture_output=True, text=True)
        if out.returncode == 0:
            import json

            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def _cli() -> List[str]:
    script = Path(sys.executable).with_name("attn-doctor")
    return [str(script)] if script.exists() else [sys.executable, "-m", "doctor"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()

    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cold = {**base, "ATTN_DOCTOR_NO_CACHE": "1"}
    cache_home = tempfile.mkdtemp(prefix="attn-doctor-bench-")
    warm = {**base, "XDG_CACHE_HOME": cache_home}
    cli = _cli()
    cases: List[Tuple[str, List[str], Dict[str, str]]] = [
        ("`python -c pass` (interpreter start, for reference)", [sys.executable, "-c", "pass"], base),
        ("`attn-doctor probe --format json --static`", [*cli, "probe", "--format", "json", "--static"], cold),
        ("`attn-doctor probe --format json`, loaded-facts cache warm", [*cli, "probe", "--format", "json"], warm),
        ("`attn-doctor probe --format json`, no cache (child imports torch)", [*cli, "probe", "--format", "json"], cold),
        ("`python -m torch.utils.collect_env`", [sys.executable, "-m", "torch.utils.collect_env"], base),
    ]
    times: Dict[str, List[float]] = {name: [] for name, _, _ in cases}
    try:
        for _, argv, env in cases:  # warm-up: writes .pyc files and primes the cache
            _time(argv, env)
        for _ in range(args.reps):
            for name, argv, env in cases:
                times[name].append(_time(argv, env))
    finally:
        shutil.rmtree(cache_home, ignore_errors=True)

    ref = statistics.median(times[cases[-1][0]])
    torch_version = "not installed"
    try:
        import importlib.metadata

        torch_version = importlib.metadata.version("torch")
    except Exception:  # noqa: BLE001
        pass
    print("# attn-doctor probe: wall time\n")
    print(
        f"{args.reps} runs each, round-robin after one warm-up; {os.cpu_count()} CPU cores; "
        f"Python {platform.python_version()}; torch {torch_version}; command `{' '.join(Path(c).name for c in cli)}`.\n"
    )
    print("| command | median s | min s | max s | vs collect_env |")
    print("|---|---:|---:|---:|---:|")
    for name, _, _ in cases:
        t = times[name]
        med = statistics.median(t)
        ratio = "1.0x" if name == cases[-1][0] else f"{ref / med:.1f}x faster"
        print(f"| {name} | {med:.3f} | {min(t):.3f} | {max(t):.3f} | {ratio} |")

    rows = _breakdown(cold, args.reps)
    if rows:
        print("\nWhere the static run spends its time (in-process, median of the same number of fresh processes):\n")
        print("| stage | median ms |")
        print("|---|---:|")
        for i, stage in enumerate(STAGES):
            print(f"| {stage} | {1000 * statistics.median(r[i] for r in rows):.1f} |")


if __name__ == "__main__":
    main()
