"""Read each finding on the neighbours of its own firing cases: the same inputs on another GPU
generation, another host platform, or without the accelerator facts a case gave.

A rule's `fires:` cases are the inputs its author thought of. The sample audits keep finding the
rest: a fix that helps on Ampere but is offered on a T4 where flash-attn refuses the GPU first; a
message that is true on Linux and offered on Windows. This tool does for the neighbours what
tests/rules/test_fails_first.py and the fix re-check do for the cases themselves:

- where the rule still fires on a neighbour, any other error that fires there too (and not on the
  case itself) and that the rule neither reads (`{finding: ID, fired: false}`) nor lists
  `alongside:` is reported: the neighbour may fail somewhere else first;
- every checkable fix the finding offers on the neighbour is applied alone and the catalogue run
  again (doctor.fix.recheck): a fix after which the rule still fires, or a new error fires, is
  reported.

It is a developer tool, not a test: a report is a lead for a reader with the sources at hand
(the earlier error may be right to list alongside; the neighbour may not exist in the field).

    PYTHONPATH=. python tools/neighbours.py                     # every finding
    PYTHONPATH=. python tools/neighbours.py RULE-ID ... --json out.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _artifacts  # noqa: E402

from doctor.fix.recheck import recheck  # noqa: E402
from doctor.model import stage_ordered  # noqa: E402
from doctor.rules.cases import case_inputs, iter_rule_cases  # noqa: E402
from doctor.rules.evaluate import diagnose  # noqa: E402
from doctor.rules.loader import Catalogue, finding_refs, load_catalogue  # noqa: E402

# one GPU of each generation the catalogue reasons about: Volta, Turing, Ampere (A100, consumer),
# Ada, Hopper, Blackwell (datacenter, consumer)
GPUS = ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")
PLATFORMS = (
    {"os": "linux", "arch": "x86_64", "libc": "2.35"},
    {"os": "linux", "arch": "aarch64", "libc": "2.35"},
    {"os": "windows", "arch": "x86_64"},
)


def neighbours(case: Mapping[str, Any]) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """(what changed, the neighbouring case). Only sections the case already states are varied:
    a case without a GPU stays without one (its author left the GPU unknown on purpose), and a
    ROCm case keeps its AMD GPU."""
    base = {k: v for k, v in case.items() if k != "offers"}
    torch = case.get("torch")
    rocm = isinstance(torch, Mapping) and bool(torch.get("hip"))  # an AMD GPU: NVIDIA SMs are no neighbours
    if "gpu" in case and not rocm:
        for sm in GPUS:
            if sm != case["gpu"]:
                yield f"gpu {sm}", {**base, "gpu": sm}
    plat = case.get("platform")
    if isinstance(plat, Mapping):
        for p in PLATFORMS:
            if p.get("os") != plat.get("os") or p.get("arch") != plat.get("arch"):
                yield f"platform {p['os']}/{p['arch']}", {**base, "platform": dict(p)}


def scan(ids: List[str], cat: Optional[Catalogue] = None) -> List[Dict[str, Any]]:
    cat = cat or load_catalogue(use_cache=False)
    errors = {r.id for r in cat.rules if not r.disables and r.severity is not None and r.severity.value == "error"}
    stage = {r.id: r.stage for r in cat.rules}
    leads: List[Dict[str, Any]] = []
    seen = set()
    for rule, kind, i, case in iter_rule_cases(cat, (lambda r: r.id in ids) if ids else None):
        if kind != "fires" or rule.disables:
            continue
        known = set(finding_refs(rule.when)) | {a for a, _ in rule.alongside} | {rule.id}
        facts, wl = case_inputs(case)
        base = diagnose(cat, facts, wl)
        on_case = {r.rule_id for r in base.results if r.status == "fired"}
        for what, nb in neighbours(case):
            try:
                facts, wl = case_inputs(nb)
            except Exception as exc:  # a neighbour the snapshot reader refuses is no lead
                print(f"skip {rule.id} fires[{i}] {what}: {exc}", file=sys.stderr)
                continue
            d = diagnose(cat, facts, wl)
            f = next((x for x in d.findings if x.rule_id == rule.id and x.status == "fired"), None)
            if f is None:
                continue
            for r in d.results:
                if stage_ordered(rule.stage, stage.get(r.rule_id)):  # listed behind the earlier one
                    continue
                if r.status == "fired" and r.rule_id in errors and r.rule_id not in known and r.rule_id not in on_case:
                    key = (rule.id, "cofires", r.rule_id, what)
                    if key not in seen:
                        seen.add(key)
                        leads.append({"rule": rule.id, "case": i, "neighbour": what, "kind": "cofires", "other": r.rule_id})
            for fx in f.fixes:
                if not fx.checkable:
                    continue
                got = recheck(cat, facts, wl, fx, (rule.id,), d)
                problem = None
                if got.new_errors:
                    problem = "brings up " + ",".join(got.new_errors)
                elif got.still and got.diagnosis.result(rule.id).status == "fired":
                    problem = "rule still fires"
                if problem:
                    key = (rule.id, "fix", fx.position, what, problem)
                    if key not in seen:
                        seen.add(key)
                        leads.append({"rule": rule.id, "case": i, "neighbour": what, "kind": "fix", "fix": fx.position, "problem": problem})
    return leads


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rules", nargs="*", help="rule ids (default: every finding)")
    ap.add_argument("--json", type=Path, help="write the leads here")
    args = ap.parse_args()
    leads = scan(args.rules)
    lines = [
        f"{x['rule']} fires[{x['case']}] on {x['neighbour']}: "
        + (f"alongside {x['other']}?" if x["kind"] == "cofires" else f"fix {x['fix']}: {x['problem']}")
        for x in leads
    ]
    return _artifacts.write_leads(leads, lines, f"{len(leads)} leads in {len({x['rule'] for x in leads})} rules", args.json)


if __name__ == "__main__":
    raise SystemExit(main())
