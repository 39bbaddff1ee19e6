"""Rule test cases: turn a rule's own test case (rules/*.yaml `tests:`) into Facts and a Workload.

A case is a partial snapshot (packages, env, torch, cuda, cudnn, gpus, imports, python) with
two conveniences: `gpu: "8.0"` for one GPU of that compute capability, and `workload:` with
workload-file keys laid over the default profile. Sections a case leaves out are unknown,
except `packages` and `env`, which are empty (a case lists what matters to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from doctor.model import Facts, Workload
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import Catalogue, Rule
from doctor.snapshot import facts_from_snapshot
from doctor.workload import build, default_workload


def case_snapshot(case: Mapping[str, Any]) -> Dict[str, Any]:
    """A rule test case as a snapshot document (what `--env FILE` reads)."""
    doc: Dict[str, Any] = {k: v for k, v in case.items() if k not in ("name", "gpu", "workload", "offers")}
    doc.setdefault("packages", {})
    doc.setdefault("env", {})
    if "gpu" in case:
        doc["gpus"] = [{"index": 0, "name": f"test GPU sm{case['gpu']}", "compute_capability": case["gpu"]}]
    return doc


def case_inputs(case: Mapping[str, Any]) -> Tuple[Facts, Workload]:
    facts = facts_from_snapshot(case_snapshot(case), source="rule test case")
    workload = build(case.get("workload") or {}, base=default_workload(), source="rule test case")
    return facts, workload


@dataclass(frozen=True)
class CaseOutcome:
    """One rule test case evaluated: what it expected and what the catalogue said."""

    rule: Rule
    kind: str  # fires | passes
    index: int
    got: str  # fired | passed | not_evaluated
    offers: Optional[Tuple[int, ...]] = None  # the fixes the case expects to be offered (its `offers:`)
    offered: Tuple[int, ...] = ()  # the fixes the finding offered

    @property
    def expected(self) -> str:
        return "fired" if self.kind == "fires" else "passed"

    @property
    def ok(self) -> bool:
        if self.got != self.expected:
            return False
        return self.offers is None or tuple(sorted(self.offers)) == self.offered

    def describe(self) -> str:
        where = f"{self.rule.path}:{self.rule.line}: rule {self.rule.id}: {self.kind}[{self.index}]"
        if self.got == self.expected and self.offers is not None:
            return f"{where} expected fixes {list(sorted(self.offers))} offered, got {list(self.offered)}"
        return f"{where} expected {self.expected}, got {self.got}"


def iter_rule_cases(cat: Catalogue, only: Optional[Callable[[Rule], bool]] = None) -> Iterator[Tuple[Rule, str, int, Mapping[str, Any]]]:
    """(rule, fires|passes, index, case) for every rule test case (of the rules `only` keeps)."""
    for rule in cat.rules:
        if only is not None and not only(rule):
            continue
        for kind in ("fires", "passes"):
            for i, case in enumerate(rule.tests[kind]):
                yield rule, kind, i, case


def run_rule_case(cat: Catalogue, rule: Rule, kind: str, index: int, case: Mapping[str, Any]) -> CaseOutcome:
    """Evaluate one rule test case against the whole catalogue (as `check` would)."""
    facts, workload = case_inputs(case)
    diagnosis = diagnose(cat, facts, workload)
    offers = case.get("offers")
    offered: Tuple[int, ...] = ()
    if offers is not None:
        finding = next((f for f in diagnosis.findings if f.rule_id == rule.id), None)
        offered = tuple(f.position for f in finding.fixes) if finding else ()
    return CaseOutcome(rule, kind, index, diagnosis.result(rule.id).status,
                       tuple(offers) if offers is not None else None, offered)


def run_rule_cases(cat: Catalogue, only: Optional[Callable[[Rule], bool]] = None) -> List[CaseOutcome]:
    """Every rule test case evaluated: what `rules lint` reports and tests/rules asserts."""
    return [run_rule_case(cat, *item) for item in iter_rule_cases(cat, only)]
