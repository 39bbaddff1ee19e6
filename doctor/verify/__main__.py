"""python -m doctor.verify --out FILE.json [--workload FILE] [--suite default|full]: run the
kernel cases here and write the JSON document (docs/kernels.md)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from doctor.errors import ExitCode, InputError
from doctor.model import CaseResult, Workload
from doctor.workload import load_workload_file
from doctor.verify.cases import DEFAULT_TIMEOUT_S, installed_backends, matches, plan_cases
from doctor.verify.runner import ask_request, run_cases


class _PartialWriter:
    """Observer for the command line: keeps a partial report on disk while cases run, so a
    run cut short by an outer time limit still leaves its evidence."""

    def __init__(self, out: Path, plan: Mapping[str, Any], total: int) -> None:
        self.out, self.plan, self.total = out, dict(plan), total
        self.results: List[Dict[str, Any]] = []

    def on_start(self, total: int) -> None:
        pass

    def on_done(self, run: object) -> None:
        pass

    def on_case(self, result: CaseResult) -> None:
        self.results.append(asdict(result))
        doc = {"schema": "attn-doctor.kernels/1", "partial": True, "plan": self.plan,
               "planned": self.total, "cases": self.results}
        self.out.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m doctor.verify",
                                 description="Run the attention kernel cases and write JSON.")
    ap.add_argument("--out", required=True, help="write the JSON report here")
    ap.add_argument("--workload", help="workload file (YAML/JSON, the keys of docs/workload.md)")
    ap.add_argument("--suite", default="default", choices=("default", "full"))
    ap.add_argument("--backends", help="comma-separated backend ids (default: installed)")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the worker")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per case")
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--only", action="append", default=[],
                    help="keep only cases whose id matches this glob (repeatable)")
    ap.add_argument("--no-ask", action="store_true",
                    help="do not ask the libraries for their own backend pick first")
    args = ap.parse_args(argv)
    installed = (set(args.backends.split(",")) if args.backends else installed_backends())
    workload = None
    if args.workload:
        try:
            workload = load_workload_file(Path(args.workload))
        except InputError as exc:
            sys.stderr.write(f"python -m doctor.verify: {exc}\n")
            return int(ExitCode.USAGE)
    cases = plan_cases(workload, installed, suite=args.suite)
    if args.only:
        cases = [c for c in cases if matches(c.id, args.only)]
    plan = {"suite": args.suite, "only": args.only, "workload": asdict(workload) if workload else None,
            "installed": sorted(installed)}
    out = Path(args.out)
    run = run_cases(cases, python=args.python, timeout_s=args.timeout, device=args.device,
                    observer=_PartialWriter(out, plan, len(cases)),
                    ask=[] if args.no_ask else [ask_request(workload or Workload())])
    doc = run.to_json()
    doc["plan"] = plan
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    c = run.counts()
    sys.stderr.write(" ".join(f"{k}={v}" for k, v in c.items() if v)
                     + f" total_s={run.phases.total_s:.2f} -> {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

