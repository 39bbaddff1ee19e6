"""The CONTRACT-* finding family: a broken caller/callee contract found in the installed code.

The static probe records one row per call site, import and patch (the snapshot's `contracts`
section, doctor.probe.contracts). Here each pair with sites that break becomes one error
finding (a warning when they break only on some code paths, `conditional` rows): which symbols, where they are called, why the call does not bind, the callee's
installed signature, the versions installed, and the fixes: pins to the release pairs the
pair's YAML lists as binding (established by the same analysis on the released files), the
nearest first. Sites that the analysis could not decide never become errors.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.model import Facts, Finding, Fix, Pin, Severity

PREFIX = "CONTRACT-"


def rule_id(pair_id: str) -> str:
    return PREFIX + pair_id.upper()


def _norm(name: str) -> str:
    from doctor.probe.packages import normalize

    return normalize(name)


def _distance(a: str, b: str) -> Tuple[int, ...]:
    from packaging.version import InvalidVersion, Version

    try:
        va, vb = Version(a).release, Version(b).release
    except InvalidVersion:
        return (99,)
    n = max(len(va), len(vb), 3)
    va, vb = va + (0,) * (n - len(va)), vb + (0,) * (n - len(vb))
    return tuple(abs(x - y) for x, y in zip(va, vb))


def _errors(rows: Sequence[Mapping[str, Any]]) -> str:
    """The exceptions the broken sites raise: a name the callee no longer has raises ImportError
    at an import (AttributeError where it is reached as an attribute), a call that no longer
    binds TypeError."""
    def error(r: Mapping[str, Any]) -> str:
        missing = " has no " in str(r.get("reason", ""))
        return ("ImportError" if r.get("kind") == "import" else "AttributeError") if missing else "TypeError"

    def file(r: Mapping[str, Any]) -> str:
        return str(r.get("site", "")).rsplit(":", 1)[0]

    failing = {file(r) for r in rows if error(r) == "ImportError"}
    only_missing = all(error(r) != "TypeError" for r in rows)
    out: List[str] = []
    for r in rows:
        e = error(r)
        if only_missing and e == "AttributeError" and file(r) in failing:
            continue  # the import in its file fails first: the module never loads to reach it
        if e not in out:
            out.append(e)
    return " or ".join(out) if out else "TypeError or AttributeError"


def _fixes(pair: Any, caller_version: str, callee_version: str) -> Tuple[Fix, ...]:
    """Pins from the pair's known-good release pairs, nearest to what is installed first."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    out: List[Tuple[Tuple[int, ...], Fix]] = []
    try:
        caller_v = Version(caller_version)
    except InvalidVersion:
        caller_v = None
    for good in pair.known_good:
        spec = SpecifierSet(good.caller)
        if caller_v is not None and caller_v in spec:
            fix = Fix(
                description=f"Pin {pair.callee_dist} to {good.callee}, whose contract with {pair.caller_dist} "
                f"{caller_version} binds ({' '.join(good.evidence.split())})",
                pins=(Pin(pair.callee_dist, good.callee),),
            )
            out.append((_distance(good.callee, callee_version), fix))
        else:
            newest = _newest_in(pair.caller_dist, good.caller)
            if newest is not None:
                same = good.callee == callee_version
                fix = Fix(
                    description=f"Use {pair.caller_dist} {newest}"
                    + ("" if same else f" with {pair.callee_dist} {good.callee}")
                    + f", a pair whose contract binds ({' '.join(good.evidence.split())})",
                    pins=(Pin(pair.caller_dist, newest),) + (() if same else (Pin(pair.callee_dist, good.callee),)),
                )
                out.append(((50,) + _distance(newest, caller_version), fix))
    out.sort(key=lambda x: x[0])
    return tuple(f for _, f in out)


def _newest_in(dist: str, spec: str) -> Optional[str]:
    """The newest release of `dist` the release catalogue lists inside `spec`."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    from doctor.releases.catalogue import load_release_catalogue

    try:
        versions = list(load_release_catalogue().versions(dist))
    except (OSError, ValueError, KeyError):  # an unreadable catalogue: no caller-side fix
        return None
    s = SpecifierSet(spec)
    ok: List[Version] = []
    for v in versions:
        try:
            pv = Version(v)
        except InvalidVersion:
            continue
        if not pv.is_prerelease and pv in s:
            ok.append(pv)
    return str(max(ok)) if ok else None


def _symbol_lines(rows: Sequence[Mapping[str, Any]]) -> List[str]:
    by_symbol: Dict[Tuple[str, str], List[Mapping[str, Any]]] = {}
    for r in rows:
        by_symbol.setdefault((str(r["symbol"]), str(r["reason"])), []).append(r)
    lines: List[str] = []
    for (symbol, reason), rs in by_symbol.items():
        sites = [str(r["site"]) for r in rs]
        shown = ", ".join(sites[:4]) + (f" and {len(sites) - 4} more" if len(sites) > 4 else "")
        parts = symbol.split(".")
        short = ".".join(parts[-2:]) if rs[0]["kind"] == "patch" else f"{parts[-1]} ({'.'.join(parts[:-1])})"
        line = f"\n  - {short}: {reason} ({rs[0]['kind']} at {shown})"
        sig = rs[0].get("signature")
        if sig:
            at = rs[0].get("defined_at")
            line += f"; installed signature{f' ({at})' if at else ''}: {sig}"
        lines.append(line)
    return lines


def contract_findings(facts: Facts, specs: Any) -> Tuple[Tuple[Finding, ...], Tuple[Tuple[str, str], ...]]:
    """(findings, rule results) for the contracts recorded in `facts`.

    A pair whose versions differ from the analysed ones (a --assume pin) is not evaluated:
    the analysis read the installed files, not the assumed release.
    """
    section = facts.contracts
    if not isinstance(section, Mapping):
        return (), ()
    findings: List[Finding] = []
    results: List[Tuple[str, str]] = []
    packages = facts.packages or {}
    rows = [r for r in section.get("sites") or () if isinstance(r, Mapping)]
    for p in section.get("pairs") or ():
        if not isinstance(p, Mapping):
            continue
        pid = str(p.get("id"))
        rid = rule_id(pid)
        broken = [r for r in rows if r.get("pair") == pid and r.get("verdict") == "breaks"]
        conditional = [r for r in rows if r.get("pair") == pid and r.get("verdict") == "undecided" and r.get("conditional")]
        if not broken and not conditional:
            results.append((rid, "passed"))
            continue
        caller, callee = str(p.get("caller")), str(p.get("callee"))
        caller_v, callee_v = str(p.get("caller_version")), str(p.get("callee_version"))
        try:
            pair = specs.pair(pid)
        except KeyError:
            pair = None
        assumed = [
            f"{name} {packages.get(_norm(name))}"
            for name, v in ((caller, caller_v), (callee, callee_v))
            if packages.get(_norm(name)) not in (None, v)
        ]
        names = ", ".join(sorted({str(r["symbol"]).rsplit(".", 1)[-1] for r in broken or conditional}))
        if broken:
            severity = Severity.ERROR
            title = f"{caller} {caller_v} calls into {callee} {callee_v} that no longer bind: {names}"
            message = (
                f"Read from the installed code: {caller} {caller_v} calls {callee} {callee_v} in ways its "
                f"definitions no longer accept, so the first run that reaches these sites fails "
                f"({_errors(broken)}):" + "".join(_symbol_lines(broken))
            )
            if conditional:
                message += "\nAlso, on some code paths only:" + "".join(_symbol_lines(conditional))
        else:
            severity = Severity.WARNING
            title = f"{caller} {caller_v} calls into {callee} {callee_v} that fail on some code paths: {names}"
            message = (
                f"Read from the installed code: on the code paths named below, {caller} {caller_v} passes "
                f"{callee} {callee_v} arguments it does not take, so a run that takes them fails "
                f"(TypeError):" + "".join(_symbol_lines(conditional))
            )
        sources = tuple(pair.sources) if pair is not None else ()
        if assumed:
            message += f"\nThe analysis read the installed files; with {', '.join(assumed)} assumed it was not re-run."
            findings.append(Finding(rid, severity, title, message, "not_evaluated", (), sources,
                                    (f"contracts.{pid}",), caller))
            results.append((rid, "not_evaluated"))
            continue
        fixes = _fixes(pair, caller_v, callee_v) if pair is not None else ()
        findings.append(Finding(rid, severity, title, message, "fired", fixes, sources, (), caller))
        results.append((rid, "fired"))
    return tuple(findings), tuple(results)
