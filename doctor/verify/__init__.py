"""The kernel stage: kernel verification: plan attention cases, run them in an isolated worker, collect results.

The cases themselves run in `kernels/worker.py` (shipped as doctor/_data/kernels), started
as a separate Python process: this module never imports torch. The worker streams JSON lines
back; a case that crashes the worker (segfault, abort, illegal memory access) or hangs past
its timeout is recorded as `crashed` / `timeout` with the tail of the worker's stderr, and a
fresh worker continues with the remaining cases.

Public API (docs/kernels.md):
    plan_cases(workload, installed, suite="default") -> list[CaseSpec]
    run_cases(cases, python=..., timeout_s=..., observer=..., env=...) -> KernelRun
    kernels_available(facts) -> (bool, reason)
    installed_backends(facts=None) -> set[str]
    link_kernels(report, catalogue, run) -> Report   (doctor.verify.link)
    python -m doctor.verify --out FILE.json [--workload FILE] [--suite default|full]
"""

from doctor.verify.cases import (
    BACKENDS,
    CASE_ID_PATTERN,
    SDPA_BACKENDS,
    CaseSpec,
    installed_backends,
    kernels_available,
    make_case,
    matches,
    plan_cases,
)
from doctor.verify.results import KernelRun
from doctor.verify.runner import ask_request, run_cases

__all__ = [
    "BACKENDS",
    "CASE_ID_PATTERN",
    "SDPA_BACKENDS",
    "CaseSpec",
    "KernelRun",
    "ask_request",
    "installed_backends",
    "kernels_available",
    "matches",
    "make_case",
    "plan_cases",
    "run_cases",
]
