"""The STARTUP-* finding family: a framework that refuses to start, by its own dependency check.

The probe reads the requirement strings from the installed framework (doctor.probe.startup; the
snapshot's `contracts.startup_checks` and `contracts.startup`). Here each check with a
requirement the installed versions do not meet becomes one error finding: which requirement,
where it is written, what is installed, the exception the framework raises, and the fixes: the
newest releases the requirement accepts (where the release catalogue lists the package), and
the check's own skip variable when every unmet requirement may be skipped. Each fix is
re-checked: the requirements are evaluated again with it applied, and the catalogue is run again
so a fix that brings up another error is dropped.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from doctor.model import Facts, Finding, Fix, Pin, Severity, Workload
from doctor.rules.conditions import startup_current

PREFIX = "STARTUP-"


def rule_id(check_id: str) -> str:
    return PREFIX + check_id.upper()


# (row, installed version or None, the clauses shown (the display-safe parse; () when the string is
# not a plain name and versions), what require_version raises: doctor.probe.startup.require_version_error)
Unmet = Tuple[Mapping[str, Any], Optional[str], Tuple[Tuple[str, str], ...], str]


def _unmet(rows: Sequence[Mapping[str, Any]], packages: Mapping[str, str], env: Mapping[str, str], check: Any,
           values: Optional[Sequence[str]] = None) -> List[Unmet]:
    """Each requirement that makes require_version raise, judged as require_version judges it."""
    from doctor.probe.packages import normalize
    from doctor.probe.startup import parse_requirement, require_version_error, require_version_name, skipped

    skip = skipped(check, env, values)
    out: List[Unmet] = []
    for row in rows:
        if skip and not row.get("mandatory"):
            continue
        req = str(row["requirement"])
        name = normalize(require_version_name(req))
        got = packages.get(name)
        error = require_version_error(req, got)
        if error is None or (name == "python" and not error.startswith("ValueError")):
            continue  # met; or the interpreter, which require_version compares itself: not judged here
        parsed = parse_requirement(req)
        out.append((row, got, parsed[1] if parsed else (), error))
    return out


def _unparsable(error: str) -> bool:
    """require_version stops on the requirement itself: no installed version passes it."""
    return error.startswith(("ValueError", "InvalidVersion"))


def _newest(name: str, clauses: Tuple[Tuple[str, str], ...]) -> Optional[str]:
    from packaging.version import InvalidVersion, Version

    from doctor.probe.startup import satisfied
    from doctor.releases.catalogue import load_release_catalogue

    try:
        versions = load_release_catalogue().versions(name)
    except (OSError, ValueError, KeyError):
        return None
    ok = []
    for v in versions:
        try:
            if Version(v).is_prerelease:
                continue
        except InvalidVersion:
            continue
        if satisfied(v, clauses):
            ok.append(Version(v))
    return str(max(ok)) if ok else None


def startup_findings(facts: Facts, checks: Sequence[Any], cat: Any = None, workload: Optional[Workload] = None,
                     diagnosis: Any = None) -> Tuple[Tuple[Finding, ...], Tuple[Tuple[str, str], ...]]:
    """(findings, rule results) for the start-up checks recorded in `facts` (see the module doc).
    With the catalogue, workload and diagnosis given, fixes that bring up a new error are dropped
    and new warnings are named."""
    section = facts.contracts if isinstance(facts.contracts, Mapping) else {}
    by_id = {c.id: c for c in checks}
    packages = facts.packages or {}
    env = facts.env or {}
    rows = [r for r in section.get("startup") or () if isinstance(r, Mapping)]
    findings: List[Finding] = []
    results: List[Tuple[str, str]] = []
    why = facts.unknown.get("contracts.startup") or (facts.unknown.get("contracts") if not section else None)
    read_ids = {str(r.get("check")) for r in section.get("startup_checks") or () if isinstance(r, Mapping)}
    for check in checks if why else ():
        # the probe failed before the start-up rows reached the snapshot: not evaluated, and why
        if check.id not in read_ids and packages.get(check.dist):
            rid = rule_id(check.id)
            findings.append(Finding(rid, Severity.WARNING, f"{check.name} {packages[check.dist]}: its start-up check was not evaluated",
                                    str(why), "not_evaluated", (), check.sources, (f"contracts.startup.{check.id}",), check.dist))
            results.append((rid, "not_evaluated"))
    for read in section.get("startup_checks") or ():
        if not isinstance(read, Mapping):
            continue
        check = by_id.get(str(read.get("check")))
        if check is None:  # a snapshot from another attn-doctor with a check this one does not ship
            continue
        rid = rule_id(check.id)
        name = check.name
        version = str(read.get("version"))
        mine = [r for r in rows if r.get("check") == check.id]
        if read.get("status") != "read":
            findings.append(Finding(rid, Severity.WARNING, f"{name} {version}: its start-up check could not be read",
                                    f"{read.get('file')}: {read.get('status')}", "not_evaluated", (), check.sources,
                                    (f"contracts.startup.{check.id}",), check.dist))
            results.append((rid, "not_evaluated"))
            continue
        if not startup_current(facts, read):
            findings.append(Finding(rid, Severity.ERROR, f"{name}: start-up check not re-read for the assumed release",
                                    f"The start-up check was read from {name} {version} as installed; with "
                                    f"{check.dist} {packages.get(check.dist)} assumed it was not read again.",
                                    "not_evaluated", (), check.sources, (f"contracts.startup.{check.id}",), check.dist))
            results.append((rid, "not_evaluated"))
            continue
        values = read.get("skip_values") if isinstance(read.get("skip_values"), list) else None
        unmet = _unmet(mine, packages, env, check, values)
        if not unmet:
            results.append((rid, "passed"))
            continue
        lines = []
        for row, got, clauses, error in unmet:
            req = str(row["requirement"])
            tested = ",".join(op + v for op, v in clauses)
            if _unparsable(error):
                what = f"require_version cannot read it and raises {error}"
                clauses = ()
            elif got is None:
                what = (f"{_name(req)} is not installed: PackageNotFoundError \"The '{req}' distribution was not "
                        f"found and is required by this application.\"")
            else:
                what = (f"{got} is installed: ImportError \"{req} is required for a normal functioning of this "
                        f"module, but found {_name(req)}=={got}.\"")
            spec = req[len(req) - len(req.lstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")):].replace(" ", "")
            shown = f"; only {tested} is tested" if clauses and spec != tested else ""
            lines.append(f"\n  - {req} ({row['site']}{shown}): {what}")
        skippable = check.skip_env is not None and not any(r.get("mandatory") for r, _, _, _ in unmet)
        title = f"{name} {version} refuses to start: its start-up check rejects " + ", ".join(
            f"the requirement {str(r['requirement'])!r}" if _unparsable(e)
            else f"{_name(str(r['requirement']))} {g}" if g else f"a missing {_name(str(r['requirement']))}"
            for r, g, _, e in unmet)
        message = (
            f"Read from the installed code: {name} {version} checks its dependencies {check.runs} "
            f"({check.function} in {read.get('file')}), and these requirements fail:" + "".join(lines)
            + ("\nrequire_version keeps one clause per operator (the last one), so only the clauses named as tested count."
               if any("; only " in x for x in lines) else "")
            + (f"\n{check.skip_env}={check.skip_values[-1]} skips these checks." if skippable else "")
        )
        fixes = _recheck(_fixes(check, name, version, unmet, skippable), facts, check, mine, cat, workload, diagnosis, values)
        # run as the workload's framework, the check raises while its CLI imports (STARTUP-* then
        # stops the run before any rule finding with a later stage)
        runs_it = workload is not None and check.framework is not None and workload.framework == check.framework
        findings.append(Finding(rid, Severity.ERROR, title, message, "fired", fixes, check.sources, (), check.dist,
                                stage="import" if runs_it else None))
        results.append((rid, "fired"))
    return tuple(findings), tuple(results)


def _name(requirement: str) -> str:
    from doctor.probe.startup import parse_requirement

    parsed = parse_requirement(requirement)
    return parsed[0] if parsed else requirement


def _fixes(check: Any, name: str, version: str, unmet: Sequence[Unmet], skippable: bool) -> List[Fix]:
    pins: List[Pin] = []
    advice: List[str] = []
    from doctor.probe.startup import parse_requirement

    for row, _, clauses, error in unmet:
        if _unparsable(error) or parse_requirement(str(row["requirement"])) is None:
            continue  # no version passes it (only skipping the check does), or not shown as a command
        dep = _name(str(row["requirement"]))
        newest = _newest(dep, clauses)
        if newest is not None:
            pins.append(Pin(dep, newest))
        else:
            advice.append(f'pip install "{row["requirement"]}"')
    out: List[Fix] = []
    if pins or advice:
        out.append(Fix(description=f"Install the newest versions {name} {version}'s start-up check accepts",
                       pins=tuple(pins), config=tuple(advice)))
    if skippable:
        out.append(Fix(description=f"Skip {name}'s start-up dependency check (it then runs with these versions untested)",
                       env={str(check.skip_env): "1"}))
    return out


def _recheck(fixes: Sequence[Fix], facts: Facts, check: Any, rows: Sequence[Mapping[str, Any]], cat: Any,
             workload: Optional[Workload], diagnosis: Any, values: Optional[Sequence[str]] = None) -> Tuple[Fix, ...]:
    """Each fix applied to the facts: verified when the requirements then hold; with the catalogue
    given, dropped when the catalogue run again fires a new error, and new warnings named."""
    from doctor.assume import apply_env, apply_pins

    out = []
    for fix in fixes:
        if fix.config and not fix.pins:
            out.append(fix)  # advice only: nothing to apply
            continue
        after = apply_pins(facts, sorted(fix.pins, key=lambda p: (p.name != "torch", p.name))) if fix.pins else facts
        after = apply_env(after, dict(fix.env)) if fix.env else after
        clears = not _unmet(rows, after.packages or {}, after.env or {}, check, values) and not fix.config
        brings: Tuple[str, ...] = ()
        if cat is not None and workload is not None and diagnosis is not None:
            from doctor.rules.evaluate import diagnose

            def fired(d: Any, sev: Severity) -> set:
                return {f.rule_id for f in d.findings if f.status == "fired" and f.severity == sev}

            again = diagnose(cat, after, workload)
            if fired(again, Severity.ERROR) - fired(diagnosis, Severity.ERROR):
                continue  # trades this error for another
            brings = tuple(sorted(fired(again, Severity.WARNING) - fired(diagnosis, Severity.WARNING)))
        out.append(replace(fix, verified=True if clears else None, brings_up=brings))
    return tuple(out)
