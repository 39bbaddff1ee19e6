"""`attn-doctor rules list | show ID | lint [PATH]`: browse and validate the catalogue."""

from __future__ import annotations

import json

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import typer

from doctor.commands.common import emit
from doctor.errors import ExitCode, InputError
from doctor.model import STAGE_BY_NAME

rules_app = typer.Typer(help="List, explain and validate compatibility rules.", no_args_is_help=True)


@rules_app.command("list")
def list_rules(
    rules_dir: Optional[List[Path]] = typer.Option(None, "--rules-dir", help="Include your own rules."),
    format: str = typer.Option("text", "--format", "-f", help="text | json"),
) -> int:
    """One line per rule: id, severity or the backend it disables, title."""
    from doctor.rules.loader import load_catalogue

    cat = load_catalogue(rules_dir or [])
    if format == "json":
        from doctor.report.json_report import dumps

        emit(dumps([{"id": r.id, "kind": r.kind, "severity": r.severity, "disables": r.disables, "area": r.area, "title": r.title} for r in cat.rules]))
        return 0
    if format != "text":
        raise InputError(f"unknown format {format!r}", hint="use text or json")
    width = max(len(r.id) for r in cat.rules) if cat.rules else 10
    lines = []
    for r in cat.rules:
        kind = r.severity if r.severity else f"disables {r.disables}"
        lines.append(f"{r.id:<{width}}  {kind:<22}  {r.title}")
    lines.append(f"{len(cat.rules)} rules ({sum(1 for r in cat.rules if r.disables)} backend rules), {len(cat.frameworks)} frameworks")
    emit("\n".join(lines))
    return 0


@rules_app.command("show")
def show_rule(
    rule_id: str = typer.Argument(..., help="Rule id, e.g. TE-NO-BACKEND"),
    rules_dir: Optional[List[Path]] = typer.Option(None, "--rules-dir"),
) -> int:
    """Everything about one rule: condition, fixes, sources, where it is defined."""
    import yaml

    from doctor.rules.loader import finding_refs, load_catalogue, unguarded

    cat = load_catalogue(rules_dir or [])
    try:
        r = cat.rule(rule_id.upper())
    except KeyError:
        close = [x.id for x in cat.rules if rule_id.upper().split("-")[0] in x.id][:5]
        raise InputError(f"no rule {rule_id!r}", hint=("similar: " + ", ".join(close)) if close else "see `attn-doctor rules list`") from None
    family = next(
        ((b, m) for fw in cat.frameworks for b in fw.backends for m in b.members if m.id == r.disables), None
    )
    # a finding about a framework's choice: show its `when:` as written, and the framework's stops apart
    fw_stops = next((fw for fw in cat.frameworks if fw.id == r.reached_by), None)
    written = unguarded(r.when, {"not": fw_stops.reached_unless}) if fw_stops is not None else (r.when_written or r.when)
    fw_filters = next((fw for fw in cat.frameworks if r.when_written is not None and fw.filters_reached_unless
                       and any(r.disables in {b.id, *(m.id for m in b.members)} for b in fw.backends)), None)
    out = [
        f"{r.id}  ({r.severity or 'backend rule: disables ' + str(r.disables)}, area {r.area})",
        f"defined at {r.path}:{r.line}",
        *(
            [
                f"{family[1].name} is a member of {family[0].id} ({family[0].name}): the family stays available while"
                " another member is, as composed per release:",
                *(
                    f"  {'when ' + json.dumps(c.when) if c.when else 'otherwise'}: any of {', '.join(c.any_of)}"
                    + (f", and {', '.join(c.requires)} installed" if c.requires else "")
                    for c in family[0].compose
                ),
            ]
            if family
            else []
        ),
        "",
        r.title,
        "",
        r.message,
        "",
        "when:",
        yaml.safe_dump(written, sort_keys=False, default_flow_style=False).rstrip().replace("\n", "\n  ").join(["  ", ""]),
    ]
    if fw_stops is not None:
        stops = finding_refs(fw_stops.reached_unless)
        out.append(f"  and {fw_stops.name} gets to choose a backend: silent where one of its earlier errors fires"
                   f" ({', '.join(stops)}; its `reached_unless:` in {Path(fw_stops.path).name})")
    if fw_filters is not None:
        out.append(f"  and {fw_filters.name} gets to weigh its backends: silent where an earlier assert stops the run"
                   f" (its `filters_reached_unless:` in {Path(fw_filters.path).name})")
    if r.fixes:
        out.append("fixes:")
        for f in r.fixes:
            acts = [str(p) for p in f.pins] + [f"{k}={v}" for k, v in f.env.items()] + list(f.config)
            out.append(f"  - {f.description}" + (f"  [{'; '.join(acts)}]" if acts else ""))
            if f.when:
                out.append(f"    only when: {json.dumps(f.when)}")
    if r.absent:
        out.append(f"absent: where this fires, {r.disables} is not in this build or release; its other filters stay silent")
    if r.stage:
        out.append(f"stage: {r.stage} ({STAGE_BY_NAME[r.stage].description}); listed behind errors of earlier stages")
    if r.alongside:
        out.append("fires alongside (both really happen on such inputs):")
        out.extend(f"  {rid}: {why}" for rid, why in r.alongside)
    readers = [x.id for x in cat.rules if r.id in x.reads]
    if readers:
        out.append("stops first for (these read its verdict): " + ", ".join(readers))
    if r.kernels:
        out.append("kernel cases: " + ", ".join(r.kernels))
    out.append("sources:")
    out.extend(f"  {s}" for s in r.sources)
    out.extend(_confidence_lines(r, cat.floors))
    out.append(f"tests: {len(r.tests['fires'])} firing case(s), {len(r.tests['passes'])} passing case(s)")
    emit("\n".join(out))
    return 0


def _confidence_lines(r: Any, floors: Mapping[str, str]) -> List[str]:
    """How the rule's version ranges stand against released artifacts (rules/evidence.lock.json)."""
    from doctor.rules.evidence import load_lock, load_oracle_coverage, standing, version_bounded

    st = standing(r, load_lock(), version_bounded(r.when_written or r.when), load_oracle_coverage(), floors)
    if st.level is None:
        return []
    what = {
        "derived": "derived from released artifacts",
        "inferred": "inferred (not derived from released artifacts)",
        "differs": "CONTRADICTED by released artifacts",
        "stale": "evidence not evaluated yet",
        "unverified": "unverified (no evidence on released artifacts)",
        "oracle": "checked by TE's own selection code (no evidence entry on released artifacts)",
    }[st.level]
    out = [f"version ranges: {what}"]
    if r.confidence_note:
        out.append("  why: " + " ".join(r.confidence_note.split()))
    out.extend(f"  {line}" for line in st.lines)
    return out


def _evidence_levels(paths: List[Path]) -> Dict[str, List[str]]:
    """Rule ids by how their version ranges stand against rules/evidence.lock.json."""
    from doctor.resources import rules_dir
    from doctor.rules.evidence import load_lock, load_oracle_coverage, standing, version_bounded
    from doctor.rules.loader import load_catalogue

    builtin = rules_dir().resolve()
    extra = [p for p in paths if builtin not in (Path(p).resolve(), *Path(p).resolve().parents)]
    own = [Path(p).resolve() for p in paths]
    lock = load_lock()
    coverage = load_oracle_coverage()
    levels: Dict[str, List[str]] = {}
    cat = load_catalogue(extra, builtin=True, shadow=True)
    for r in cat.rules:
        where = Path(r.path).resolve()
        if own and not any(where == p or p in where.parents for p in own):
            continue
        st = standing(r, lock, version_bounded(r.when_written or r.when), coverage, cat.floors)
        if st.level:
            levels.setdefault(st.level, []).append(r.id)
    return levels


@rules_app.command("lint")
def lint_rules(
    paths: Optional[List[Path]] = typer.Argument(None, help="Rule files or folders (default: the built-in catalogue)."),
) -> int:
    """Validate rule files: schema, fact names, specifiers, pins, and each rule's own test cases."""
    from doctor import app as core

    failures, checked = core.lint_rules(list(paths or []))
    levels = _evidence_levels(list(paths or []))
    for f in failures:
        emit(f.describe())
    for r_id in levels.get("differs", []):
        emit(f"rule {r_id}: its version range is contradicted by released artifacts (see `attn-doctor rules show {r_id}`)")
    if levels:
        emit(
            "version ranges: "
            + ", ".join(f"{len(levels.get(k, []))} {k}" for k in ("derived", "oracle", "inferred", "unverified", "stale", "differs") if levels.get(k))
            + " (attn-doctor rules show ID says why)"
        )
    emit(f"{checked} rule test cases, {len(failures)} failed")
    return int(ExitCode.FINDINGS if failures or levels.get("differs") else ExitCode.OK)
