"""One rank of a test job (started by the tests, by hand or under torchrun).

Behaviour is injected per rank through environment variables, the way a heterogeneous or
broken node would differ:
    ATTN_DOCTOR_TEST_ENV_<rank>   "NAME=value;NAME=value" set in this rank before probing
    ATTN_DOCTOR_TEST_MODE_<rank>  "exit" (dies in its probe) | "hang" (sleeps in its probe)
    ATTN_DOCTOR_TEST_DRIVER       NVIDIA driver version this rank's snapshot reports
    ATTN_DOCTOR_TEST_KERNEL_FAIL  "1": this rank's kernel case fails
    ATTN_DOCTOR_TEST_TIMEOUTS     "join,local,collective[,straggler]" seconds
The probe is the real one (static mode); the kernel runner is a fake with one case.
Usage: python tests/cluster/rank_main.py REPORT.json  (rank 0 writes it; rank N REPORT.json.rankN).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, Mapping, Optional

from doctor.cluster.gather import Timeouts
from doctor.cluster.run import ClusterOptions, run_distributed
from doctor.model import CaseResult, Workload
from doctor.verify.results import Environment, KernelRun, Phases

CASE = "sdpa.flash/bf16/hd128/causal/fwdbwd"


def _rank() -> int:
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


def _inject() -> None:
    for item in filter(None, os.environ.get(f"ATTN_DOCTOR_TEST_ENV_{_rank()}", "").split(";")):
        name, _, value = item.partition("=")
        os.environ[name] = value


def probe(loaded: bool) -> Dict[str, Any]:
    mode = os.environ.get(f"ATTN_DOCTOR_TEST_MODE_{_rank()}", "")
    if mode == "exit":
        os._exit(3)
    if mode == "hang":
        time.sleep(3600)
    from doctor.probe import collect

    doc = collect(loaded=False)
    driver = os.environ.get("ATTN_DOCTOR_TEST_DRIVER")
    if driver:
        doc.setdefault("cuda", {})["driver_version"] = driver
        doc.get("unknown", {}).pop("cuda.driver_version", None)
    return doc


def kernels(snapshot: Mapping[str, Any], workload: Optional[Workload], index: Optional[int]) -> KernelRun:
    if os.environ.get("ATTN_DOCTOR_TEST_KERNEL_FAIL") == "1":
        results = (CaseResult(CASE, "sdpa.flash", "failed", "max rel error 0.31 > 0.02"),)
    else:
        results = (CaseResult(CASE, "sdpa.flash", "passed", max_rel_error=0.004),)
    return KernelRun(results=results, details=(), phases=Phases(), environment=Environment())


def main() -> int:
    _inject()
    raw = [float(x) for x in os.environ.get("ATTN_DOCTOR_TEST_TIMEOUTS", "30,10,20").split(",")]
    timeouts = Timeouts(join_s=raw[0], local_s=raw[1], collective_s=raw[2], straggler=raw[3] if len(raw) > 3 else None)
    options = ClusterOptions(loaded=False, probe=probe, kernel_runner=kernels, timeouts=timeouts)
    report = run_distributed(options)
    path = sys.argv[1] if report.is_reporter else f"{sys.argv[1]}.rank{report.rank}"
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(report.to_dict(), fh, default=str)
    code = report.exit_code
    if report.hard_exit:
        sys.stdout.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
