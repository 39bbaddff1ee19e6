"""The frozen values of a distributed check: per-rank rows, comm and CP results, the report.

`ClusterReport` is what `run_distributed` returns on every rank; only rank 0's is complete
(`is_reporter`). Everything here is plain data with a `to_dict()` that JSON can write, so the
CLI's formatters and `python -m doctor.cluster --out` share one shape.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from doctor.errors import ExitCode
from doctor.model import CaseResult, Finding
from doctor.verify.results import KernelRun

# Rank status in the report.
ANSWERED = "answered"  # its results reached rank 0
NO_ANSWER = "no_answer"  # joined, then stopped answering (hung or died); see last_phase
NEVER_JOINED = "never_joined"  # never reached rank 0's store
LOST = "lost"  # reached the gather, but its result did not arrive


@dataclass(frozen=True)
class RankRow:
    """One rank as rank 0 saw it."""

    rank: int
    host: Optional[str]
    local_rank: Optional[int]
    status: str  # answered | no_answer | never_joined | lost
    last_phase: Optional[str] = None  # the last phase it reported reaching
    gpu: Optional[str] = None  # "NVIDIA H200 (sm90)": the GPU this rank runs on
    driver: Optional[str] = None
    torch: Optional[str] = None
    cuda: Optional[str] = None  # CUDA torch was built for
    cudnn: Optional[str] = None
    flash_attn: Optional[str] = None
    transformer_engine: Optional[str] = None
    kernels_passed: int = 0
    kernels_failed: int = 0
    kernels_skipped: Optional[str] = None  # why this rank ran no kernel cases
    probe_error: Optional[str] = None  # the probe failed: facts of this rank are unknown
    detail: str = ""


@dataclass(frozen=True)
class CommCheck:
    """One collective: values checked on every rank, time and bandwidth as rank 0 measured."""

    op: str  # all_reduce | all_gather
    dtype: str
    bytes: int  # all_reduce: tensor size; all_gather: gathered (output) size
    ok: bool
    max_error: Optional[float] = None
    ms: Optional[float] = None  # mean per call
    algbw_gbps: Optional[float] = None  # bytes / time, GB/s (1e9)
    busbw_gbps: Optional[float] = None  # nccl-tests convention: algbw * 2(n-1)/n or (n-1)/n
    failed_ranks: Tuple[int, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class CommResult:
    backend: str  # nccl | gloo
    device: str  # "cuda" | "cpu"
    world_size: int
    ok: Optional[bool]  # None: not run (see detail)
    checks: Tuple[CommCheck, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class CpResult:
    """One context-parallel scheme compared with a single-device float64 reference."""

    scheme: str  # all_gather | p2p
    causal: bool
    dtype: str
    world_size: int
    seq_len: int
    heads: int
    head_dim: int
    ok: Optional[bool]  # None: not run (see detail)
    max_abs_error: Optional[float] = None
    max_rel_error: Optional[float] = None  # max |out - ref| / max |ref|
    tolerance: Optional[float] = None  # on max_rel_error
    ms: Optional[float] = None  # the CP forward on rank 0, wall clock
    kernel: str = ""  # what computed each block (e.g. "sdpa causal_lower_right")
    detail: str = ""


@dataclass(frozen=True)
class ClusterReport:
    """What one rank returns. Rank 0's (`is_reporter`) holds the whole job."""

    rank: int
    world_size: int
    launcher: str  # torchrun | slurm | env
    backend: str  # the job's backend: nccl on GPUs, gloo on CPU
    complete: bool  # every rank answered within the timeouts
    ranks: Tuple[RankRow, ...] = ()
    findings: Tuple[Finding, ...] = ()
    kernels: Tuple[Tuple[int, CaseResult], ...] = ()  # (rank, result) for every case run
    kernel_run: Optional[KernelRun] = None  # the reporter's own run (specs, timings): linked like `check`
    comm: Optional[CommResult] = None
    cp: Tuple[CpResult, ...] = ()
    snapshots: Tuple[Tuple[int, Mapping[str, Any]], ...] = ()  # (rank, snapshot) of answered ranks
    notes: Tuple[str, ...] = ()  # what happened to the run itself (timeouts, signals)
    hard_exit: bool = False  # a thread is still blocked in a collective: exit with os._exit
    elapsed_s: float = 0.0

    @property
    def is_reporter(self) -> bool:
        return self.rank == 0

    @property
    def answered(self) -> Tuple[int, ...]:
        return tuple(r.rank for r in self.ranks if r.status == ANSWERED)

    @property
    def missing(self) -> Tuple[int, ...]:
        return tuple(r.rank for r in self.ranks if r.status != ANSWERED)

    @property
    def exit_code(self) -> int:
        """ExitCode.INCOMPLETE if a rank is missing (hung, died, never joined, or this rank lost
        rank 0), 1 for error findings, else 0.

        The CLI may apply its own --fail-on threshold to `findings` instead; a non-reporting
        rank returns 0 once its results are handed over (rank 0 sets the job's code).
        """
        if not self.complete:
            return int(ExitCode.INCOMPLETE)
        if not self.is_reporter:
            return 0
        return 1 if any(f.severity == "error" and f.status != "not_evaluated" for f in self.findings) else 0

    def to_dict(self) -> Dict[str, Any]:
        doc = asdict(self)
        doc["kernels"] = [{"rank": r, **asdict(c)} for r, c in self.kernels]
        doc["snapshots"] = [{"rank": r, "snapshot": dict(s)} for r, s in self.snapshots]
        doc["answered"] = list(self.answered)
        doc["missing"] = list(self.missing)
        doc["exit_code"] = self.exit_code
        return doc
