"""Rank 0's assembly from payloads: rows, findings, the merged comm result, the report."""

from __future__ import annotations

import json
from typing import Any, Dict

from doctor.cluster import assemble
from doctor.cluster.comm import merge
from doctor.errors import ExitCode
from doctor.cluster.report import ClusterReport, CommCheck, CommResult, CpResult
from doctor.model import CaseResult


def snapshot(driver: str = "550.54.15") -> Dict[str, Any]:
    return {"host": "x", "packages": {"torch": "2.5.1"}, "torch": {"version": "2.5.1", "cuda": "12.4"},
            "cuda": {"driver_version": driver}, "cudnn": {"loaded": "9.1.0"}, "env": {}, "gpus": [],
            "unknown": {}}


def comm(rank: int, ok: bool = True) -> CommResult:
    checks = (
        CommCheck("all_reduce", "float32", 1024, ok, 0.0 if ok else 3.0, 1.0 + rank, 2.0, 2.0,
                  detail="" if ok else f"sum over ranks wrong by up to 3 on rank {rank}"),
        CommCheck("all_gather", "float32", 1024, True, 0.0, 1.0, 1.0, 0.5),
    )
    return CommResult("nccl", "cuda", 3, all(c.ok for c in checks), checks)


def payload(rank: int, host: str, **kw: Any) -> Dict[str, Any]:
    kw.setdefault("snapshot", snapshot())
    return json.loads(assemble.payload_doc(rank, rank % 2, host, phase="gather", **kw))


def test_comm_merge_names_the_failing_rank_and_keeps_rank0_timing() -> None:
    merged = merge([(1, comm(1, ok=False)), (0, comm(0)), (2, comm(2))])
    assert merged is not None and merged.ok is False
    ar, ag = merged.checks
    assert ar.failed_ranks == (1,) and ar.ms == 1.0 and ar.max_error == 3.0
    assert "on rank 1" in ar.detail
    assert ag.ok and ag.failed_ranks == ()
    assert merge([]) is None


def test_payload_round_trip_and_rows() -> None:
    kernels = (CaseResult("sdpa.flash/x", "sdpa.flash", "failed", "nan"), CaseResult("sdpa.math/x", "sdpa.math", "passed"))
    p = payload(1, "n1", comm=comm(1), kernels=kernels, errors=["cp: RuntimeError: boom"])
    assert assemble.comm_from(p["comm"]) == comm(1)
    assert assemble.kernels_from(p["kernels"]) == kernels
    table = assemble.rows(4, {1: p}, joined={0: {"host": "n0", "local_rank": 0}, 1: {"host": "n1"}, 2: {"host": "n2", "local_rank": 0}},
                          last_phase={0: "comm", 2: "kernels"}, gathered_from=[0])
    assert [r.status for r in table] == ["lost", "answered", "no_answer", "never_joined"]
    row = table[1]
    assert (row.torch, row.driver, row.cudnn, row.cuda) == ("2.5.1", "550.54.15", "9.1.0", "12.4")
    assert (row.kernels_passed, row.kernels_failed) == (1, 1) and "boom" in row.detail
    assert table[2].detail == "stopped answering while running its kernel cases" and table[2].host == "n2"


def test_findings_cover_every_kind_of_trouble() -> None:
    payloads = {
        0: payload(0, "n0"),
        1: payload(1, "n1", snapshot=snapshot("535.1.1"),
                   kernels=(CaseResult("te.fused/bf16/hd128", "te.fused", "crashed", "illegal memory access"),)),
        2: payload(2, "n2", snapshot=None, probe_error="TimeoutError: child"),
    }
    payloads[0]["kernels"] = [{"id": "te.fused/bf16/hd128", "backend": "te.fused", "status": "passed"}]
    joined = {r: {"host": f"n{r}"} for r in range(4)}
    table = assemble.rows(4, payloads, joined, {3: "cp"})
    kernels = [(r, k) for r in payloads for k in assemble.kernels_from(payloads[r]["kernels"])]
    cp = (CpResult("p2p", True, "bf16", 4, 8192, 16, 128, False, 0.4, 0.2, 0.02, 3.0, "x", "max relative error 0.2 exceeds 0.0156 for bf16"),
          CpResult("all_gather", True, "bf16", 4, 8192, 16, 128, True, 0.004, 0.002, 0.02))
    found = assemble.findings(table, payloads, merge([(0, comm(0)), (1, comm(1, ok=False))]), cp, kernels, {"join": 60})
    ids = [f.rule_id for f in found]
    assert ids.index("CLUSTER-PROBE-FAILED") > ids.index("CLUSTER-RANK-NO-ANSWER")  # errors first
    by = {f.rule_id: f for f in found}
    assert "rank 3 (n3)" in by["CLUSTER-RANK-NO-ANSWER"].message
    assert "in the context-parallel attention check" in by["CLUSTER-RANK-NO-ANSWER"].message
    assert "535.1.1 on rank 1 (n1)" in by["CLUSTER-HETERO-DRIVER"].message
    k = by["CLUSTER-KERNEL-FAILED"]
    assert "crashed on rank 1 (n1); it passed on rank 0 (n0)" in k.message and k.kernels == ("te.fused/bf16/hd128",)
    assert "all_reduce (1024 bytes, float32) failed on rank 1 (n1)" in by["CLUSTER-COMM-FAILED"].message
    assert by["CLUSTER-CP-P2P"].severity == "error" and "CLUSTER-CP-ALL-GATHER" not in by
    assert by["CLUSTER-PROBE-FAILED"].status == "not_evaluated" and "rank 2 (n2)" in by["CLUSTER-PROBE-FAILED"].message


def test_report_exit_codes_and_json() -> None:
    table = assemble.rows(2, {0: payload(0, "a"), 1: payload(1, "b")}, {}, {})
    clean = ClusterReport(rank=0, world_size=2, launcher="torchrun", backend="nccl", complete=True, ranks=table)
    assert clean.exit_code == 0 and clean.answered == (0, 1) and clean.missing == ()
    err = assemble.cp_findings([CpResult("p2p", True, "bf16", 2, 64, 2, 16, False, 1.0, 1.0, 0.02)])
    assert ClusterReport(0, 2, "env", "gloo", True, table, tuple(err)).exit_code == 1
    assert ClusterReport(0, 2, "env", "gloo", False, table).exit_code == ExitCode.INCOMPLETE == 4
    assert ClusterReport(1, 2, "env", "gloo", True).exit_code == 0  # non-reporters hand over and exit 0
    doc = json.loads(json.dumps(ClusterReport(0, 2, "env", "gloo", True, table, tuple(err),
                                              snapshots=((0, snapshot()),)).to_dict()))
    assert doc["exit_code"] == 1 and doc["snapshots"][0]["rank"] == 0 and doc["ranks"][1]["host"] == "b"
