"""Rank 0's pure half: per-rank payloads in, the ClusterReport's rows and findings out.

A payload is the JSON document one rank sends to rank 0 (`payload_doc`): its snapshot, kernel
results, its view of the comm test, rank 0's CP results, and the errors it hit. Nothing here
touches torch or the network, so every finding can be tested from hand-written payloads.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar

from doctor.cluster import comm as comm_mod
from doctor.cluster import hetero
from doctor.cluster.report import (
    ANSWERED,
    LOST,
    NEVER_JOINED,
    NO_ANSWER,
    CommCheck,
    CommResult,
    CpResult,
    RankRow,
)
from doctor.model import CaseResult, Finding, Severity, Fix

AREA = "cluster"
SRC_TORCHRUN = "https://docs.pytorch.org/docs/stable/elastic/run.html"
SRC_NCCL_TESTS = "https://github.com/NVIDIA/nccl-tests"
SRC_NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
SRC_TE_CP = "https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/examples/attention/attention.html"

PHASE_WORDS = {
    "joined": "after joining, before the process group was up",
    "ready": "after the process group came up, before probing",
    "probe": "while probing its environment",
    "probed": "after probing",
    "comm": "in the communication smoke test",
    "cp": "in the context-parallel attention check",
    "kernels": "while running its kernel cases",
    "gather": "while sending its results",
}
KERNEL_FAILED = ("failed", "crashed", "timeout")

T = TypeVar("T")


# --------------------------------------------------------------------------- payloads


def payload_doc(
    rank: int,
    local_rank: int,
    host: str,
    device: str = "",
    device_name: Optional[str] = None,
    snapshot: Optional[Mapping[str, Any]] = None,
    probe_error: Optional[str] = None,
    kernels: Sequence[CaseResult] = (),
    kernels_skipped: Optional[str] = None,
    comm: Optional[CommResult] = None,
    cp: Sequence[CpResult] = (),
    errors: Sequence[str] = (),
    phase: str = "",
) -> str:
    """One rank's results as the JSON text it sends to rank 0."""
    return json.dumps(
        {
            "rank": rank,
            "local_rank": local_rank,
            "host": host,
            "device": device,
            "device_name": device_name,
            "snapshot": snapshot,
            "probe_error": probe_error,
            "kernels": [asdict(k) for k in kernels],
            "kernels_skipped": kernels_skipped,
            "comm": asdict(comm) if comm is not None else None,
            "cp": [asdict(c) for c in cp],
            "errors": list(errors),
            "phase": phase,
        },
        default=str,
    )


def _build(cls: Type[T], data: Mapping[str, Any]) -> T:
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


def comm_from(doc: Optional[Mapping[str, Any]]) -> Optional[CommResult]:
    if not doc:
        return None
    checks = tuple(
        _build(CommCheck, {**c, "failed_ranks": tuple(c.get("failed_ranks") or ())}) for c in doc.get("checks") or ()
    )
    return _build(CommResult, {**doc, "checks": checks})


def cp_from(docs: Sequence[Mapping[str, Any]]) -> Tuple[CpResult, ...]:
    return tuple(_build(CpResult, d) for d in docs)


def kernels_from(docs: Sequence[Mapping[str, Any]]) -> Tuple[CaseResult, ...]:
    return tuple(_build(CaseResult, d) for d in docs)


# --------------------------------------------------------------------------- rows


def _gpu_of(payload: Mapping[str, Any]) -> Optional[str]:
    if payload.get("device_name"):
        return str(payload["device_name"])
    gpus = (payload.get("snapshot") or {}).get("gpus")
    if isinstance(gpus, list) and gpus:
        g = gpus[0]
        return f"{g.get('name')} (sm{str(g.get('compute_capability', '?')).replace('.', '')})"
    return None


def _pkg(snapshot: Mapping[str, Any], *names: str) -> Optional[str]:
    packages = snapshot.get("packages")
    if not isinstance(packages, Mapping):
        return None
    for n in names:
        if n in packages:
            return str(packages[n])
    return None


def row_from_payload(payload: Mapping[str, Any]) -> RankRow:
    snap = payload.get("snapshot") or {}
    kernels = kernels_from(payload.get("kernels") or ())
    torch_info = snap.get("torch") or {}
    cudnn = snap.get("cudnn") or {}
    return RankRow(
        rank=int(payload["rank"]),
        host=payload.get("host"),
        local_rank=payload.get("local_rank"),
        status=ANSWERED,
        last_phase=payload.get("phase") or None,
        gpu=_gpu_of(payload),
        driver=(snap.get("cuda") or {}).get("driver_version"),
        torch=torch_info.get("version") or _pkg(snap, "torch"),
        cuda=torch_info.get("cuda"),
        cudnn=cudnn.get("loaded") or torch_info.get("cudnn_version") or cudnn.get("version"),
        flash_attn=_pkg(snap, "flash-attn", "flash-attn-3"),
        transformer_engine=_pkg(snap, "transformer-engine", "transformer-engine-torch"),
        kernels_passed=sum(1 for k in kernels if k.status == "passed"),
        kernels_failed=sum(1 for k in kernels if k.status in KERNEL_FAILED),
        kernels_skipped=payload.get("kernels_skipped"),
        probe_error=payload.get("probe_error"),
        detail="; ".join(payload.get("errors") or ()),
    )


def rows(
    world_size: int,
    payloads: Mapping[int, Mapping[str, Any]],
    joined: Mapping[int, Mapping[str, Any]],
    last_phase: Mapping[int, Optional[str]],
    gathered_from: Sequence[int] = (),
) -> Tuple[RankRow, ...]:
    """A row for every rank: answered ones from their payload, the others from the store."""
    out: List[RankRow] = []
    for r in range(world_size):
        if r in payloads:
            out.append(row_from_payload(payloads[r]))
            continue
        info = joined.get(r) or {}
        if not info:
            status, detail = NEVER_JOINED, "never reached rank 0's store"
        elif r in gathered_from:
            status, detail = LOST, "reached the gather but its result did not arrive"
        else:
            phase = last_phase.get(r)
            status = NO_ANSWER
            detail = f"stopped answering {PHASE_WORDS.get(phase or '', 'at phase ' + str(phase))}"
        out.append(
            RankRow(
                rank=r,
                host=info.get("host"),
                local_rank=info.get("local_rank"),
                status=status,
                last_phase=last_phase.get(r),
                detail=detail,
            )
        )
    return tuple(out)


# --------------------------------------------------------------------------- findings


def _who(ranks: Sequence[RankRow]) -> str:
    return hetero.ranks_text([str(r.rank) for r in ranks], [r.host or "" for r in ranks])


def missing_findings(table: Sequence[RankRow], waited: Mapping[str, float]) -> List[Finding]:
    out: List[Finding] = []
    never = [r for r in table if r.status == NEVER_JOINED]
    if never:
        out.append(
            Finding(
                rule_id="CLUSTER-RANK-NEVER-JOINED",
                severity=Severity.ERROR,
                title=f"{len(never)} rank(s) never joined the job",
                message=f"{_who(never)} never reached rank 0 within {waited.get('join', 0):g} s: the "
                "process did not start, crashed at import, or cannot reach MASTER_ADDR:MASTER_PORT "
                "(firewall, wrong interface, wrong first host). Training on this allocation would "
                "hang at init_process_group.",
                status="fired",
                fixes=(
                    Fix(
                        description="check the launcher's log for these ranks; from their nodes test "
                        "`nc -z $MASTER_ADDR $MASTER_PORT`; exclude the nodes that fail",
                        cost="fewer nodes until they are fixed",
                    ),
                ),
                sources=(SRC_TORCHRUN,),
                area=AREA,
                evidence=tuple(f"rank {r.rank}: {r.detail}" for r in never),
            )
        )
    silent = [r for r in table if r.status in (NO_ANSWER, LOST)]
    if silent:
        lines = tuple(f"rank {r.rank} ({r.host or '?'}): {r.detail}" for r in silent)
        out.append(
            Finding(
                rule_id="CLUSTER-RANK-NO-ANSWER",
                severity=Severity.ERROR,
                title=f"{len(silent)} rank(s) hung or died during the check",
                message=f"{_who(silent)} joined and then stopped answering: "
                + "; ".join(lines)
                + ". A rank that hangs here hangs (or dies) in training too; the other ranks "
                "were not held up beyond the timeout.",
                status="fired",
                fixes=(
                    Fix(
                        description="look at these ranks' stderr and `dmesg` on their nodes (Xid "
                        "errors, OOM kills); rerun with NCCL_DEBUG=INFO; drain the node if it repeats",
                        cost="node maintenance",
                    ),
                ),
                sources=(SRC_TORCHRUN,),
                area=AREA,
                evidence=lines,
            )
        )
    return out


def probe_findings(table: Sequence[RankRow]) -> List[Finding]:
    failed = [r for r in table if r.probe_error]
    if not failed:
        return []
    lines = tuple(f"rank {r.rank} ({r.host or '?'}): {r.probe_error}" for r in failed)
    return [
        Finding(
            rule_id="CLUSTER-PROBE-FAILED",
            severity=Severity.WARNING,
            title="The environment could not be probed on some ranks",
            message="No snapshot from " + _who(failed) + ", so their facts were not compared: "
            + "; ".join(lines) + ".",
            status="not_evaluated",
            sources=(SRC_TORCHRUN,),
            area=AREA,
            evidence=lines,
            missing=("snapshot",),
        )
    ]


def error_findings(table: Sequence[RankRow]) -> List[Finding]:
    broken = [r for r in table if r.detail and r.status == ANSWERED]
    if not broken:
        return []
    lines = tuple(f"rank {r.rank} ({r.host or '?'}): {r.detail}" for r in broken)
    return [
        Finding(
            rule_id="CLUSTER-RANK-ERROR",
            severity=Severity.ERROR,
            title="A check raised an error on some ranks",
            message="; ".join(lines) + ".",
            status="fired",
            sources=(SRC_TORCHRUN,),
            area=AREA,
            evidence=lines,
        )
    ]


def kernel_findings(kernels: Sequence[Tuple[int, CaseResult]], table: Sequence[RankRow]) -> List[Finding]:
    hosts = {r.rank: r.host or "?" for r in table}
    by_case: Dict[str, List[Tuple[int, CaseResult]]] = {}
    ran_on: Dict[str, List[int]] = {}
    for rank, case in kernels:
        ran_on.setdefault(case.id, []).append(rank)
        if case.status in KERNEL_FAILED:
            by_case.setdefault(case.id, []).append((rank, case))
    out: List[Finding] = []
    for case_id, fails in sorted(by_case.items()):
        bad = sorted({r for r, _ in fails})
        good = sorted(set(ran_on[case_id]) - set(bad))
        lines = tuple(
            f"rank {r} ({hosts.get(r, '?')}): {c.status}" + (f": {c.detail}" if c.detail else "")
            for r, c in fails
        )
        side = f"; it passed on {hetero.ranks_text([str(r) for r in good], [hosts.get(r, '') for r in good])}" if good else ""
        out.append(
            Finding(
                rule_id="CLUSTER-KERNEL-FAILED",
                severity=Severity.ERROR,
                title=f"Kernel case {case_id} fails on {len(bad)} rank(s)",
                message=f"Kernel case {case_id} {fails[0][1].status} on "
                f"{hetero.ranks_text([str(r) for r in bad], [hosts.get(r, '') for r in bad])}{side}: "
                + "; ".join(lines) + ".",
                status="confirmed",
                sources=(SRC_TE_CP,),
                area=AREA,
                kernels=(case_id,),
                evidence=lines,
            )
        )
    return out


def comm_findings(comm: Optional[CommResult], table: Sequence[RankRow]) -> List[Finding]:
    if comm is None or comm.ok is not False:
        return []
    hosts = {r.rank: r.host or "" for r in table}
    lines = tuple(
        f"{c.op} ({c.bytes} bytes, {c.dtype}) failed on "
        f"{hetero.ranks_text([str(r) for r in c.failed_ranks], [hosts.get(r, '') for r in c.failed_ranks])}"
        + (f": {c.detail}" if c.detail else "")
        for c in comm.checks
        if not c.ok
    )
    return [
        Finding(
            rule_id="CLUSTER-COMM-FAILED",
            severity=Severity.ERROR,
            title=f"{comm.backend} collectives give wrong results or fail",
            message="The communication smoke test failed: " + "; ".join(lines) + ". Gradients and "
            "context-parallel K/V exchanges would be wrong or hang the same way.",
            status="fired",
            fixes=(
                Fix(
                    description="rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET; run nccl-tests "
                    "(all_reduce_perf) on the nodes involved; check NCCL_* settings and the fabric",
                    cost="investigation time",
                ),
            ),
            sources=(SRC_NCCL_TESTS, SRC_NCCL_ENV),
            area=AREA,
            evidence=lines,
        )
    ]


def cp_findings(cp: Sequence[CpResult]) -> List[Finding]:
    out: List[Finding] = []
    for res in cp:
        if res.ok is not False:
            continue
        shape = f"{res.world_size} ranks, seq {res.seq_len}, {res.heads} heads x {res.head_dim}, {res.dtype}"
        out.append(
            Finding(
                rule_id=f"CLUSTER-CP-{res.scheme.upper().replace('_', '-')}",
                severity=Severity.ERROR,
                title=f"Context-parallel attention ({res.scheme}) disagrees with the reference",
                message=f"Context-parallel {res.scheme} attention ({'causal' if res.causal else 'full'}; "
                f"{shape}) {res.detail or 'failed'}"
                + (
                    f" (max |error| {res.max_abs_error:.3g}, relative {res.max_rel_error:.3g}, tolerance {res.tolerance:.3g})"
                    if res.max_abs_error is not None and res.max_rel_error is not None and res.tolerance is not None
                    else ""
                )
                + ". Training with this CP scheme on these ranks computes wrong attention.",
                status="fired",
                fixes=(
                    Fix(
                        description="use the other CP communication scheme for now "
                        f"(cp_comm_type != '{res.scheme}') and report it with this output",
                        config=(f"cp_comm_type != '{res.scheme}'",),
                        cost="different communication pattern: may be slower",
                    ),
                ),
                sources=(SRC_TE_CP,),
                area=AREA,
                evidence=(f"{res.scheme}: max_rel_error={res.max_rel_error} tolerance={res.tolerance}",),
            )
        )
    return out


def findings(
    table: Sequence[RankRow],
    payloads: Mapping[int, Mapping[str, Any]],
    comm: Optional[CommResult],
    cp: Sequence[CpResult],
    kernels: Sequence[Tuple[int, CaseResult]],
    waited: Mapping[str, float],
) -> Tuple[Finding, ...]:
    """Every cluster finding, errors first."""
    snaps = [
        (str(r), payloads[r].get("host"), payloads[r]["snapshot"])
        for r in sorted(payloads)
        if isinstance(payloads[r].get("snapshot"), Mapping)
    ]
    out: List[Finding] = []
    out += missing_findings(table, waited)
    out += list(hetero.analyze(snaps))
    out += kernel_findings(kernels, table)
    out += comm_findings(comm, table)
    out += cp_findings(cp)
    out += error_findings(table)
    out += probe_findings(table)
    out.sort(key=lambda f: f.severity.rank)
    return tuple(out)


def merge_comm(payloads: Mapping[int, Mapping[str, Any]]) -> Optional[CommResult]:
    return comm_mod.merge([(r, comm_from(p.get("comm"))) for r, p in payloads.items()])
