"""What the contract analysis costs the static probe and `check --no-kernels`.

Times `probe --format json --static` and `check --no-kernels --static --format json` for two
source trees of attn-doctor (the one before the analysis, `--base`, and this one), round-robin,
a fresh process per run, in two environments:

1. this Python as it is (the dev venv: no caller/callee pair installed, so the analysis only
   loads the pair files and returns);
2. the same plus a site folder (`--site`, put on PYTHONPATH) holding the seeds' releases:
   TransformerEngine 1.11 with flash-attn 2.6.3, transformers 4.44 and XTuner 0.1.23 (build it
   with `--make-site`, from the test download cache); once with the parse cache warm (the
   usual case: nothing changed since the last run) and once cold (first run after an install).

    git archive <base commit> | tar -x -C /tmp/base-tree
    python benchmarks/bench_contracts.py --base /tmp/base-tree --make-site /tmp/bench-site --runs 11 \
        > benchmarks/results/contracts.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent


CPU: Dict[str, List[float]] = {}


def _run(argv: Sequence[str], env: Mapping[str, str], key: str = "") -> float:
    """Wall seconds of one run; its CPU seconds (user + system of the child) go to CPU[key]."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(list(argv), env=dict(env), cwd="/tmp", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.decode()[-400:]}")
    if key:
        CPU.setdefault(key, []).append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return dt


def make_site(site: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "probe"))
    import upstream  # the tests' downloader and installer (download cache)

    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    upstream.install_te(site)
    upstream.install_sdist_package(site, "flash_attn-2.6.3.tar.gz", "flash_attn")
    upstream.install_xtuner(site)
    upstream.install_transformers(site, "4.44.0")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True, help="attn-doctor source tree before the analysis")
    ap.add_argument("--site", type=Path, default=None)
    ap.add_argument("--make-site", type=Path, default=None)
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--stage-only", action="store_true", help="only the in-process collect() stage (CPU time)")
    args = ap.parse_args()
    site = args.site
    if args.make_site:
        make_site(args.make_site)
        site = args.make_site
    trees = {"before": args.base.resolve(), "after": ROOT}
    commands = {
        "probe --format json --static": ["probe", "--format", "json", "--static"],
        "check --no-kernels --static --format json": ["check", "--no-kernels", "--static", "--format", "json"],
    }
    xdg = Path(tempfile.mkdtemp(prefix="bench-contracts-"))
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    envs: Dict[str, Dict[str, str]] = {}
    for label, extra in (("dev venv", None), ("+ TE 1.11, flash-attn 2.6.3, transformers 4.44, xtuner 0.1.23", site)):
        if label != "dev venv" and extra is None:
            continue
        for tree_name, tree in trees.items():
            path = str(tree) + (os.pathsep + str(extra) if extra else "")
            envs[f"{label}|{tree_name}"] = {**base_env, "PYTHONPATH": path, "XDG_CACHE_HOME": str(xdg / tree_name), "NO_COLOR": "1"}
    times: Dict[str, List[float]] = {}
    exe = [sys.executable, "-m", "doctor"]
    for key, env in envs.items():  # warm-up: bytecode, catalogue and parse caches
        for c in commands.values():
            _run([*exe, *c], env)
    for _ in range(0 if args.stage_only else args.runs):
        for key, env in envs.items():
            for name, c in commands.items():
                times.setdefault(f"{key}|{name}", []).append(_run([*exe, *c], env, f"{key}|{name}"))
    # the collect() stage alone, in-process (less exposed to other processes' load than wall time)
    stage = (
        "import json, time, doctor.cli, doctor.probe\n"
        "from doctor.probe.sources import Sources\n"
        "src = Sources.system(); t = time.perf_counter(); c = time.process_time()\n"
        "doctor.probe.collect(loaded=False, sources=src)\n"
        "print(json.dumps([time.perf_counter() - t, time.process_time() - c]))\n"
    )
    stages: Dict[str, List[float]] = {}
    cpu: Dict[str, List[float]] = {}
    for _ in range(args.runs + 1):
        for key, env in envs.items():
            out = subprocess.run([sys.executable, "-c", stage], env=env, cwd="/tmp", capture_output=True, text=True)
            wall_s, cpu_s = json.loads(out.stdout.strip().splitlines()[-1])
            stages.setdefault(key, []).append(wall_s)
            cpu.setdefault(key, []).append(cpu_s)
    cold: Dict[str, List[float]] = {}
    if site is not None:
        key = "+ TE 1.11, flash-attn 2.6.3, transformers 4.44, xtuner 0.1.23|after"
        for _ in range(3):
            shutil.rmtree(xdg / "after" / "attn-doctor" / "contracts", ignore_errors=True)
            cold.setdefault("probe", []).append(_run([*exe, *commands["probe --format json --static"]], envs[key], "cold"))

    print("# contract analysis: cost on the static probe and check\n")
    print(f"{args.runs} runs each, round-robin after a warm-up; {os.cpu_count()} CPU cores; Python {platform.python_version()}.\n")
    if not args.stage_only:
        print("Wall time is exposed to other processes on the machine; CPU time (user + system of the")
        print("command's process) is not, and is the figure to compare when the machine is busy.\n")
        print("| environment | command | before wall (ms) | after wall (ms) | before CPU (ms) | after CPU (ms) | CPU change |")
        print("|---|---|---:|---:|---:|---:|---:|")
    for label in dict.fromkeys(k.split("|")[0] for k in envs) if not args.stage_only else ():
        for name in commands:
            b = statistics.median(times[f"{label}|before|{name}"]) * 1000
            a = statistics.median(times[f"{label}|after|{name}"]) * 1000
            bc = statistics.median(CPU[f"{label}|before|{name}"]) * 1000
            ac = statistics.median(CPU[f"{label}|after|{name}"]) * 1000
            print(f"| {label} | `{name}` | {b:.0f} | {a:.0f} | {bc:.0f} | {ac:.0f} | {100 * (ac - bc) / bc:+.0f}% |")
    print("\nThe static probe's `collect()` stage alone (in-process, median of fresh processes; CPU time is")
    print("what this process used, so other processes' load does not inflate it):\n")
    print("| environment | before wall (ms) | after wall (ms) | before CPU (ms) | after CPU (ms) | CPU change |")
    print("|---|---:|---:|---:|---:|---:|")
    for label in dict.fromkeys(k.split("|")[0] for k in envs):
        b = statistics.median(stages[f"{label}|before"][1:]) * 1000
        a = statistics.median(stages[f"{label}|after"][1:]) * 1000
        bc = statistics.median(cpu[f"{label}|before"][1:]) * 1000
        ac = statistics.median(cpu[f"{label}|after"][1:]) * 1000
        print(f"| {label} | {b:.1f} | {a:.1f} | {bc:.1f} | {ac:.1f} | {ac - bc:+.1f} ms |")
    if cold:
        print(f"\nCold parse cache (first probe after installing those releases; TE's 8,500-line attention.py "
              f"and the transformers modeling files are parsed once): median of 3 = "
              f"{statistics.median(cold['probe']) * 1000:.0f} ms wall, {statistics.median(CPU['cold']) * 1000:.0f} ms CPU "
              f"for `probe --format json --static`.")
    shutil.rmtree(xdg, ignore_errors=True)


if __name__ == "__main__":
    main()
