"""`fix --format json`: the plan as data (schema_version 1, docs/fix.md).

The first keys are the contract: schema_version, pins, env, config, unresolved, steps. The rest
say why: what was cleared, the flash-attn wheel, conflicts pip will report, alternatives.
"""

from __future__ import annotations

import json
from typing import Any, Dict

from doctor.fix.plan import FixPlan

SCHEMA_VERSION = 1


def plan_document(plan: FixPlan) -> Dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "pins": [str(p) for p in plan.pins],
        "env": dict(plan.env),
        "config": list(plan.config),
        "unresolved": list(plan.unresolved),
        "steps": [
            {"kind": s.kind, "text": s.text, "command": s.command or None, "rule_ids": list(s.rule_ids)} for s in plan.steps
        ],
        "verified": plan.verified,
        "cleared": list(plan.cleared),
        "not_evaluated": list(plan.not_evaluated),
        "new_findings": list(plan.new_findings),
        "findings": [{"rule_id": f.rule_id, "severity": f.severity, "title": f.title} for f in plan.targets],
        "changes": [
            {
                "rule_id": c.rule_id or None,
                "description": c.description,
                "pins": [str(p) for p in c.pins],
                "env": dict(c.env),
                "config": list(c.config),
                "workload": dict(c.workload),
                "cost": c.cost,
                "origin": c.origin,
            }
            for c in plan.changes
        ],
        "workload_changes": dict(plan.workload_changes),
        "wheels": [
            {
                "package": "flash-attn",
                "version": w.version,
                "available": w.available,
                "filename": w.filename,
                "url": w.url,
                "command": w.pip_command,
                "notes": list(w.notes),
            }
            for w in plan.wheels
        ],
        "conflicts": list(plan.conflicts),
        "torch_reason": plan.torch_reason,
        "alternatives": [
            {
                "rule_ids": list(a.rule_ids),
                "description": a.description,
                "pins": [str(p) for p in a.pins],
                "env": dict(a.env),
                "config": list(a.config),
                "cost": a.cost,
                "why": a.why or None,
            }
            for a in plan.alternatives
        ],
        "notes": list(plan.notes),
        "catalogue": {"retrieved": plan.catalogue_date or None},
    }


def render_fix_json(plan: FixPlan) -> str:
    return json.dumps(plan_document(plan), indent=2, ensure_ascii=False)
