"""`check --distributed`: every rank runs; rank 0 prints the job's one report.

Rank 0's report is the usual check of rank 0's environment and workload, plus the cluster's
findings (facts that differ between ranks, ranks that did not answer, per-rank kernel
failures, the communication smoke test, the context-parallel attention check) and a per-rank
table. Other ranks print nothing and exit 0 once their results are handed over; a rank stuck in
a collective is ended with os._exit so the job never hangs.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from doctor.commands.common import emit
from doctor.errors import ExitCode
from doctor.model import Report

if TYPE_CHECKING:
    from doctor.cluster.report import ClusterReport
    from doctor.report.render import Style


def run_cluster_check(
    *,
    workload_file: Optional[Path],
    model: Optional[Path],
    flags: Mapping[str, Any],
    format: str,
    style: "Style",
    kernels: bool,
    timeout_s: float = 300.0,
) -> int:
    from doctor import app as core
    from doctor.cluster.run import ClusterOptions, run_distributed
    from doctor.snapshot import facts_from_snapshot
    from doctor.rules.loader import load_catalogue
    from doctor.workload import resolve_workload

    workload = resolve_workload(workload_file, model, flags)
    catalogue = load_catalogue()
    given = workload if workload.shape_given else None
    from doctor.cluster.gather import Timeouts

    options = ClusterOptions(kernels=kernels, workload=given, timeouts=Timeouts.uniform(timeout_s))
    cluster = run_distributed(options)
    if not cluster.is_reporter:
        return _finish(cluster, cluster.exit_code)

    snaps = dict(cluster.snapshots)
    doc = snaps.get(0) or next(iter(snaps.values()), {"schema_version": 1})
    facts = facts_from_snapshot(doc, source=f"rank 0 of {cluster.world_size} ({cluster.launcher}, {cluster.backend})")
    report = core.check(core.Inputs(facts=facts, workload=workload, catalogue=catalogue), kernels_skipped=None if kernels else "--no-kernels")
    if cluster.kernel_run is not None:  # rank 0's own run, linked exactly as single-node check does
        from doctor.verify.link import link_kernels

        report = link_kernels(report, catalogue, cluster.kernel_run)
    report = replace(
        report,
        findings=tuple(cluster.findings) + report.findings,
        rule_results=report.rule_results + tuple((f.rule_id, "fired") for f in cluster.findings),
    )
    emit(_render(report, cluster, format, style))
    code = int(ExitCode.FINDINGS if core.fail_count(report, style.fail_on, style.strict) else ExitCode.OK)
    if not cluster.complete:
        code = int(ExitCode.INCOMPLETE)
    return _finish(cluster, code)


def _render(report: Report, cluster: "ClusterReport", format: str, style: "Style") -> str:
    """check's own rendering, with the per-rank table, comm and CP results added."""
    from doctor.cluster.text import summary
    from doctor.report.render import render

    if format == "json":
        from doctor.report.check_json import report_dict
        from doctor.report.json_report import dumps

        return dumps({**report_dict(report), "cluster": cluster.to_dict()})
    body = render("check", format, report, style)
    table = "\n".join(summary(cluster))
    if format == "markdown":
        return body + "\n```\n" + table + "\n```\n"
    if format == "junit":
        return body
    return table + "\n\n" + body


def _finish(cluster: Any, code: int) -> int:
    if cluster.hard_exit:  # a thread is still blocked inside a collective
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
