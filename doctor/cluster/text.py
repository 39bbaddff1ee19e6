"""Per-rank table, comm smoke test and context-parallel results of a cluster check, as text."""

from __future__ import annotations

from typing import List

from doctor.cluster.report import ClusterReport


def summary(report: ClusterReport) -> List[str]:
    """A few lines for the terminal; the JSON file has everything."""
    lines = [
        f"attn-doctor cluster check: {report.world_size} ranks via {report.launcher}, backend "
        f"{report.backend}, {len(report.answered)} answered, {report.elapsed_s:.1f} s",
    ]
    for r in report.ranks:
        lines.append(
            f"  rank {r.rank:>3} {r.host or '?':<16} {r.status:<12} {r.gpu or '-'} | torch {r.torch or '?'}"
            f" | driver {r.driver or '?'} | cuDNN {r.cudnn or '?'}" + (f" | {r.detail}" if r.detail else "")
        )
    if report.comm is not None:
        for c in report.comm.checks:
            bw = f"busbw {c.busbw_gbps:.1f} GB/s" if c.busbw_gbps is not None else ""
            lines.append(f"  comm {c.op:<10} {c.bytes / 2**20:.0f} MiB {'ok' if c.ok else 'FAILED'} {bw} {c.detail}")
        if report.comm.ok is None:
            lines.append(f"  comm not run: {report.comm.detail}")
    for cp in report.cp:
        err = (
            f"max |err| {cp.max_abs_error:.2e}, rel {cp.max_rel_error:.2e} (tol {cp.tolerance:.2e}), {cp.ms:.1f} ms"
            if cp.max_abs_error is not None and cp.max_rel_error is not None and cp.tolerance and cp.ms is not None
            else ""
        )
        verdict = {True: "pass", False: "FAIL", None: "not run"}[cp.ok]
        lines.append(f"  cp {cp.scheme:<10} {verdict:<7} {err} {cp.detail}".rstrip())
    for f in report.findings:
        lines.append(f"  [{f.severity}] {f.rule_id}: {f.message}")
    for n in report.notes:
        lines.append(f"  note: {n}")
    return lines
