"""Heterogeneity: facts that differ between the ranks (or nodes) of one job, as findings.

Input is one snapshot document (docs/snapshot.md) per rank, labelled: the rank number for
`check --distributed`, the file name for `check --env a.json --env b.json`. Each compared fact
is a row of rules/cluster/hetero.yaml (read by doctor/cluster/facts.py), or one of the
per-name families: packages, imports, environment variables; a fact with two or more known
values becomes one finding that names the ranks and hosts on each side, the majority value first, with the fix that aligns the odd ones. A fact
known on some ranks and unknown on others is reported as not comparable (a warning), never
silently equal.

These are comparisons across snapshots, which the single-snapshot rule language under rules/
cannot express; the YAML table is the data, `analyze` the only logic. Pure apart from reading
that table once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.cluster.facts import NOT_INSTALLED, Table, load_table, path_of
from doctor.model import Finding, Fix, Pin, Severity
from doctor.versions import canonical_name, is_version

# One rank's snapshot: (label, host, snapshot document). host None: read it from the snapshot.
Snapshot = Tuple[str, Optional[str], Mapping[str, Any]]

AREA = "cluster"
UNSET = "unset"



def _table() -> Table:
    return load_table()


# --------------------------------------------------------------------------- formatting


def _ranges(labels: Sequence[str]) -> str:
    """"0,1,2,3,6" -> "0-3,6"; non-numeric labels are listed as they are."""
    if not all(label.isdigit() for label in labels):
        return ", ".join(labels)
    nums = sorted({int(x) for x in labels})
    parts: List[str] = []
    start = prev = nums[0]
    for n in nums[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(parts)


def ranks_text(labels: Sequence[str], hosts: Sequence[str]) -> str:
    """"ranks 0-3 (node01, node02)": labels compressed, hosts listed (at most four)."""
    numeric = all(label.isdigit() for label in labels)
    noun = ("rank" if numeric else "snapshot") + ("s" if len(labels) > 1 else "")
    distinct = list(dict.fromkeys(h for h in hosts if h))
    shown = ", ".join(distinct[:4]) + (f" +{len(distinct) - 4} more" if len(distinct) > 4 else "")
    return f"{noun} {_ranges(labels)}" + (f" ({shown})" if shown else "")


@dataclass(frozen=True)
class _Side:
    value: str
    labels: Tuple[str, ...]
    hosts: Tuple[str, ...]

    def who(self) -> str:
        return ranks_text(self.labels, self.hosts)


def _sides(rows: Sequence[Tuple[str, str, Optional[str]]]) -> Tuple[List[_Side], Optional[_Side]]:
    """Group (label, host, value) by value: known sides, majority first; then the unknown side."""
    groups: Dict[Optional[str], Tuple[List[str], List[str]]] = {}
    for label, host, value in rows:
        labels, hosts = groups.setdefault(value, ([], []))
        labels.append(label)
        hosts.append(host)
    order = {v: i for i, v in enumerate(dict.fromkeys(v for _, _, v in rows))}
    known = [
        _Side(v, tuple(ls), tuple(hs)) for v, (ls, hs) in groups.items() if v is not None
    ]
    known.sort(key=lambda s: (-len(s.labels), order[s.value]))
    unknown = groups.get(None)
    return known, (_Side("unknown", tuple(unknown[0]), tuple(unknown[1])) if unknown else None)


def _describe(sides: Sequence[_Side]) -> str:
    return "; ".join(f"{s.value} on {s.who()}" for s in sides)


def _odd(sides: Sequence[_Side]) -> str:
    labels = [label for s in sides[1:] for label in s.labels]
    hosts = [h for s in sides[1:] for h in s.hosts]
    return ranks_text(labels, hosts)


def _evidence(sides: Sequence[_Side], unknown: Optional[_Side]) -> Tuple[str, ...]:
    rows = [f"{s.value}: {s.who()}" for s in sides]
    if unknown is not None:
        rows.append(f"unknown: {unknown.who()}")
    return tuple(rows)


def _finding(
    rule_id: str,
    severity: str,
    what: str,
    why: str,
    sides: Sequence[_Side],
    unknown: Optional[_Side],
    fix: Fix,
    sources: Tuple[str, ...],
) -> Finding:
    tail = f" (not known on {unknown.who()})" if unknown is not None else ""
    return Finding(
        rule_id=rule_id,
        severity=Severity(severity),
        title=f"{what} differs between ranks",
        message=f"{what} differs between ranks: {_describe(sides)}{tail}. Why it matters: {why}.",
        status="fired",
        fixes=(fix,),
        sources=sources,
        area=AREA,
        evidence=_evidence(sides, unknown),
    )


# --------------------------------------------------------------------------- analysis


def _compare(
    snapshots: Sequence[Tuple[str, str, Mapping[str, Any]]],
    get: Callable[[Mapping[str, Any]], Optional[str]],
) -> Tuple[List[_Side], Optional[_Side]]:
    return _sides([(label, host, get(doc)) for label, host, doc in snapshots])


def _version_of(value: str) -> Optional[Pin]:
    """"flash-attn 2.6.3" -> Pin("flash-attn", "2.6.3") (one distribution), else None."""
    if value == NOT_INSTALLED or "," in value:
        return None
    name, _, version = value.partition(" ")
    return Pin(canonical_name(name), version) if version and is_version(version) else None


def _fact_findings(
    snaps: Sequence[Tuple[str, str, Mapping[str, Any]]],
    not_comparable: List[Tuple[str, List[_Side], _Side]],
) -> List[Finding]:
    out: List[Finding] = []
    for spec in _table().facts:
        sides, unknown = _compare(snaps, spec.get)
        if len(sides) < 2:
            if len(sides) == 1 and unknown is not None:
                not_comparable.append((spec.what, sides, unknown))
            continue
        severity = spec.severity_of([s.value for s in sides]) if spec.severity_of else spec.severity
        majority, odd = sides[0].value, _odd(sides)
        pins: Tuple[Pin, ...] = ()
        if spec.pin and majority != NOT_INSTALLED and is_version(majority):
            pins = (Pin(canonical_name(spec.pin), majority),)
        elif spec.pin_value and (whole := _version_of(majority)) is not None:
            pins = (whole,)
        fix = Fix(
            description=spec.fix.format(majority=majority, odd=odd),
            pins=pins,
            cost=spec.cost,
        )
        out.append(_finding(spec.rule_id, severity, spec.what, spec.why, sides, unknown, fix, spec.sources))
    return out


def _package_findings(snaps: Sequence[Tuple[str, str, Mapping[str, Any]]]) -> List[Finding]:
    names = sorted(
        {
            n
            for _, _, doc in snaps
            if isinstance(doc.get("packages"), Mapping)
            for n in doc["packages"]
            if n not in _table().covered_dists
        }
    )
    differing: List[Tuple[str, List[_Side], Optional[_Side]]] = []
    for name in names:

        def get(doc: Mapping[str, Any], name: str = name) -> Optional[str]:
            packages = doc.get("packages")
            if not isinstance(packages, Mapping):
                return None
            return str(packages[name]) if name in packages else NOT_INSTALLED

        sides, unknown = _compare(snaps, get)
        if len(sides) >= 2:
            differing.append((name, sides, unknown))
    if not differing:
        return []
    lines = [f"{name}: {_describe(sides)}" for name, sides, _ in differing]
    pins = tuple(
        Pin(canonical_name(name), sides[0].value)
        for name, sides, _ in differing
        if sides[0].value != NOT_INSTALLED and is_version(sides[0].value)
    )
    return [
        Finding(
            rule_id="CLUSTER-HETERO-PACKAGES",
            severity=Severity.WARNING,
            title=f"{len(differing)} other Python package(s) differ between ranks",
            message="Installed packages differ between ranks (the images are not the same): "
            + " | ".join(lines)
            + ".",
            status="fired",
            fixes=(
                Fix(
                    description="Build one image (or lock file) and run it on every node",
                    pins=pins,
                    cost="rebuild or redeploy the image on the odd nodes",
                ),
            ),
            sources=(_table().sources["torch"],),
            area=AREA,
            evidence=tuple(lines),
        )
    ]


def _import_findings(snaps: Sequence[Tuple[str, str, Mapping[str, Any]]]) -> List[Finding]:
    out: List[Finding] = []
    modules = list(_table().attention_imports)
    for _, _, doc in snaps:
        imports = doc.get("imports")
        if isinstance(imports, Mapping):
            modules.extend(m for m in imports if m not in modules)

    for module in modules:

        def get(doc: Mapping[str, Any], module: str = module) -> Optional[str]:
            st = path_of(doc, "imports")
            if not isinstance(st, Mapping) or not isinstance(st.get(module), Mapping):
                return None
            entry = st[module]
            status = str(entry.get("status", "error"))
            if status == "error":
                why = entry.get("cause") or entry.get("error")
                return f"error ({why})" if why else "error"
            return status

        sides, unknown = _compare(snaps, get)
        if len(sides) < 2:
            continue
        fix = Fix(
            description=f"make `import {module}` behave the same on {_odd(sides)} as on "
            f"{sides[0].who()} (same wheels, same libraries on LD_LIBRARY_PATH)",
            cost="rebuild or redeploy the image on the odd nodes",
        )
        out.append(
            _finding(
                "CLUSTER-HETERO-IMPORT",
                "error",
                f"`import {module}`",
                "ranks where the import fails fall back to another attention backend (or crash) "
                "while the others use it: kernels and numerics differ across the job",
                sides,
                unknown,
                fix,
                (_table().sources["flash"], _table().sources["te"]),
            )
        )
    return out


def _env_findings(snaps: Sequence[Tuple[str, str, Mapping[str, Any]]]) -> List[Finding]:
    names = sorted(
        {
            n
            for _, _, doc in snaps
            if isinstance(doc.get("env"), Mapping)
            for n in doc["env"]
            if n not in _table().per_rank_env
        }
    )
    out: List[Finding] = []
    for name in names:

        def get(doc: Mapping[str, Any], name: str = name) -> Optional[str]:
            env = doc.get("env")
            if not isinstance(env, Mapping):
                return None
            return repr(str(env[name])) if name in env else UNSET

        sides, unknown = _compare(snaps, get)
        if len(sides) < 2:
            continue
        family = next(f for f in _table().env_families if name.startswith(f.prefix))
        rule_id, why, sources = family.rule_id, family.why, family.sources
        majority = sides[0].value
        if majority == UNSET:
            fix = Fix(description=f"unset {name} on {_odd(sides)}", cost="none: a launcher/env change")
        else:
            value = majority[1:-1]
            fix = Fix(
                description=f"set {name}={value} on every rank (in the job script, before the launcher)",
                env={name: value},
                cost="none: a launcher/env change",
            )
        out.append(_finding(rule_id, "warning", name, why, sides, unknown, fix, sources))
    return out


def _not_comparable_finding(items: Sequence[Tuple[str, List[_Side], _Side]]) -> Finding:
    lines = [
        f"{what}: {sides[0].value} on {sides[0].who()}, not known on {unknown.who()}"
        for what, sides, unknown in items
    ]
    return Finding(
        rule_id="CLUSTER-HETERO-UNKNOWN",
        severity=Severity.WARNING,
        title="Some facts could not be compared across ranks",
        message="These facts are known on some ranks and could not be probed on others, so "
        "they were not compared (a node where NVML or the probe fails is often the odd one): "
        + " | ".join(lines)
        + ".",
        status="not_evaluated",
        missing=tuple(what for what, _, _ in items),
        sources=(_table().sources["driver"],),
        area=AREA,
        evidence=tuple(lines),
    )


def analyze(snapshots: Sequence[Snapshot]) -> Tuple[Finding, ...]:
    """Every fact that differs between the given snapshots, as findings (errors first).

    `snapshots` is [(label, host, snapshot document)]; host None reads the snapshot's `host`.
    Fewer than two snapshots cannot differ: the result is empty.
    """
    snaps = [
        (str(label), str(host or doc.get("host") or ""), doc) for label, host, doc in snapshots
    ]
    if len(snaps) < 2:
        return ()
    not_comparable: List[Tuple[str, List[_Side], _Side]] = []
    findings = _fact_findings(snaps, not_comparable)
    findings += _import_findings(snaps)
    findings += _package_findings(snaps)
    findings += _env_findings(snaps)
    if not_comparable:
        findings.append(_not_comparable_finding(not_comparable))
    findings.sort(key=lambda f: f.severity.rank)
    return tuple(findings)
