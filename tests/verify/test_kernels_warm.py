"""The warm worker: `check` starts the kernel worker before the probe so that torch's import
and CUDA start overlap it. It must give the same results as a cold start, and never outlive
the check that started it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from doctor import app
from doctor.resources import kernels_dir
from doctor.verify import CaseSpec, run_cases
from doctor.verify.runner import WarmWorker

NO_TORCH = {"ATTN_DOCTOR_WORKER_SELFTEST": "1", "ATTN_DOCTOR_WORKER_NO_TORCH": "1"}


def _c(cid: str, kind: str) -> CaseSpec:
    return CaseSpec(id=cid, backend=f"selftest.{kind}")


def test_warm_worker_reports_its_environment_before_it_is_given_cases() -> None:
    proc = subprocess.Popen([sys.executable, "-u", str(kernels_dir() / "worker.py"), "--warm", "auto"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, **NO_TORCH})
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = json.loads(proc.stdout.readline())
        second = json.loads(proc.stdout.readline())  # stdin is still open: nothing sent yet
        assert (first["event"], second["event"]) == ("hello", "env")
        doc = {"protocol": 1, "device": "auto", "cases": [_c("a", "pass").to_json()]}
        out, _ = proc.communicate(json.dumps(doc).encode(), timeout=120)
        events = [json.loads(line)["event"] for line in out.decode().splitlines()]
        assert events == ["start", "result", "done"]  # torch is not started a second time
    finally:
        if proc.poll() is None:
            proc.kill()


def test_warm_worker_refuses_a_document_for_another_device() -> None:
    proc = subprocess.run([sys.executable, str(kernels_dir() / "worker.py"), "--warm", "cpu"],
                          input=json.dumps({"protocol": 1, "device": "cuda", "cases": []}).encode(),
                          capture_output=True, timeout=120, env={**os.environ, **NO_TORCH})
    last = json.loads(proc.stdout.decode().splitlines()[-1])
    assert proc.returncode == 2 and last["event"] == "error" and "cpu" in last["detail"]


def test_a_warm_start_gives_the_same_results_as_a_cold_one() -> None:
    cases = [_c("a", "pass"), _c("b", "fail"), _c("c", "segfault"), _c("d", "pass")]
    cold = run_cases(cases, env=NO_TORCH, timeout_s=60)
    with WarmWorker(env=NO_TORCH) as warm:
        hot = run_cases(cases, env=NO_TORCH, timeout_s=60, warm=warm)
        assert warm.worker is None  # taken by the run
    assert [(r.id, r.status) for r in hot.results] == [(r.id, r.status) for r in cold.results]
    assert [r.status for r in hot.results] == ["passed", "failed", "crashed", "passed"]
    assert hot.phases.workers == cold.phases.workers == 2  # a fresh worker after the crash


def test_a_warm_worker_started_another_way_is_stopped_not_used() -> None:
    warm = WarmWorker(env={**NO_TORCH, "EXTRA": "1"})
    w = warm.worker
    assert w is not None
    run = run_cases([_c("a", "pass")], env=NO_TORCH, timeout_s=60, warm=warm)
    assert [r.status for r in run.results] == ["passed"]
    assert w.proc.poll() is not None  # killed, not leaked
    warm.close()


def test_close_stops_an_unused_warm_worker_and_removes_its_files() -> None:
    warm = WarmWorker(env=NO_TORCH)
    w = warm.worker
    assert w is not None
    folder = Path(w.stderr_path).parent
    warm.close()
    warm.close()  # twice is fine
    assert w.proc.poll() is not None
    assert not folder.exists()


def test_check_stops_its_warm_worker_when_the_kernel_stage_does_not_run(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    started = []

    def fake_warm(opts: app.CheckOptions) -> WarmWorker:
        warm = WarmWorker(env=NO_TORCH)
        started.append((warm, warm.worker))
        return warm

    monkeypatch.setattr(app, "_warm_worker", fake_warm)
    snap = {"schema_version": 1, "packages": {"torch": "2.6.0"}, "torch": {"version": "2.6.0", "cuda": None},
            "gpus": [], "env": {}}
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))
    # a snapshot for --env: the kernel stage does not run, and the started worker must go
    app.run_check(app.CheckOptions(env_files=(path,)))
    assert len(started) == 1
    warm, worker = started[0]
    assert warm.worker is None and worker is not None and worker.proc.poll() is not None


@pytest.mark.parametrize("opts", [
    app.CheckOptions(kernels=False),
    app.CheckOptions(env_files=(Path("x.json"),)),
    app.CheckOptions(assume=("torch==2.6.0",)),
    app.CheckOptions(configs=(Path("train.yaml"),)),
])
def test_no_warm_worker_where_kernels_cannot_run_here(opts: app.CheckOptions) -> None:
    assert app._warm_worker(opts) is None


def test_warm_worker_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTN_DOCTOR_WARM_WORKER", "0")
    monkeypatch.setattr(os.path, "exists", lambda p: True)
    assert app._warm_worker(app.CheckOptions()) is None
