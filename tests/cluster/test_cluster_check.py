"""`check --distributed` links rank 0's kernel run exactly as single-node `check` does: the
per-backend evidence and the timings survive (they were dropped when a stand-in object
carried only the results)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from doctor import app as core
from doctor.cluster.report import ClusterReport
from doctor.model import CaseResult
from doctor.report.render import Style
from doctor.rules.loader import load_catalogue
from doctor.snapshot import facts_from_snapshot
from doctor.verify import CaseSpec
from doctor.verify.results import Environment, KernelRun, Phases, Timing
from doctor.workload import resolve_workload

SEED = Path(__file__).resolve().parents[2] / "docs" / "examples" / "seeds" / "004-te-fused-strided-gqa.snapshot.json"
HD320 = CaseSpec(id="sdpa.flash/bf16/hd320/no_mask/fwd", backend="sdpa.flash", head_dim_qk=320, head_dim_v=320, mask="no_mask", direction="fwd")
HD128 = CaseSpec(id="sdpa.flash/bf16/hd128/causal/fwdbwd", backend="sdpa.flash")
RUN = KernelRun(
    results=(
        CaseResult(HD320.id, "sdpa.flash", "unsupported", "head_dim should be no more than 256"),
        CaseResult(HD128.id, "sdpa.flash", "passed", max_rel_error=0.004, ms=0.41, tflops=300.0),
    ),
    details=(),
    phases=Phases(),
    environment=Environment(),
    timings=(Timing("b1 s4096 hd128", "sdpa.flash", HD128.id, 0.41, 300.0, True),),
    fastest=(Timing("b1 s4096 hd128", "sdpa.flash", HD128.id, 0.41, 300.0, True),),
    cases=(HD320, HD128),
)


def test_distributed_check_carries_the_same_kernel_evidence_as_check(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(SEED.read_text())
    cluster = ClusterReport(rank=0, world_size=1, launcher="env", backend="gloo", complete=True,
                            kernels=tuple((0, r) for r in RUN.results), kernel_run=RUN, snapshots=((0, doc),))

    def fake_run_distributed(options: Any) -> ClusterReport:
        return cluster

    monkeypatch.setattr("doctor.cluster.run.run_distributed", fake_run_distributed)
    from doctor.commands.cluster import run_cluster_check

    run_cluster_check(workload_file=None, model=None, flags={}, format="json", style=Style(), kernels=True)
    distributed = json.loads(capsys.readouterr().out)

    inputs = core.Inputs(facts=facts_from_snapshot(doc), workload=resolve_workload(), catalogue=load_catalogue())
    single = core.check(inputs, kernel_run=RUN)
    want = {b.id: list(b.evidence) for b in single.backends if b.evidence}
    got = {b["id"]: b["evidence"] for b in distributed["backends"] if b["evidence"]}
    assert want and got == want, "per-backend kernel evidence differs from single-node check"
    assert any(e.startswith("confirmed (SDPA-FLASH-HEAD-DIM)") for e in got["sdpa.flash"])
    assert [list(x) for x in single.kernel_summary] == distributed["kernel_summary"] != []
