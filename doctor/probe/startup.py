"""Start-up checks: the dependency versions a framework itself refuses to start without, read
from its installed code (docs/contracts.md, "Start-up checks").

A version table of a framework's dependency window (rules/findings/framework_api.yaml) knows
the releases that existed when it was written; a development snapshot (LLaMA-Factory installed
from git reports `0.9.3.dev0` while its window moves from commit to commit) or a newer release
is judged here by the requirement strings in the installed file instead. The specs live in
rules/startup/*.yaml (validated, errors name file:line); the probe parses one file per
installed framework with `ast`, never importing it.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from doctor.errors import RuleError
from doctor.probe.contract_specs import _ID, _TAG_URL, _Node, _Reader, read_list
from doctor.probe.packages import PackageScan, normalize
from doctor.probe.pysource import PARSE_ERRORS

MAX_SOURCE_BYTES = 2 * 1024 * 1024  # a start-up module is a few KB; larger is not what we look for


@dataclass(frozen=True)
class StartupCheck:
    id: str
    name: str  # the framework as users know it ("LLaMA-Factory"), for messages
    title: str
    dist: str
    module: str  # top-level package whose folder holds `file` (an editable install included)
    file: str
    function: str
    calls: Tuple[str, ...]  # callees whose first argument is a requirement string
    skip_env: Optional[str]  # a variable that skips the non-mandatory checks
    skip_values: Tuple[str, ...]  # its values (compared lower-case) that every release accepts
    skip_values_from: Tuple[str, ...]  # functions in the file whose `x in [...]` list says which values the install accepts
    runs: str
    sources: Tuple[str, ...]
    path: str
    line: int
    # the workload framework id (`workload.framework`) whose run the check stops at import: there
    # the finding is ordered before every later-stage one (doctor.rules.evaluate.order_by_stage)
    framework: Optional[str] = None


def _check(r: _Reader, node: _Node) -> StartupCheck:
    m = r.mapping(node, "check", ["id", "name", "title", "dist", "module", "file", "function", "calls", "runs", "sources"],
                  ["skip_env", "skip_values", "skip_values_from", "framework"])
    cid = r.text(m["id"], "id")
    if not _ID.match(cid):
        raise r.fail(m["id"], f"check id {cid!r}: use lower-case letters, digits and dashes")
    where = f"check {cid}"
    sources = r.texts(m["sources"], f"{where}.sources")
    for i, s in enumerate(sources):
        if not _TAG_URL.match(s):
            raise r.fail(m["sources"].value[i], f"{where}: source {s!r} is not a file at a release tag or an issue/PR")
    skip_env = r.text(m["skip_env"], f"{where}.skip_env") if "skip_env" in m else None
    skip_values = tuple(v.lower() for v in r.texts(m["skip_values"], f"{where}.skip_values")) if "skip_values" in m else ()
    if (skip_env is None) != (not skip_values):
        raise r.fail(node, f"{where}: skip_env and skip_values go together")
    rel = r.text(m["file"], f"{where}.file")
    if rel.startswith("/") or "\\" in rel or ".." in rel.split("/"):
        raise r.fail(m["file"], f"{where}: file {rel!r} must be a path inside the module, with '/' and no '..'")
    skip_from = r.texts(m["skip_values_from"], f"{where}.skip_values_from") if "skip_values_from" in m else ()
    return StartupCheck(
        id=cid, name=r.text(m["name"], f"{where}.name"), title=r.text(m["title"], f"{where}.title"), dist=normalize(r.text(m["dist"], f"{where}.dist")),
        module=r.text(m["module"], f"{where}.module"), file=rel,
        function=r.text(m["function"], f"{where}.function"), calls=r.texts(m["calls"], f"{where}.calls"),
        skip_env=skip_env, skip_values=skip_values, skip_values_from=skip_from, runs=" ".join(r.text(m["runs"], f"{where}.runs").split()),
        sources=sources, path=r.path, line=node.line,
        framework=r.text(m["framework"], f"{where}.framework") if "framework" in m else None,
    )


def load_checks(directory: Optional[Path] = None) -> Tuple[StartupCheck, ...]:
    """Every check in rules/startup/*.yaml (or `directory`), ids unique."""
    from doctor.resources import rules_dir

    folder = directory if directory is not None else rules_dir() / "startup"
    out: List[StartupCheck] = []
    seen: Dict[str, StartupCheck] = {}
    for f in sorted(folder.glob("*.yaml")) if folder.is_dir() else ():
        r, nodes = read_list(f, "checks", "start-up check")
        for n in nodes:
            c = _check(r, n)
            if c.id in seen:
                raise RuleError(f"check {c.id}: duplicate id (also at {seen[c.id].path}:{seen[c.id].line})", path=str(f), line=c.line)
            seen[c.id] = c
            out.append(c)
    return tuple(out)


def _requirements(tree: ast.Module, check: StartupCheck) -> Optional[List[Tuple[int, str, bool]]]:
    """(line, requirement, mandatory) for each call in the function; None if there is no such function."""
    fn = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == check.function), None)
    if fn is None:
        return None
    out = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        first = node.args[0]
        if name not in check.calls or not isinstance(first, ast.Constant) or not isinstance(first.value, str):
            continue
        # check_version(requirement, mandatory=False): by keyword or second positional (require_version's is a hint string)
        second = [node.args[1]] if len(node.args) > 1 else []
        mandatory = any(isinstance(v, ast.Constant) and v.value is True
                        for v in second + [k.value for k in node.keywords if k.arg == "mandatory"])
        out.append((node.lineno, first.value, mandatory))
    return sorted(out)


def _skip_values(tree: ast.Module, check: StartupCheck) -> Optional[Tuple[str, ...]]:
    """The values the installed file compares the skip variable with (`.lower() in ["true", "1"]`),
    read from the functions `skip_values_from` names; None when none is found."""
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name not in check.skip_values_from:
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Compare) and len(sub.ops) == 1 and isinstance(sub.ops[0], ast.In):
                seq = sub.comparators[0]
                if isinstance(seq, (ast.List, ast.Tuple, ast.Set)) and seq.elts and all(
                        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in seq.elts):
                    values = tuple(sorted(str(e.value).lower() for e in seq.elts))  # type: ignore[attr-defined]
                    if "1" in values:
                        return values
    return None


def analyse(scan: PackageScan, checks: Sequence[StartupCheck]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(checks, requirements) rows for the snapshot's `contracts.startup*` keys; only checks whose
    distribution is installed are read."""
    read: List[Dict[str, Any]] = []
    rows: List[Dict[str, Any]] = []
    for c in checks:
        dist = scan.dists.get(c.dist)
        folder = scan.modules.get(c.module)
        if dist is None or folder is None:
            continue
        path = os.path.join(folder, *c.file.split("/"))
        rel = f"{c.module}/{c.file}"
        status = "read"
        found: Optional[List[Tuple[int, str, bool]]] = None
        skip_values: Optional[Tuple[str, ...]] = None
        try:
            if os.path.getsize(path) > MAX_SOURCE_BYTES:
                status = "too large to read"
            else:
                with open(path, "rb") as fh:
                    tree = ast.parse(fh.read(), filename=rel)
                found = _requirements(tree, c)
                skip_values = _skip_values(tree, c) if c.skip_values_from else None
                if found is None:
                    status = f"no function {c.function}"
        except FileNotFoundError:
            status = "file not found"
        except (OSError, *PARSE_ERRORS) as exc:
            status = f"unreadable: {type(exc).__name__}"
        row: Dict[str, Any] = {"check": c.id, "dist": c.dist, "version": dist.version, "file": rel, "status": status}
        if skip_values is not None:
            row["skip_values"] = list(skip_values)
        read.append(row)
        for line, requirement, mandatory in found or ():
            rows.append({"check": c.id, "site": f"{rel}:{line}", "requirement": requirement, "mandatory": mandatory})
    return read, rows


# transformers.utils.versions.require_version, which LLaMA-Factory's checks call, parses a
# requirement its own way (transformers 4.46.0 and 5.23.0 utils/versions.py are the same here): a
# name of word characters alone is a bare requirement; else a name up to the first operator
# character or space, then clauses split at ",", each 1-2 characters of `!=<>` or whitespace as its
# operator (so "transformers >=4.41" has the operator " >" and raises ValueError), the rest its
# version; packaging's Version then compares (no specifier semantics: "4.*" is an InvalidVersion).
# It keeps the clauses in a dict keyed by operator, so of several clauses with one operator only the
# last is tested: in "transformers>=4.41.2,<=4.49.0,!=4.46.0,...,!=4.48.0" only !=4.48.0 excludes
# (every transformers release 4.34-5.9 does this). One parse below serves both what require_version
# does (require_version_error) and what is shown back (parse_requirement).
_RV_BARE = re.compile(r"^[\w_\-\d]+$")
_RV_REQ = re.compile(r"^([^!=<>\s]+)([\s!=<>]{1,2}.+)")
_RV_CLAUSE = re.compile(r"^([\s!=<>]{1,2})(.+)")
RV_OPS = ("<", "<=", "==", "!=", ">=", ">")
# what is shown back (a finding, a `pip install "..."` line) is only a distribution name and
# version-like clauses: a requirement string from an installed file is not trusted to be shell-safe
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SHOWN_VERSION = re.compile(r"[A-Za-z0-9.+*!_-]+")


def _split(requirement: str) -> Union[str, Tuple[str, Dict[str, str]]]:
    """require_version's parse: (name, {operator: version}) or the ValueError it raises."""
    if _RV_BARE.match(requirement):
        return requirement, {}
    m = _RV_REQ.match(requirement)
    fmt = ("ValueError: requirement needs to be in the pip package format, .e.g., package_a==1.23, or "
           f"package_b>=1.23, but got {requirement}")
    if not m:
        return fmt
    wanted: Dict[str, str] = {}
    for part in m.group(2).split(","):
        c = _RV_CLAUSE.match(part)
        if not c:
            return fmt
        wanted[c.group(1)] = c.group(2)  # a later clause with the same operator replaces the earlier
        if c.group(1) not in RV_OPS:
            return f"ValueError: {requirement}: need one of {list(RV_OPS)}, but got {c.group(1)}"
    return m.group(1), wanted


def parse_requirement(text: str) -> Optional[Tuple[str, Tuple[Tuple[str, str], ...]]]:
    """'transformers>=4.41.2,<=4.49.0' -> ('transformers', (('>=', '4.41.2'), ('<=', '4.49.0'))), the
    clauses require_version tests; a bare name -> (name, ()); None where require_version refuses the
    string or it is not a plain name and versions (never shown back)."""
    split = _split(text.strip())
    if isinstance(split, str) or not _NAME.fullmatch(split[0]):
        return None
    if not all(_SHOWN_VERSION.fullmatch(v.strip()) for v in split[1].values()):
        return None
    return normalize(split[0]), tuple((op, v.strip()) for op, v in split[1].items())


def require_version_error(requirement: str, installed: Optional[str]) -> Optional[str]:
    """What transformers' require_version(requirement) raises with `installed` the version of the
    distribution it names (None: not installed): "ValueError: ...", "InvalidVersion: ...",
    "PackageNotFoundError" or "ImportError"; None when it returns. The interpreter ("python")
    is the caller's business."""
    from packaging.version import InvalidVersion, Version

    split = _split(requirement)
    if isinstance(split, str):
        return split
    if installed is None:
        return "PackageNotFoundError"
    for op, want in split[1].items():
        try:
            got, need = Version(installed), Version(want)
        except InvalidVersion as exc:
            return f"InvalidVersion: {exc}"
        if not {"<": got < need, "<=": got <= need, "==": got == need, "!=": got != need,
                ">=": got >= need, ">": got > need}[op]:
            return "ImportError"
    return None


def require_version_name(requirement: str) -> str:
    """The distribution name require_version looks up (the whole string for a bare name)."""
    m = _RV_REQ.match(requirement)
    return requirement if _RV_BARE.match(requirement) or not m else m.group(1)


def satisfied(installed: str, clauses: Sequence[Tuple[str, str]]) -> Optional[bool]:
    """require_version's test; None when a version does not parse."""
    from packaging.version import InvalidVersion, Version

    try:
        got = Version(installed)
        pairs = [(op, Version(want)) for op, want in clauses]
    except InvalidVersion:
        return None
    ops = {"<": got.__lt__, "<=": got.__le__, "==": got.__eq__, "!=": got.__ne__, ">=": got.__ge__, ">": got.__gt__}
    return all(ops[op](want) for op, want in pairs)


def skipped(check: StartupCheck, env: Mapping[str, str], values: Optional[Sequence[str]] = None) -> bool:
    """Whether the skip variable is set to a value the install accepts (`values`, read from its
    file; else the ones every release accepts)."""
    accepted = tuple(values) if values else check.skip_values
    return check.skip_env is not None and str(env.get(check.skip_env, "")).strip().lower() in accepted
