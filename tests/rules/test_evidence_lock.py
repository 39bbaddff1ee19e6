"""Each rule's version range agrees with what the released artifacts show (offline).

tools/evidence.py evaluated every `evidence:` entry on every release and wrote the releases
where it holds to rules/evidence.lock.json. Here, without any download, each entry's `range`
must select exactly those releases (or, with `within: true`, only releases where it holds);
a rule whose range the artifacts contradict must say so with `confidence: inferred`.
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from doctor.rules import evidence as tool
from doctor.rules.loader import Catalogue, load_catalogue

CAT: Catalogue = load_catalogue(use_cache=False)
LOCKED: Dict[str, Any] = tool.load_lock()


def _entries() -> List[Any]:
    return [
        pytest.param(rule, i, entry, id=f"{rule.id}#{i}")
        for rule in CAT.rules
        for i, entry in enumerate(rule.evidence)
    ]


@pytest.mark.parametrize("rule,index,entry", _entries())
def test_rule_range_matches_released_artifacts(rule: Any, index: int, entry: Any) -> None:
    rec = LOCKED["records"].get(f"{rule.id}#{index}")
    where = f"{rule.path}:{rule.line} {rule.id} evidence[{index}]"
    rerun = f"run: python tools/evidence.py --rule {rule.id}"
    assert rec is not None, f"{where}: not in rules/evidence.lock.json ({rerun})"
    assert rec["key"] == tool.entry_key(entry), f"{where}: the entry changed since the lock was written ({rerun})"
    verdict = tool.judge(entry, rec, CAT.floors)
    if rule.confidence == "inferred":
        return  # reported as inferred by `rules show` and `rules lint`
    assert verdict.ok, (
        f"{where}: {entry['package']} range {entry['range']!r}, but the released artifacts say "
        f"{verdict.derived!r} ({verdict.problem}); fix the range or mark the rule `confidence: inferred`"
    )


def test_lock_has_no_records_for_entries_that_are_gone() -> None:
    live = {f"{r.id}#{i}" for r in CAT.rules for i in range(len(r.evidence))}
    stale = sorted(set(LOCKED["records"]) - live)
    assert not stale, f"stale lock records {stale}: run python tools/evidence.py"


def test_lock_records_name_the_artifacts_they_read() -> None:
    """Every release a record judged is pinned in the lock by file and sha256 (or tag and commit)."""
    for key, rec in LOCKED["records"].items():
        pinned = LOCKED["packages"].get(rec["source"], {})
        for v in rec["holds"] + rec["fails"]:
            assert v in pinned, f"{key}: release {v} of {rec['source']} is not pinned in the lock"


def test_derive_range_reads_runs_of_releases() -> None:
    scanned = ["1.9", "1.10", "1.11", "1.12", "1.13", "2.0", "2.1"]
    assert tool.derive_range(scanned, ["1.11", "1.12", "1.13"]) == ">=1.11,<2.0"
    assert tool.derive_range(scanned, ["1.9", "1.10"]) == "<1.11"
    assert tool.derive_range(scanned, ["2.0", "2.1"]) == ">=2.0"
    assert tool.derive_range(scanned, ["1.9", "2.1"]) == "<1.10 || >=2.1"
    assert tool.derive_range(scanned, []) == ""


def test_judge_flags_a_range_that_starts_too_late() -> None:
    """The audit's example: a floor that exists from 5.1 but a rule that starts at 5.4."""
    rec = {"holds": ["5.1.0", "5.2.0", "5.3.0", "5.4.0"], "fails": ["4.57.6", "5.0.0"]}
    late = tool.judge({"package": "transformers", "range": ">=5.4", "all": []}, rec)
    assert not late.ok and "5.1.0" in late.problem and late.derived == ">=5.1.0"
    assert tool.judge({"package": "transformers", "range": ">=5.1", "all": []}, rec).ok
    within = tool.judge({"package": "transformers", "range": ">=5.2,<5.4", "within": True, "all": []}, rec)
    assert within.ok


def test_judge_leaves_out_releases_below_the_coverage_floor() -> None:
    """TE is checked from 1.9 on: a rule's `<2.1` agrees with a behaviour that holds from 1.2 to
    2.0, and a range that stops short of 1.9 or runs past 2.0 still disagrees."""
    rec = {"holds": ["1.2", "1.8", "1.9.0.post1", "2.0"], "fails": ["1.0", "2.1.0", "2.2.0"]}
    floors = {"transformer-engine": "1.9"}
    assert not tool.judge({"package": "transformer-engine", "range": "<2.1"}, rec).ok
    clipped = tool.judge({"package": "transformer-engine", "range": "<2.1"}, rec, floors)
    assert clipped.ok and clipped.derived == "<2.1.0"
    assert not tool.judge({"package": "transformer-engine", "range": "<2.2"}, rec, floors).ok
    assert not tool.judge({"package": "transformer-engine", "range": "<2.0"}, rec, floors).ok
    # other packages are not clipped
    assert not tool.judge({"package": "transformers", "range": "<2.1"}, rec, floors).ok


def test_the_catalogue_checks_transformer_engine_from_1_9() -> None:
    """The floor the evidence comparison uses is the TE framework's `covers:`, and the finding
    that tells users about an older TE names the same release."""
    assert CAT.floors == {"transformer-engine": "1.9"}
    rule = CAT.rule("TE-OLDER-THAN-COVERED")
    assert {"package": "transformer-engine", "version": f"<{CAT.floors['transformer-engine']}"} in rule.when["all"]


def test_condition_standings_show_which_condition_the_evidence_fixes() -> None:
    """A rule whose one evidence entry agrees stands 'derived' as a whole; the per-condition view
    still says that its second version condition rests on that entry's package, not its own."""
    from types import SimpleNamespace

    entry = {"package": "transformer-engine", "range": ">=2.1", "all": []}
    rule = SimpleNamespace(
        id="X-RULE", confidence=None, evidence=[entry, {"package": "flash-attn", "range": ">=2.4", "within": True, "all": []}],
        when={"all": [{"package": "transformer-engine", "version": ">=2.1"}, {"package": "flash-attn", "version": ">=2.4"},
                      {"not": {"package": "torch", "version": "<2.0"}}]},
    )
    lock = {"records": {
        "X-RULE#0": {"key": tool.entry_key(entry), "holds": ["2.1.0", "2.2.0"], "fails": ["2.0.0"]},
        "X-RULE#1": {"key": tool.entry_key(rule.evidence[1]), "holds": ["2.4.0"], "fails": []},
    }}
    assert tool.standing(rule, lock, True).level == "derived"
    assert tool.condition_standings(rule, lock) == [
        ("transformer-engine", ">=2.1", "derived"), ("flash-attn", ">=2.4", "within"), ("torch", "<2.0", "other-package")]
    lock["records"]["X-RULE#0"] = {"key": tool.entry_key(entry), "holds": ["2.2.0"], "fails": ["2.0.0", "2.1.0"]}
    assert tool.condition_standings(rule, lock)[0] == ("transformer-engine", ">=2.1", "differs")
    inferred = SimpleNamespace(id="Y", confidence="inferred", evidence=[], when={"package": "torch", "version": ">=2.6"})
    assert tool.condition_standings(inferred, {"records": {}}) == [("torch", ">=2.6", "inferred")]
    bare = SimpleNamespace(id="Z", confidence=None, evidence=[], when={"package": "torch", "version": ">=2.6"})
    assert tool.condition_standings(bare, {"records": {}}) == [("torch", ">=2.6", "none")]


def test_every_version_condition_of_the_catalogue_has_a_standing() -> None:
    """No version condition is left without evidence, an oracle check or a stated reason."""
    coverage = tool.load_oracle_coverage()
    bare = [f"{r.id}: {p} {s!r}" for r in CAT.rules for p, s, level in tool.condition_standings(r, LOCKED, coverage, CAT.floors)
            if level in ("none", "stale", "differs") and not (level == "differs" and r.confidence == "inferred")]
    assert not bare, f"version conditions without a standing: {bare[:10]}"
