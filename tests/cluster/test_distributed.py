"""Real multi-process runs on CPU with gloo: torchrun and Slurm-style launches, a rank that
differs, a rank that dies, a rank that hangs, a rank that never comes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional

import pytest

pytest.importorskip("torch.distributed")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

pytestmark = pytest.mark.slow

RANK_MAIN = str(Path(__file__).with_name("rank_main.py"))


@pytest.fixture(scope="module", autouse=True)
def _warm_imports() -> None:
    """Compile and page in what every rank imports, once, so that a fresh checkout on a busy
    2-core CI machine does not spend the ranks' time budgets on first imports."""
    subprocess.run([sys.executable, "-c", "import doctor.cluster.run, doctor.probe.collect, doctor.rules.loader as l, torch.distributed; l.load_catalogue()"],
                   check=True, timeout=300)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(extra: Mapping[str, str]) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "SLURM_", "TORCHELASTIC", "ATTN_DOCTOR_TEST"))}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def _torchrun(n: int, out: Path, extra: Mapping[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), RANK_MAIN, str(out)]
    return subprocess.run(cmd, env=_env(extra), capture_output=True, text=True, timeout=timeout)


def _report(out: Path, proc: Optional[subprocess.CompletedProcess] = None) -> dict:
    assert out.exists(), f"rank 0 wrote no report\n{proc.stdout if proc else ''}\n{proc.stderr if proc else ''}"
    return json.loads(out.read_text())


def _finding(report: dict, rule_id: str) -> dict:
    hits = [f for f in report["findings"] if f["rule_id"] == rule_id]
    assert hits, f"{rule_id} not in {[f['rule_id'] for f in report['findings']]}"
    return hits[0]


def test_torchrun_three_ranks_heterogeneous_node(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = _torchrun(
        3,
        out,
        {
            "ATTN_DOCTOR_TEST_DRIVER": "550.54.15",
            "ATTN_DOCTOR_TEST_TIMEOUTS": "60,60,60",  # this test is about heterogeneity, not timing
            "ATTN_DOCTOR_TEST_ENV_2": "NVTE_FLASH_ATTN=0;NCCL_ALGO=Ring;"
            "ATTN_DOCTOR_TEST_DRIVER=535.104.05;ATTN_DOCTOR_TEST_KERNEL_FAIL=1",
        },
    )
    report = _report(out, proc)
    assert proc.returncode != 0  # rank 0 exits 1: error findings
    assert report["exit_code"] == 1 and report["complete"]
    assert report["launcher"] == "torchrun" and report["backend"] == "gloo"
    assert report["answered"] == [0, 1, 2]

    driver = _finding(report, "CLUSTER-HETERO-DRIVER")
    assert driver["severity"] == "error"
    assert "550.54.15 on ranks 0-1" in driver["message"] and "535.104.05 on rank 2" in driver["message"]
    nvte = _finding(report, "CLUSTER-HETERO-ENV-NVTE")
    assert nvte["severity"] == "warning" and "'0' on rank 2" in nvte["message"]
    assert "unset NVTE_FLASH_ATTN on rank 2" in nvte["fixes"][0]["description"]
    assert "rank 2" in _finding(report, "CLUSTER-HETERO-ENV-NCCL")["message"]
    kernel = _finding(report, "CLUSTER-KERNEL-FAILED")
    assert "failed on rank 2" in kernel["message"] and "passed on ranks 0-1" in kernel["message"]
    assert [r["kernels_failed"] for r in report["ranks"]] == [0, 0, 1]

    comm = report["comm"]
    assert comm["ok"] is True and [c["op"] for c in comm["checks"]] == ["all_reduce", "all_gather"]
    assert all(c["max_error"] == 0.0 and c["busbw_gbps"] > 0 for c in comm["checks"])
    cp = {c["scheme"]: c for c in report["cp"]}
    assert set(cp) == {"all_gather", "p2p"}
    for c in cp.values():
        assert c["ok"] is True and c["world_size"] == 3 and c["max_rel_error"] < c["tolerance"]
    assert len(report["snapshots"]) == 3


def test_torchrun_rank_that_exits_is_named(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    start = time.monotonic()
    proc = _torchrun(2, out, {"ATTN_DOCTOR_TEST_MODE_1": "exit", "ATTN_DOCTOR_TEST_TIMEOUTS": "200,200,200"})
    took = time.monotonic() - start
    report = _report(out, proc)
    assert proc.returncode != 0
    # torchrun's SIGTERM cut rank 0's 200 s wait short (the bound is the wait, not machine speed)
    assert took < 150
    assert report["exit_code"] == 4 and not report["complete"]
    row = report["ranks"][1]
    assert row["status"] == "no_answer" and row["last_phase"] == "probe"
    assert any("SIGTERM" in n for n in report["notes"])
    assert "rank 1" in _finding(report, "CLUSTER-RANK-NO-ANSWER")["message"]


def _slurm_job(n: int, extra_per_rank: Mapping[int, Mapping[str, str]], common: Mapping[str, str]) -> List[subprocess.Popen]:
    port = _free_port()
    job_id = str(port - 15000 + 10000 * 7) if 15000 <= port < 25000 else None
    procs = []
    for r in range(n):
        env = {"SLURM_PROCID": str(r), "SLURM_NTASKS": str(n), "SLURM_LOCALID": str(r),
               "SLURM_JOB_NODELIST": "localhost", "SLURM_STEP_ID": "0", **common, **extra_per_rank.get(r, {})}
        if job_id:
            env["SLURM_JOB_ID"] = job_id
        else:  # the free port is outside the job-id range: pin it
            env.update(SLURM_JOB_ID="1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, RANK_MAIN, common["OUT"]], env=_env(env),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


def test_slurm_ranks_that_hang_and_die_do_not_hold_up_the_job(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    start = time.monotonic()
    procs = _slurm_job(
        4,
        {2: {"ATTN_DOCTOR_TEST_MODE_2": "hang"}, 3: {"ATTN_DOCTOR_TEST_MODE_3": "exit"}},
        {"OUT": str(out), "ATTN_DOCTOR_TEST_TIMEOUTS": "60,12,20"},
    )
    try:
        rc0 = procs[0].wait(timeout=240)
        rank0_s = time.monotonic() - start
        rc1 = procs[1].wait(timeout=120)
        rc2 = procs[2].wait(timeout=120)  # the hung rank gives up once rank 0 reported without it
        rc3 = procs[3].wait(timeout=120)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    report = _report(out)
    assert (rc0, rc1, rc2, rc3) == (4, 0, 4, 3)
    # bounded by the timeouts (60 s join, 12 s probe, 20 s per collective), although rank 2 would
    # hang forever: the bound is their sum, not a guess at machine speed
    assert rank0_s < 60 + 2 * 12 + 4 * 20
    assert report["launcher"] == "slurm"
    assert report["answered"] == [0, 1] and report["missing"] == [2, 3]
    assert [r["status"] for r in report["ranks"]] == ["answered", "answered", "no_answer", "no_answer"]
    assert [r["last_phase"] for r in report["ranks"][2:]] == ["probe", "probe"]
    silent = _finding(report, "CLUSTER-RANK-NO-ANSWER")
    assert silent["severity"] == "error" and "ranks 2-3" in silent["message"]
    assert report["comm"]["ok"] is None and "not here" in report["comm"]["detail"]
    assert report["cp"] == []
    assert any("phase 'comm'" in n for n in report["notes"])


def test_rank_that_never_joins(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    env = _env({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(_free_port()), "ATTN_DOCTOR_TEST_TIMEOUTS": "2,5,5"})
    start = time.monotonic()
    proc = subprocess.run([sys.executable, RANK_MAIN, str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - start < 2 + 2 * 5 + 4 * 5 + 60  # the timeouts' sum (+ torch import); the peer never comes
    report = _report(out, proc)
    assert proc.returncode == 4
    assert [r["status"] for r in report["ranks"]] == ["answered", "never_joined"]
    assert "rank 1" in _finding(report, "CLUSTER-RANK-NEVER-JOINED")["message"]


def test_cli_check_distributed_prints_one_report(tmp_path: Path) -> None:
    """The user's command: `torchrun -m doctor check --distributed`; rank 0 alone prints JSON."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), "-m", "doctor", "check", "--distributed", "--no-kernels", "--static",
           "--timeout", "60", "--format", "json"]
    proc = subprocess.run(cmd, env=_env({"NO_COLOR": "1"}), capture_output=True, text=True, timeout=240, cwd=str(tmp_path))
    doc = json.loads(proc.stdout)  # exactly one JSON document: the other rank printed nothing
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert doc["schema_version"] == 1 and doc["summary"]["rules"] > 100
    cluster = doc["cluster"]
    assert cluster["complete"] and cluster["world_size"] == 2 and len(cluster["ranks"]) == 2
    assert cluster["comm"]["ok"] is True
    assert {c["scheme"] for c in cluster["cp"]} == {"all_gather", "p2p"} and all(c["ok"] for c in cluster["cp"])
