"""Kernel verdicts joined to static predictions: confirmed, refuted, not run, unexpected."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Tuple

from doctor.app import Inputs, check, fail_count
from doctor.model import CaseResult
from doctor.verify.results import Environment, KernelRun, Phases
from doctor.snapshot import facts_from_snapshot
from doctor.rules.loader import load_catalogue
from doctor.workload import resolve_workload

SEED = Path(__file__).resolve().parents[2] / "docs" / "examples" / "seeds" / "004-te-fused-strided-gqa"
STRIDED = "te.fused/fp16/hd64/gqa16-1/s2048/b1/causal/strided-qkv/fwdbwd"


def FakeRun(results: Tuple[CaseResult, ...], cases: tuple = (), timings: tuple = (), fastest: tuple = ()) -> KernelRun:  # noqa: N802
    """A real KernelRun holding only what linking reads."""
    return KernelRun(results=tuple(results), details=(), phases=Phases(), environment=Environment(), timings=timings, fastest=fastest, cases=cases)


def report_with(*results: CaseResult):  # type: ignore[no-untyped-def]
    inputs = Inputs(
        facts=facts_from_snapshot(json.loads(SEED.with_suffix(".snapshot.json").read_text())),
        workload=resolve_workload(workload_file=SEED.with_suffix(".workload.yaml")),
        catalogue=load_catalogue(),
    )
    return check(inputs, kernel_run=FakeRun(results=tuple(results)))


def finding(report, rule_id: str):  # type: ignore[no-untyped-def]
    return next(f for f in report.findings if f.rule_id == rule_id)


def test_wrong_numbers_confirm_the_silent_corruption_rule() -> None:
    r = report_with(CaseResult(STRIDED, "te.fused", "failed", "out max rel error 2.1", max_rel_error=2.1))
    f = finding(r, "TE-FUSED-STRIDED-GQA-QKV")
    assert f.status == "confirmed" and f.severity == "error"
    assert any(STRIDED in e and "2.1" in e for e in f.evidence)


def test_passing_cases_refute_and_downgrade() -> None:
    r = report_with(CaseResult(STRIDED, "te.fused", "passed", max_rel_error=0.001))
    f = finding(r, "TE-FUSED-STRIDED-GQA-QKV")
    assert f.status == "refuted" and f.severity == "info"
    assert fail_count(r, "error", strict=False) == sum(1 for x in r.findings if x.severity == "error" and x.status in ("fired", "confirmed"))


def test_no_matching_case_is_not_run() -> None:
    r = report_with(CaseResult("sdpa.math/bf16/hd128/causal/fwdbwd", "sdpa.math", "passed", ms=1.0))
    assert finding(r, "TE-FUSED-STRIDED-GQA-QKV").status == "not_run"


def test_unpredicted_crash_becomes_its_own_finding() -> None:
    r = report_with(CaseResult("sdpa.cudnn/bf16/hd128/causal/fwdbwd", "sdpa.cudnn", "crashed", "CUDA error: an illegal memory access"))
    f = finding(r, "KERNEL-SDPA-CUDNN-CRASHED")
    assert f.severity == "error" and "illegal memory access" in f.message
    assert ("KERNEL-SDPA-CUDNN-CRASHED", "fired") in r.rule_results


def test_failure_of_a_known_issue_outside_the_workload_names_the_rule() -> None:
    case = "sdpa.cudnn/bf16/hd64/b4/causal/varlen/fwdbwd"
    r = report_with(CaseResult(case, "sdpa.cudnn", "failed", "dq: rel err 4.1", max_rel_error=4.1))
    f = finding(r, "KERNEL-NUM-SDPA-CUDNN-NESTED-BACKWARD")
    assert f.severity == "warning" and f.fixes and "NUM-SDPA-CUDNN-NESTED-BACKWARD" in f.message


def test_failure_of_an_adapter_never_run_on_a_gpu_is_a_warning_that_says_so() -> None:
    case = "flash_attn.fa3/bf16/hd128/causal/fwdbwd"
    r = report_with(CaseResult(case, "flash_attn.fa3", "crashed", "TypeError: forward() got an unexpected keyword"))
    f = finding(r, "KERNEL-FLASH-ATTN-FA3-CRASHED")
    assert f.severity == "warning" and "not yet run on a real GPU" in f.message


def test_each_case_is_judged_against_the_prediction_for_its_own_shape() -> None:
    from doctor.verify import CaseSpec

    doc = json.loads(SEED.with_suffix(".snapshot.json").read_text())
    inputs = Inputs(facts=facts_from_snapshot(doc), workload=resolve_workload(), catalogue=load_catalogue())  # hd 128
    hd320 = CaseSpec(id="sdpa.flash/bf16/hd320/no_mask/fwd", backend="sdpa.flash", head_dim_qk=320, head_dim_v=320, mask="no_mask", direction="fwd")
    hd128 = CaseSpec(id="sdpa.flash/bf16/hd128/causal/fwdbwd", backend="sdpa.flash")
    run = FakeRun(
        results=(
            CaseResult(hd320.id, "sdpa.flash", "unsupported", "head_dim should be no more than 256"),
            CaseResult(hd128.id, "sdpa.flash", "unsupported", "No available kernel"),
        ),
        cases=(hd320, hd128),
    )
    r = check(inputs, kernel_run=run)
    flash = next(b for b in r.backends if b.id == "sdpa.flash")
    assert flash.available is True  # for the workload's own shape
    assert any(e.startswith("confirmed (SDPA-FLASH-HEAD-DIM)") and hd320.id in e for e in flash.evidence)
    assert any(e.startswith("mismatch") and hd128.id in e for e in flash.evidence)
    assert not [f for f in r.findings if f.rule_id.startswith("KERNEL-")]  # refusals are not failures


def test_a_kernel_finding_offers_the_rule_fixes_that_apply_here(tmp_path: Path) -> None:
    # a failing case of a rule that did not fire is reported with that rule's fixes as check
    # offers them: a fix whose `when:` is false here (an sm < 80 fix on this H100) is left out,
    # and placeholders are filled
    (tmp_path / "r.yaml").write_text(
        """
rules:
  - id: MY-VARLEN
    severity: error
    area: test
    title: my varlen rule
    message: fires only on a workload this one is not
    when: {fact: workload.head_dim_qk, eq: 7}
    kernels: ["sdpa.cudnn/*mycase*"]
    fixes:
      - {description: "for old GPUs only", env: {MY_SWITCH: "1"}, when: {fact: gpu.sm, lt: 80}}
      - {description: "on {gpu.sm}: use another backend", env: {MY_SWITCH: "2"}}
    sources: [https://github.com/example/example/issues/1]
    tests:
      fires: [{workload: {head_dim_qk: 7}}]
      passes: [{workload: {head_dim_qk: 8}}]
""",
        encoding="utf-8",
    )
    inputs = Inputs(
        facts=facts_from_snapshot(json.loads(SEED.with_suffix(".snapshot.json").read_text())),
        workload=resolve_workload(workload_file=SEED.with_suffix(".workload.yaml")),
        catalogue=load_catalogue([tmp_path], use_cache=False),
    )
    case = "sdpa.cudnn/bf16/hd64/mycase/fwdbwd"
    r = check(inputs, kernel_run=FakeRun(results=(CaseResult(case, "sdpa.cudnn", "failed", "rel err 3", max_rel_error=3.0),)))
    f = finding(r, "KERNEL-MY-VARLEN")
    assert [x.description for x in f.fixes] == ["on sm90: use another backend"]
