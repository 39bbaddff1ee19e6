"""`check --format json`: the contract documented in docs/report-json.md (schema_version 1)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Dict

from doctor import __version__
from doctor.model import SCHEMA_VERSION, Report
from doctor.report.summary import area_lines, counts, describe_workload


def report_dict(report: Report) -> Dict[str, Any]:
    w = report.workload
    workload = asdict(w)
    workload["window_size"] = list(w.window_size) if w.window_size else None
    return {
        "schema_version": SCHEMA_VERSION,
        "doctor_version": __version__,
        "facts_source": report.facts.source,
        "assumed": list(report.assumed),
        "notes": list(report.notes),
        "workload": {**workload, "defaulted": list(w.defaulted), "description": describe_workload(w)},
        "call_path": (
            {**asdict(report.call_path), "inferred": list(report.call_path.inferred), "unknown": dict(report.call_path.unknown), "description": report.call_path.describe(report.facts.packages)}
            if report.call_path
            else None
        ),
        "summary": {
            **counts(report),
            "areas": [asdict(a) for a in area_lines(report)],
            "kernels_skipped": report.kernels_skipped,
        },
        "findings": [
            {
                "rule_id": f.rule_id,
                "severity": f.severity,
                "title": f.title,
                "message": f.message,
                "status": f.status,
                "area": f.area,
                "stage": f.stage,
                "behind": list(f.behind),
                "fixes": [
                    {
                        "pins": [str(p) for p in x.pins],
                        "env": dict(x.env),
                        "workload": dict(x.workload),
                        "config": list(x.config),
                        "description": x.description,
                        "cost": x.cost,
                        "verified": x.verified,
                        "brings_up": list(x.brings_up),
                        "moves": list(x.moves),
                        "planned": x.planned,
                        "unsure": list(x.unsure),
                    }
                    for x in f.fixes
                ],
                "sources": list(f.sources),
                "missing_facts": list(f.missing),
                "evidence": list(f.evidence),
            }
            for f in report.findings
        ],
        "backends": [
            {
                "id": b.id,
                "framework": b.framework,
                "name": b.name,
                "available": b.available,
                "selected": b.selected,
                "reasons": list(b.reasons),
                "rule_ids": list(b.rule_ids),
                "evidence": list(b.evidence),
                "members": [
                    {"id": m.id, "name": m.name, "available": m.available, "reasons": list(m.reasons), "rule_ids": list(m.rule_ids)}
                    for m in b.members
                ],
            }
            for b in report.backends
        ],
        "kernels": [asdict(c) for c in report.kernels],
        "kernel_summary": [list(x) for x in report.kernel_summary],
        "rules": [{"rule_id": rid, "status": st} for rid, st in report.rule_results],
        "hosts": [
            {
                "host": h.label,
                "source": h.source,
                "findings": [{"rule_id": r, "severity": sev, "status": st} for r, sev, st in h.findings],
                "backends_undecided": list(h.undecided),
            }
            for h in report.hosts
        ],
    }


def render_check_json(report: Report) -> str:
    from doctor.report.json_report import dumps

    return dumps(report_dict(report))
