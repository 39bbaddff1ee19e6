"""How a rule's version ranges compare with what released artifacts show.

A rule's `evidence:` entries are assertions about files in a package's released artifacts;
tools/evidence.py (a developer tool, with network) evaluates them on every release and writes
the releases where each holds to rules/evidence.lock.json. This module only reads that lock:
`rules show` and `rules lint` report each rule as derived, inferred or unverified, and the
offline test compares each entry's `range` with the lock. Nothing here downloads.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from packaging.version import InvalidVersion, Version

LOCK_NAME = "evidence.lock.json"


def _key(v: str) -> Version:
    return Version(v)


def _matches(version: str, spec: str) -> bool:
    from doctor.versions import version_matches

    return bool(version_matches(version, spec))


def entry_key(entry: Mapping[str, Any]) -> str:
    """Identifies an evidence entry's content: editing an assertion makes its lock record stale."""
    canon = json.dumps({k: entry[k] for k in sorted(entry) if k != "note"}, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def derive_range(scanned: Sequence[str], holds: Iterable[str]) -> str:
    """A readable specifier for the releases in `holds`, as runs over the ordered `scanned` list:
    '>=2.6' or '>=1.11,<1.14'; several runs are joined with ' || '; '' when none holds."""
    order = sorted(scanned, key=_key)
    hold = set(holds)
    runs: List[str] = []
    i = 0
    while i < len(order):
        if order[i] not in hold:
            i += 1
            continue
        j = i
        while j + 1 < len(order) and order[j + 1] in hold:
            j += 1
        lo = "" if i == 0 else f">={order[i]}"
        hi = "" if j == len(order) - 1 else f"<{order[j + 1]}"
        runs.append(",".join(x for x in (lo, hi) if x) or "*")
        i = j + 1
    return " || ".join(runs)


@dataclass(frozen=True)
class Verdict:
    """How an entry's claimed range compares with the releases where its assertions hold."""

    ok: bool
    claimed: List[str]
    holds: List[str]
    derived: str
    problem: str = ""


def judge(entry: Mapping[str, Any], record: Mapping[str, Any], floors: Optional[Mapping[str, str]] = None) -> Verdict:
    """Compare an evidence entry with its lock record. Exact entries must hold on exactly the
    scanned releases inside `range`; `within: true` entries on every one of them. Releases
    below the package's coverage floor (`floors`, from the frameworks' `covers:`) are left out
    on both sides: the catalogue makes no claim there, so `<2.1` agrees with a derived
    `>=1.2,<2.1` when TE is checked from 1.9 on."""
    try:
        scanned = sorted(set(record["holds"]) | set(record["fails"]), key=_key)
        floor = (floors or {}).get(entry.get("package", ""))
        if floor:
            from doctor.versions import below_release

            scanned = [v for v in scanned if not below_release(v, floor)]
    except InvalidVersion as exc:
        return Verdict(False, [], [], "", f"unreadable lock record: {exc}")
    holds = sorted((v for v in record["holds"] if v in scanned), key=_key)
    claimed = [v for v in scanned if _matches(v, entry["range"])]
    derived = derive_range(scanned, holds)
    missing = [v for v in claimed if v not in record["holds"]]
    if entry.get("within"):
        ok = not missing and bool(claimed)
        problem = f"does not hold on {', '.join(missing)}" if missing else ("" if claimed else "no scanned release in range")
        return Verdict(ok, claimed, holds, derived, problem)
    extra = [v for v in holds if v not in claimed]
    bits = []
    if extra:
        bits.append(f"also holds on {', '.join(extra)}")
    if missing:
        bits.append(f"does not hold on {', '.join(missing)}")
    if not holds:
        bits.append("holds on no scanned release")
    return Verdict(claimed == holds and bool(holds), claimed, holds, derived, "; ".join(bits))


def load_lock(rules_dir: Optional[Path] = None) -> Dict[str, Any]:
    """The lock next to the catalogue, or an empty one."""
    if rules_dir is None:
        from doctor.resources import rules_dir as _rules_dir

        rules_dir = _rules_dir()
    path = rules_dir / LOCK_NAME
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {"records": {}, "packages": {}}


COVERAGE_NAME = "evidence/te-oracle-coverage.json"


def load_oracle_coverage(rules_dir: Optional[Path] = None) -> Dict[str, Any]:
    """Per TE rule, how TE's own selection code (tools/te_oracle.py, run from each release's
    wheel) bore it out: cases where it switched a backend off and where it was the only rule to."""
    if rules_dir is None:
        from doctor.resources import rules_dir as _rules_dir

        rules_dir = _rules_dir()
    try:
        return dict(json.loads((rules_dir / COVERAGE_NAME).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


@dataclass(frozen=True)
class Standing:
    """One rule's confidence: 'derived' (every evidence entry agrees with the lock), 'inferred'
    (the rule says why its range is not derived), 'differs' (evidence disagrees and the rule
    does not say why), 'stale' (an entry is missing from the lock or changed since),
    'oracle' (no evidence entry, but TE's own selection code agreed with the doctor in every
    oracle case, and in some of them this rule alone switched the backend off), or
    'unverified' (a version-bounded rule without evidence); None for rules without versions."""

    level: Optional[str]
    lines: List[str]


def standing(rule: Any, lock: Mapping[str, Any], version_bounded: bool,
             coverage: Optional[Mapping[str, Any]] = None, floors: Optional[Mapping[str, str]] = None) -> Standing:
    lines: List[str] = []
    level: Optional[str] = None
    bad = stale = False
    for i, entry in enumerate(rule.evidence):
        rec = lock.get("records", {}).get(f"{rule.id}#{i}")
        scope = "holds on every release in" if entry.get("within") else "range"
        head = f"{entry['package']} {scope} {entry['range']!r}"
        if rec is None or rec.get("key") != entry_key(entry):
            stale = True
            lines.append(f"{head}: not in the evidence lock (run tools/evidence.py)")
            continue
        v = judge(entry, rec, floors)
        bad = bad or not v.ok
        src = rec.get("source", "")
        lines.append(f"{head}: {'agrees' if v.ok else 'DIFFERS'}, released artifacts say {v.derived!r} ({src})" + (f": {v.problem}" if v.problem and not v.ok else ""))
    for note in lock.get("notes", []):
        if note.get("rule") == rule.id:
            lines.append(f"note: {note.get('package')} {note.get('range')!r} looks like {note.get('derived')!r} in released artifacts: {note.get('why')}")
    if rule.confidence == "inferred":
        level = "inferred"
    elif stale:
        level = "stale"
    elif bad:
        level = "differs"
    elif rule.evidence:
        level = "derived"
    elif version_bounded:
        level = "unverified"
        cov: Mapping[str, Any] = coverage or {}
        row = cov.get("rules", {}).get(rule.id)
        complete = bool(cov) and cov.get("agree") == cov.get("cases")
        if row and complete and row.get("sole") and not row.get("disagree"):
            level = "oracle"
            rel = row.get("sole_releases") or ["?"]
            lines.append(
                f"TE's own selection code agreed in all {cov.get('cases')} oracle cases (tools/te_oracle.py); "
                f"this rule alone switched the backend off in {row['sole']} of them, on TE {rel[0]}-{rel[-1]} "
                f"({len(rel)} releases)")
    return Standing(level, lines)


def version_bounded(cond: Any) -> bool:
    """Whether a condition holds a `{package: P, version: SPEC}` leaf."""
    if isinstance(cond, dict):
        if "package" in cond and isinstance(cond.get("version"), str):
            return True
        return any(version_bounded(c) for k in ("all", "any") for c in cond.get(k, ()) or ()) or version_bounded(cond.get("not"))
    return False


def version_conditions(cond: Any) -> List[tuple]:
    """Every `{package: P, version: SPEC}` leaf of a condition, as (P, SPEC), in order, once each."""
    out: List[tuple] = []

    def walk(c: Any) -> None:
        if not isinstance(c, dict):
            return
        if "package" in c and isinstance(c.get("version"), str):
            leaf = (c["package"], c["version"])
            if leaf not in out:
                out.append(leaf)
        for k in ("all", "any"):
            for sub in c.get(k, ()) or ():
                walk(sub)
        walk(c.get("not"))

    walk(cond)
    return out


CONDITION_LEVELS = ("derived", "within", "oracle", "inferred", "other-package", "none", "stale", "differs")


def condition_standings(rule: Any, lock: Mapping[str, Any],
                        coverage: Optional[Mapping[str, Any]] = None, floors: Optional[Mapping[str, str]] = None) -> List[tuple]:
    """How each version condition of a rule stands, as (package, spec, level). A rule's own
    standing is 'derived' when every evidence entry agrees; this is the finer view, one
    condition at a time: 'derived' (an exact entry on that package and range agrees with the
    lock), 'within' (only an entry that holds throughout the range, not one that fixes its
    edges), 'oracle' (a TE condition of a rule TE's own selection code confirmed),
    'inferred' (the rule says why it is not derived), 'other-package' (the rule's evidence
    is on another package: e.g. TE's source naming the flash-attn versions it accepts),
    'none', or 'stale'/'differs' for an exact entry the lock does not confirm."""
    records = lock.get("records", {})
    rule_level = standing(rule, lock, version_bounded(getattr(rule, "when_written", None) or rule.when), coverage, floors).level
    out: List[tuple] = []
    for pkg, spec in version_conditions(getattr(rule, "when_written", None) or rule.when):
        level = "none"
        for i, entry in enumerate(rule.evidence):
            if entry.get("package") != pkg or entry.get("range") != spec:
                continue
            rec = records.get(f"{rule.id}#{i}")
            if entry.get("within"):
                level = "within" if level == "none" else level
                continue
            if rec is None or rec.get("key") != entry_key(entry):
                level = "stale"
            elif judge(entry, rec, floors).ok:
                level = "derived"
            else:
                level = "differs"
            break
        if level == "none":
            if rule.confidence == "inferred":
                level = "inferred"
            elif rule_level == "oracle" and pkg.startswith("transformer-engine"):
                level = "oracle"
            elif rule.evidence:
                level = "other-package"
        out.append((pkg, spec, level))
    return out
