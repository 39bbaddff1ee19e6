"""Turn a rule's own test case (rules/*.yaml `tests:`) into Facts and a Workload.

A case is a partial snapshot (packages, env, torch, cuda, cudnn, gpus, imports, python) with
two conveniences: `gpu: "8.0"` for one GPU of that compute capability, and `workload:` with
workload-file keys laid over the default profile. Sections a case leaves out are unknown,
except `packages` and `env`, which are empty (a case lists what matters to it).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple

from doctor.model import Facts, Workload, facts_from_snapshot
from doctor.workload import build, default_workload


def case_snapshot(case: Mapping[str, Any]) -> Dict[str, Any]:
    """A rule test case as a snapshot document (what `--env FILE` reads)."""
    doc: Dict[str, Any] = {k: v for k, v in case.items() if k not in ("name", "gpu", "workload")}
    doc.setdefault("packages", {})
    doc.setdefault("env", {})
    if "gpu" in case:
        doc["gpus"] = [{"index": 0, "name": f"test GPU sm{case['gpu']}", "compute_capability": case["gpu"]}]
    return doc


def case_inputs(case: Mapping[str, Any]) -> Tuple[Facts, Workload]:
    facts = facts_from_snapshot(case_snapshot(case), source="rule test case")
    workload = build(case.get("workload") or {}, base=default_workload(), source="rule test case")
    return facts, workload
