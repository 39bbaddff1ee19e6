"""What a kernel run produced: per-case results and details, timings, the environment the
worker saw, and the JSON document committed under docs/gpu-runs/ (docs/kernels.md)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Tuple

from doctor.model import CaseResult

from doctor.verify.cases import STATUSES, CaseSpec



@dataclass(frozen=True)
class TensorCheck:
    name: str  # out | dq | dk | dv
    rel_error: Optional[float]
    baseline: float
    tolerance: float
    nonfinite: int = 0
    unwritten: int = 0


@dataclass(frozen=True)
class CaseDetail:
    """What the JSON report keeps beyond CaseResult: the per-tensor errors and evidence."""

    id: str
    purpose: str
    seconds: Optional[float]
    checks: Tuple[TensorCheck, ...] = ()
    stderr_tail: str = ""


@dataclass(frozen=True)
class Phases:
    worker_start_s: float = 0.0  # spawn -> interpreter up (first worker)
    import_s: float = 0.0  # import torch (first worker)
    cuda_init_s: float = 0.0  # CUDA context + first kernel (first worker)
    cases_s: float = 0.0  # wall time from the first worker ready to the last case done
    restart_s: float = 0.0  # start-up time of replacement workers after crashes/timeouts
    total_s: float = 0.0
    workers: int = 0


@dataclass(frozen=True)
class Environment:
    device: Optional[str] = None  # cuda | cpu
    gpu: Optional[str] = None
    capability: Optional[str] = None
    driver: Optional[str] = None
    torch: Optional[str] = None
    cuda: Optional[str] = None
    cudnn: Optional[str] = None
    python: Optional[str] = None
    packages: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Timing:
    shape: str
    backend: str
    case_id: str
    ms: float
    tflops: Optional[float]
    correct: bool  # every correctness case of this backend for the shape passed


@dataclass(frozen=True)
class KernelRun:
    results: Tuple[CaseResult, ...]
    details: Tuple[CaseDetail, ...]
    phases: Phases
    environment: Environment
    timings: Tuple[Timing, ...] = ()
    fastest: Tuple[Timing, ...] = ()  # per shape: the fastest backend that passed
    cases: Tuple[CaseSpec, ...] = ()
    # What each installed library itself would pick for the asked workloads (kernels/ask.py),
    # asked in the first worker before any case: {"name": ..., "answers": [...]} each.
    asked: Tuple[Dict[str, Any], ...] = ()

    def counts(self) -> Dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def to_json(self) -> Dict[str, Any]:
        """The document committed under docs/gpu-runs/ (schema in docs/kernels.md)."""
        env = asdict(self.environment)
        env["packages"] = dict(self.environment.packages)
        details = {d.id: d for d in self.details}
        specs = {c.id: c for c in self.cases}
        cases = []
        for r in self.results:
            d = details.get(r.id)
            c = specs.get(r.id)
            cases.append({
                **asdict(r),
                "purpose": d.purpose if d else "",
                "seconds": d.seconds if d else None,
                "checks": [asdict(t) for t in d.checks] if d else [],
                "stderr_tail": d.stderr_tail if d else "",
                "spec": c.to_json() if c else None,
            })
        return {
            "schema": "attn-doctor.kernels/1",
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "environment": env,
            "phases": asdict(self.phases),
            "counts": self.counts(),
            "fastest": [asdict(t) for t in self.fastest],
            "timings": [asdict(t) for t in self.timings],
            "cases": cases,
            "asked": list(self.asked),
        }


