"""Crash and hang isolation: a case that segfaults, aborts, exits or sleeps is recorded with
the evidence, and a fresh worker runs the rest."""

from __future__ import annotations

from typing import List

NO_TORCH = {"ATTN_DOCTOR_WORKER_SELFTEST": "1", "ATTN_DOCTOR_WORKER_NO_TORCH": "1"}

from doctor.verify import CaseSpec, run_cases


def _c(cid: str, kind: str, **kw: object) -> CaseSpec:
    return CaseSpec(id=cid, backend=f"selftest.{kind}", **kw)  # type: ignore[arg-type]


class Recorder:
    def __init__(self) -> None:
        self.calls: List[str] = []

    def on_start(self, total: int) -> None:
        self.calls.append(f"start:{total}")

    def on_case(self, result) -> None:
        self.calls.append(f"case:{result.id}:{result.status}")

    def on_done(self, run) -> None:
        self.calls.append(f"done:{len(run.results)}")


def test_segfault_abort_and_exit_are_crashes_and_the_rest_still_runs() -> None:
    cases = [_c("ok1", "pass"), _c("segv", "segfault"), _c("ok2", "pass"),
             _c("abrt", "abort"), _c("bye", "exit"), _c("ok3", "pass")]
    run = run_cases(cases, env=NO_TORCH, timeout_s=30)
    status = {r.id: r for r in run.results}
    assert [r.id for r in run.results] == [c.id for c in cases]
    assert status["segv"].status == "crashed" and "SIGSEGV" in status["segv"].detail
    assert status["abrt"].status == "crashed" and "SIGABRT" in status["abrt"].detail
    assert status["bye"].status == "crashed" and "status 7" in status["bye"].detail
    assert all(status[i].status == "passed" for i in ("ok1", "ok2", "ok3"))
    assert run.phases.workers == 4  # the first, then one after each crash
    tails = {d.id: d.stderr_tail for d in run.details}
    assert "Fatal Python error" in tails["segv"]  # faulthandler's report reaches the record
    assert "Extension modules" not in tails["segv"]


def test_hang_times_out_and_the_next_case_runs() -> None:
    cases = [_c("zz", "sleep", timeout_s=2.0), _c("after", "pass")]
    run = run_cases(cases, env=NO_TORCH, timeout_s=30)
    res = {r.id: r for r in run.results}
    assert res["zz"].status == "timeout"
    assert "no result within 2 s" in res["zz"].detail
    assert res["after"].status == "passed"


def test_observer_sees_start_each_case_and_done_in_order() -> None:
    rec = Recorder()
    run_cases([_c("a", "pass"), _c("b", "segfault"), _c("c", "fail")], env=NO_TORCH,
              observer=rec)
    assert rec.calls == ["start:3", "case:a:passed", "case:b:crashed", "case:c:failed", "done:3"]


def test_a_worker_that_cannot_start_skips_every_case_with_the_reason() -> None:
    run = run_cases([_c("a", "pass"), _c("b", "pass")], python="/bin/false", env=NO_TORCH)
    assert [r.status for r in run.results] == ["skipped", "skipped"]
    assert "failed to start" in run.results[0].detail
    run = run_cases([_c("a", "pass")], python="/nonexistent/python", env=NO_TORCH)
    assert run.results[0].status == "skipped" and "could not be started" in run.results[0].detail


def test_report_document_keeps_results_evidence_and_phases() -> None:
    run = run_cases([_c("a", "pass"), _c("b", "segfault")], env=NO_TORCH)
    doc = run.to_json()
    assert doc["schema"] == "attn-doctor.kernels/1"
    assert doc["counts"]["passed"] == 1 and doc["counts"]["crashed"] == 1
    crashed = [c for c in doc["cases"] if c["status"] == "crashed"][0]
    assert crashed["stderr_tail"] and crashed["spec"]["backend"] == "selftest.segfault"
    assert set(doc["phases"]) >= {"worker_start_s", "import_s", "cuda_init_s", "cases_s", "total_s"}
