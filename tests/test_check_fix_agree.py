"""`check` and `fix` agree: for the same snapshot and workload they recommend the same change for
each finding, and call a change verified (or say what it brings up) in the same words, because
both go through doctor.fix.recheck. Run on the five seeds and on every firing case of every rule
that has a fix the doctor can apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

import pytest

from doctor import app as core
from doctor.fix.plan import FixPlan
from doctor.fix.recheck import recheck
from doctor.model import Finding, Fix, Report
from doctor.rules.cases import case_inputs, case_snapshot
from doctor.rules.loader import load_catalogue

SEEDS = Path(__file__).resolve().parent.parent / "docs" / "examples" / "seeds"
CAT = load_catalogue(use_cache=False)


def _seed_inputs() -> List[Any]:
    out = []
    for snap in sorted(SEEDS.glob("*.snapshot.json")):
        wl = snap.with_name(snap.name.replace(".snapshot.json", ".workload.yaml"))
        out.append(pytest.param(("seed", snap, wl), id=snap.name.split(".")[0]))
    return out


def _rule_cases() -> List[Any]:
    out = []
    for rule in CAT.rules:
        if rule.disables or not any(f.checkable for f in rule.fixes):
            continue
        for i, case in enumerate(rule.tests["fires"]):
            out.append(pytest.param(("case", rule.id, case), id=f"{rule.id}-{i}"))
    return out


def _both(spec: Tuple[Any, ...], tmp_path: Path) -> Tuple[Report, FixPlan]:
    import json

    if spec[0] == "seed":
        snap, wl = spec[1], spec[2]
    else:
        case: Mapping[str, Any] = spec[2]
        snap = tmp_path / "snap.json"
        snap.write_text(json.dumps(case_snapshot(case)), encoding="utf-8")
        wl = tmp_path / "workload.json"
        wl.write_text(json.dumps(case.get("workload") or {}), encoding="utf-8")
    opts = core.CheckOptions(env_files=(snap,), workload_file=wl, kernels=False)
    return core.run_check(opts), core.run_fix(core.FixOptions(check=opts))


def _same_action(a: Fix, b: Fix) -> bool:
    return sorted(a.pins) == sorted(b.pins) and dict(a.env) == dict(b.env) and dict(a.workload) == dict(b.workload)


def _assert_agree(report: Report, plan: FixPlan) -> None:
    by_id: Dict[str, Finding] = {f.rule_id: f for f in report.findings}
    planned_for: Dict[str, List[Fix]] = {}
    for change in plan.changes:
        if change.rule_id:
            planned_for.setdefault(change.rule_id, []).append(change.fix)
    for target in plan.targets:
        finding = by_id[target.rule_id]
        if target.rule_id not in plan.cleared or target.rule_id not in planned_for:
            assert not any(f.planned for f in finding.fixes), f"{target.rule_id}: check shows a plan fix leaves unresolved"
            continue
        lead = finding.fixes[0]
        assert lead.planned, f"{target.rule_id}: check does not lead with the plan's change"
        changes = list(planned_for[target.rule_id])
        if any(p.name == "torch" for c in changes for p in c.pins):
            # a torch move carries its companions (flash-attn rebuilt, torchvision/torchaudio/
            # xformers for that torch), in `fix`'s steps and in check's lead alike
            changes += [c.fix for c in plan.changes if c.origin == "companion"]
        # a change the plan makes for an error its part for this finding brings up (torch moved
        # because the transformers upgrade disables the installed one) comes along in the lead,
        # and where the plan clears that error with a change filed under another finding, the
        # rest of the plan does (check-R5 of sample 28): never more than the whole plan
        follow = [c.fix for c in plan.changes]
        own, extra = {p for c in changes for p in c.pins}, {p for c in follow for p in c.pins}
        assert own <= set(lead.pins) <= own | extra, (target.rule_id, lead, changes)
        own_env = {k: v for c in changes for k, v in c.env.items()}
        assert own_env.items() <= dict(lead.env).items() <= {**own_env, **{k: v for c in follow for k, v in c.env.items()}}.items(), (target.rule_id, lead, changes)
    # The same re-check verdict in both: an alternative `fix` lists for a finding says it
    # "also triggers" an error exactly when check would drop that fix as unverified.
    facts, workload = report.facts, report.workload
    for alt in plan.alternatives:
        result = recheck(CAT, facts, workload, alt.fix, alt.rule_ids)
        assert ("also triggers" in alt.why) == bool(result.new_errors), (alt, result)
        assert ("brings up warning" in alt.why) == bool(result.new_warnings), (alt, result)
        for rid in alt.rule_ids:
            shown = [f for f in by_id[rid].fixes if _same_action(f, alt.fix)]
            for f in shown:  # check shows it verified exactly when the re-check says so
                assert bool(f.verified) == result.verified, (rid, f, result)


@pytest.mark.parametrize("spec", _seed_inputs())
def test_check_and_fix_agree_on_the_seeds(spec: Tuple[Any, ...], tmp_path: Path) -> None:
    report, plan = _both(spec, tmp_path)
    assert plan.targets, "every seed has a finding to fix"
    _assert_agree(report, plan)


@pytest.mark.parametrize("spec", _rule_cases())
def test_check_and_fix_agree_on_every_rule_case_with_fixes(spec: Tuple[Any, ...], tmp_path: Path) -> None:
    report, plan = _both(spec, tmp_path)
    _assert_agree(report, plan)


def test_the_seed_000_recommendation_is_one_pin_in_both(tmp_path: Path) -> None:
    """The disagreement the review found: check said flash-attn 2.5.8, fix 2.5.9.post1."""
    snap = SEEDS / "000-te-cp-flash-attn-softcap.snapshot.json"
    report, plan = _both(("seed", snap, snap.with_name("000-te-cp-flash-attn-softcap.workload.yaml")), tmp_path)
    lead = next(f for f in report.findings if f.rule_id == "TE-CP-FLASH-ATTN-SOFTCAP").fixes[0]
    assert [str(p) for p in lead.pins] == [str(p) for p in plan.pins] == ["flash-attn==2.5.9.post1"]


def test_case_inputs_match_the_snapshot_the_cli_reads() -> None:
    rule = next(r for r in CAT.rules if r.id == "TE-CP-FLASH-ATTN-SOFTCAP")
    facts, _ = case_inputs(rule.tests["fires"][0])
    assert facts.packages is not None and "flash-attn" in facts.packages
