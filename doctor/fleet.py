"""Offline fleet view: `check --env A --env B ...` or `check --env FOLDER`.

Every rule is evaluated on every snapshot on its own (with the same workload, --assume and
rules). The merged report lists a finding once, with the hosts where it fired, where it could
not be evaluated and where it passed; `Report.hosts` keeps each host's own result, and the exit
code is the worst over the hosts. The snapshots are put in a fixed order (label, then path)
first, so nothing depends on the order of --env.

A folder passed to --env contributes only the files that are snapshots by content (a mapping
whose keys are all snapshot sections, with `schema_version` or one of the fact sections);
every other file is skipped with the reason.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.errors import InputError
from doctor.model import Finding, HostResult, Report

LEVELS = {"error": 0, "warning": 1, "info": 2}
FACT_SECTIONS = ("packages", "torch", "cuda", "cudnn", "gpus", "imports", "env")
SNAPSHOT_SUFFIXES = (".json", ".yaml", ".yml")


# --------------------------------------------------------------------------- --env FOLDER


def snapshot_kind(path: Path) -> Optional[str]:
    """None when `path` holds a snapshot document; otherwise why it is not one."""
    import json

    from doctor.bounded import load_document
    from doctor.snapshot import SECTIONS

    fmt = "yaml" if path.suffix.lower() in (".yaml", ".yml") else "json"
    try:
        doc, _ = load_document(path, fmt, what="file")
    except InputError as exc:
        return exc.message
    except (ValueError, json.JSONDecodeError):
        return "invalid JSON"
    except Exception as exc:  # noqa: BLE001 - yaml errors: the file is skipped, with the reason
        return f"invalid YAML ({type(exc).__name__})"
    if not isinstance(doc, Mapping):
        return "not a mapping of snapshot sections"
    keys = [str(k) for k in doc]
    foreign = [k for k in keys if k not in SECTIONS]
    if foreign:
        from doctor.workload import KEYS

        if any(k in KEYS or k == "workload" for k in foreign):
            return "a workload file, not a snapshot"
        return f"unknown key {foreign[0]!r} (not a snapshot)"
    if "schema_version" not in keys and not any(k in FACT_SECTIONS for k in keys):
        return "no schema_version and no fact sections (not a snapshot)"
    return None


def expand_env(paths: Sequence[Path]) -> Tuple[List[Path], List[Tuple[Path, str]]]:
    """Files named on the command line are taken as given (a bad one is an input error later);
    a folder gives its snapshot files. Returns (files, [(skipped file, why)])."""
    out: List[Path] = []
    skipped: List[Tuple[Path, str]] = []
    for p in paths:
        if not p.is_dir():
            out.append(p)
            continue
        found = []
        for x in sorted(p.iterdir()):
            if x.suffix.lower() not in SNAPSHOT_SUFFIXES or not x.is_file():
                continue
            why = snapshot_kind(x)
            if why is None:
                found.append(x)
            else:
                skipped.append((x, why))
        if not found:
            detail = f" ({len(skipped)} file(s) skipped: {skipped[0][0].name}: {skipped[0][1]})" if skipped else ""
            raise InputError(f"no snapshots (*.json, *.yaml) in folder{detail}", path=str(p))
        out.extend(found)
    return out, skipped


# --------------------------------------------------------------------------- evaluation


def label_snapshots(docs: Sequence[Tuple[str, Mapping[str, Any]]]) -> List[Tuple[str, str, Mapping[str, Any]]]:
    """(label, path, doc) in a fixed order, labels unique (a repeated host gets its file name)."""
    raw = [(str(doc.get("host") or Path(path).stem), path, doc) for path, doc in docs]
    raw.sort(key=lambda t: (t[0], t[1]))
    seen: Dict[str, int] = {}
    for label, _, _ in raw:
        seen[label] = seen.get(label, 0) + 1
    out = []
    used: Dict[str, int] = {}
    for label, path, doc in raw:
        if seen[label] > 1:
            used[label] = used.get(label, 0) + 1
            label = f"{label} ({Path(path).name})" if Path(path).name else f"{label} #{used[label]}"
        out.append((label, path, doc))
    # identical paths twice: number them so every host keeps its own line
    final, count = [], {}  # type: ignore[var-annotated]
    for label, path, doc in out:
        count[label] = count.get(label, 0) + 1
        final.append((label if count[label] == 1 else f"{label} #{count[label]}", path, doc))
    return final


def _text(value: Any) -> str:
    """An enum member's text ("error"), or the string itself."""
    return str(getattr(value, "value", value))


def _hosts_text(hosts: Sequence[str]) -> str:
    return ", ".join(hosts)


def merge_fleet(
    reports: Sequence[Tuple[str, str, Report]], docs: Sequence[Tuple[str, str, Mapping[str, Any]]]
) -> Report:
    """One report from each snapshot's own (label, file, report), in label order (see
    `label_snapshots`): findings merged with where they fired, per-host results kept."""
    from doctor.cluster.hetero import analyze

    labels = [label for label, _, _ in reports]
    n = len(reports)

    order: Dict[str, int] = {}
    for _, _, rep in reports:
        for rid, _ in rep.rule_results:
            order.setdefault(rid, len(order))
    per_rule: Dict[str, Dict[str, Finding]] = {}
    for label, _, rep in reports:
        for f in rep.findings:
            per_rule.setdefault(f.rule_id, {})[label] = f
            order.setdefault(f.rule_id, len(order))

    findings: List[Finding] = []
    for rid, by_host in per_rule.items():
        evidence: Tuple[str, ...]
        fired = [h for h in labels if h in by_host and by_host[h].status != "not_evaluated"]
        unknown = [h for h in labels if h in by_host and by_host[h].status == "not_evaluated"]
        passed = [h for h in labels if h not in by_host]
        base = by_host[fired[0]] if fired else by_host[unknown[0]]
        if fired:
            if len(fired) == n:
                evidence = (f"on all {n} snapshots",)
                title = base.title
            else:
                evidence = (f"fired on {_hosts_text(fired)}",)
                if unknown:
                    evidence += (f"not evaluated on {_hosts_text(unknown)} (facts unknown there)",)
                if passed:
                    evidence += (f"passed on {_hosts_text(passed)}",)
                title = f"[{_hosts_text(fired)}] {base.title}"
        else:
            evidence = (f"not evaluated on {_hosts_text(unknown)}",) if len(unknown) < n else (f"not evaluated on any of the {n} snapshots",)
            if passed:
                evidence += (f"passed on {_hosts_text(passed)}",)
            title = base.title if len(unknown) == n else f"[{_hosts_text(unknown)}] {base.title}"
        findings.append(replace(base, title=title, evidence=base.evidence + evidence))
    findings.sort(key=lambda f: (f.status == "not_evaluated", LEVELS.get(_text(f.severity), 3), order.get(f.rule_id, 0)))

    statuses: Dict[str, List[str]] = {}
    for _, _, rep in reports:
        for rid, st in rep.rule_results:
            statuses.setdefault(rid, []).append(_text(st))
    results = {
        rid: "fired" if "fired" in sts else "not_evaluated" if "not_evaluated" in sts else sts[0]
        for rid, sts in statuses.items()
    }
    hosts = tuple(
        HostResult(
            label=label,
            source=path,
            findings=tuple((f.rule_id, _text(f.severity), _text(f.status)) for f in rep.findings),
            undecided=tuple(sorted({b.framework for b in rep.backends if b.available is None})),
        )
        for label, path, rep in reports
    )
    hetero = tuple(analyze([(label, None, doc) for label, _, doc in docs]))
    first = reports[0][2]
    facts = replace(first.facts, source=f"{n} snapshots ({', '.join(labels)}); areas below: {labels[0]}")
    rule_results = tuple(sorted(results.items(), key=lambda kv: order.get(kv[0], 0))) + tuple(
        (f.rule_id, "fired") for f in hetero
    )
    return replace(first, facts=facts, findings=hetero + tuple(findings), rule_results=rule_results, hosts=hosts)


def host_fail_count(host: HostResult, fail_on: str, strict: bool) -> int:
    """The `check` exit-code count for one host, as if it had been checked alone."""
    limit = LEVELS[fail_on]
    n = len(host.undecided) if strict else 0
    for _, severity, status in host.findings:
        if status == "refuted":
            continue
        if status == "not_evaluated":
            n += 1 if strict else 0
        elif LEVELS.get(severity, 2) <= limit:
            n += 1
    return n


def host_lines(report: Report, fail_on: str = "error", strict: bool = False) -> List[str]:
    """One line per host: its counts and whether it fails the gate."""
    out = []
    for h in report.hosts:
        c = {"error": 0, "warning": 0, "info": 0, "not_evaluated": 0}
        for _, severity, status in h.findings:
            if status == "not_evaluated":
                c["not_evaluated"] += 1
            elif status != "refuted":
                c[severity] = c.get(severity, 0) + 1
        verdict = "FAIL" if host_fail_count(h, fail_on, strict) else "ok"
        out.append(
            f"{h.label}: {c['error']} error(s), {c['warning']} warning(s), {c['info']} info, "
            f"{c['not_evaluated']} not evaluated · {verdict} ({h.source})"
        )
    return out
