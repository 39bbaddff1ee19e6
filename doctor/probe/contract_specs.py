"""The caller/callee pairs the contract analysis checks: rules/contracts/*.yaml, validated.

A pair names the caller's distribution and the files (globs under its site folder) whose calls,
imports and patches into the callee are checked, the callee's distribution and top-level
modules, the version helpers the caller writes its guards with, the patch tables it installs
methods from, the release pairs known to bind (with the evidence), and sources at release
tags. Unknown keys and wrong types are errors naming `file:line` (exit 2), like the rules.
See docs/contracts.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.errors import RuleError

_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
# a file at a tag (any name but a branch's: v1.11, 2024.8, August-2024), or an issue / PR
_TAG_URL = re.compile(
    r"^https://github\.com/[^/]+/[^/]+/(blob|tree)/(?!(main|master|HEAD|dev|develop|nightly)/)[^/]+/"
    r"|^https://github\.com/[^/]+/[^/]+/(issues|pull)/\d+"
)


@dataclass(frozen=True)
class PatchTable:
    file: str  # caller file (relative to its site folder) holding the tables
    names: Tuple[str, ...]  # module constants: {ClassName: (module, function)}
    classes_root: str  # callee folder whose sub-folders hold the classes ("transformers/models")
    classes_files: str  # glob of the files inside one sub-folder ("modeling_*.py")


@dataclass(frozen=True)
class KnownGood:
    caller: str  # specifier over the caller's version
    callee: str  # a callee version whose contract binds with those callers
    evidence: str


@dataclass(frozen=True)
class Pair:
    id: str
    title: str
    caller_dist: str
    caller_files: Tuple[str, ...]
    callee_dist: str
    callee_modules: Tuple[str, ...]
    check_imports: Tuple[str, ...]  # fnmatch patterns over imported modules (default: all of the callee)
    helpers: Mapping[str, Mapping[str, str]]
    patches: Tuple[PatchTable, ...]
    external_bases: Tuple[str, ...]
    external_lacks: Optional[str]  # regex: members the external bases are known not to define
    lazy_files: Tuple[str, ...]  # caller files imported only on some paths: their missing imports are conditional
    known_good: Tuple[KnownGood, ...]
    sources: Tuple[str, ...]
    path: str
    line: int
    note: Optional[str] = None


@dataclass(frozen=True)
class Specs:
    pairs: Tuple[Pair, ...] = field(default_factory=tuple)

    def pair(self, pair_id: str) -> Pair:
        for p in self.pairs:
            if p.id == pair_id:
                return p
        raise KeyError(pair_id)


class _Node:
    """A parsed YAML value with the line it starts on."""

    def __init__(self, value: Any, line: int) -> None:
        self.value = value
        self.line = line


def _compose(text: str, path: str) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise RuleError(f"invalid YAML: {exc.problem or exc}", path=path, line=mark.line + 1 if mark else None) from None

    def conv(node: Any) -> _Node:
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            return _Node({k.value: conv(v) for k, v in node.value}, line)
        if isinstance(node, yaml.SequenceNode):
            return _Node([conv(v) for v in node.value], line)
        return _Node(_scalar(node.tag, node.value), line)

    return conv(root) if root is not None else None


def _scalar(tag: str, text: str) -> Any:
    """A resolved plain scalar (the pair schema only needs strings; others are reported as such)."""
    kind = tag.rsplit(":", 1)[-1]
    if kind == "null":
        return None
    if kind == "bool":
        return text.lower() in ("true", "yes", "on")
    if kind == "int":
        try:
            return int(text, 0)
        except ValueError:
            return text
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            return text
    return text


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, node: _Node, msg: str, hint: Optional[str] = None) -> RuleError:
        return RuleError(msg, path=self.path, line=node.line, hint=hint or "see docs/contracts.md for the pair schema")

    def mapping(self, node: _Node, where: str, required: Sequence[str], optional: Sequence[str]) -> Dict[str, _Node]:
        if not isinstance(node.value, dict):
            raise self.fail(node, f"{where}: expected a mapping")
        for k in node.value:
            if k not in required and k not in optional:
                raise self.fail(node.value[k], f"{where}: unknown key {k!r}", f"allowed: {', '.join([*required, *optional])}")
        for k in required:
            if k not in node.value:
                raise self.fail(node, f"{where}: missing key {k!r}")
        return dict(node.value)

    def text(self, node: _Node, where: str) -> str:
        if not isinstance(node.value, str) or not node.value.strip():
            raise self.fail(node, f"{where}: expected a non-empty string")
        return node.value

    def texts(self, node: _Node, where: str) -> Tuple[str, ...]:
        if not isinstance(node.value, list) or not node.value:
            raise self.fail(node, f"{where}: expected a non-empty list of strings")
        return tuple(self.text(n, where) for n in node.value)


def _pair(r: _Reader, node: _Node) -> Pair:
    m = r.mapping(node, "pair", ["id", "title", "caller", "callee", "sources"],
                  ["helpers", "patches", "external_bases", "known_good", "note"])
    pid = r.text(m["id"], "id")
    if not _ID.match(pid):
        raise r.fail(m["id"], f"pair id {pid!r}: use lower-case letters, digits and dashes")
    where = f"pair {pid}"
    caller = r.mapping(m["caller"], f"{where}.caller", ["dist", "files"], ["lazy_files"])
    callee = r.mapping(m["callee"], f"{where}.callee", ["dist", "modules"], ["check_imports"])
    helpers: Dict[str, Dict[str, str]] = {}
    if "helpers" in m:
        hm = r.mapping(m["helpers"], f"{where}.helpers", [], list(m["helpers"].value or {}))
        for name, hn in hm.items():
            h = r.mapping(hn, f"{where}.helpers.{name}", ["dist", "op"], ["version"])
            op = r.text(h["op"], "op")
            if op not in (">=", ">", "<", "<=", "range"):
                raise r.fail(h["op"], f"{where}.helpers.{name}.op: one of >=, >, <, <=, range")
            helpers[name] = {"dist": r.text(h["dist"], "dist"), "op": op}
            if "version" in h:
                helpers[name]["version"] = r.text(h["version"], "version")
    patches: List[PatchTable] = []
    if "patches" in m:
        if not isinstance(m["patches"].value, list):
            raise r.fail(m["patches"], f"{where}.patches: expected a list")
        for pn in m["patches"].value:
            p = r.mapping(pn, f"{where}.patches[]", ["file", "tables", "classes_root", "classes_files"], [])
            patches.append(PatchTable(r.text(p["file"], "file"), r.texts(p["tables"], "tables"),
                                      r.text(p["classes_root"], "classes_root"), r.text(p["classes_files"], "classes_files")))
    ext: Tuple[str, ...] = ()
    lacks: Optional[str] = None
    if "external_bases" in m:
        e = r.mapping(m["external_bases"], f"{where}.external_bases", ["names", "lacks"], [])
        ext = r.texts(e["names"], "names")
        lacks = r.text(e["lacks"], "lacks")
        try:
            re.compile(lacks)
        except re.error as exc:
            raise r.fail(e["lacks"], f"{where}.external_bases.lacks: bad regex ({exc})") from None
    good: List[KnownGood] = []
    if "known_good" in m:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version

        if not isinstance(m["known_good"].value, list):
            raise r.fail(m["known_good"], f"{where}.known_good: expected a list")
        for kn in m["known_good"].value:
            k = r.mapping(kn, f"{where}.known_good[]", ["caller", "callee", "evidence"], [])
            try:
                SpecifierSet(r.text(k["caller"], "caller"))
                Version(r.text(k["callee"], "callee"))
            except (InvalidSpecifier, InvalidVersion) as exc:
                raise r.fail(kn, f"{where}.known_good: {exc}") from None
            good.append(KnownGood(k["caller"].value, k["callee"].value, r.text(k["evidence"], "evidence")))
    sources = r.texts(m["sources"], f"{where}.sources")
    for s, sn in zip(sources, m["sources"].value):
        if not _TAG_URL.match(s):
            raise r.fail(sn, f"{where}: source {s!r} is not upstream code at a release tag or an issue/PR",
                         "link https://github.com/OWNER/REPO/blob/vX.Y.Z/path (never main)")
    return Pair(
        id=pid,
        title=r.text(m["title"], "title"),
        caller_dist=r.text(caller["dist"], "dist"),
        caller_files=r.texts(caller["files"], "files"),
        callee_dist=r.text(callee["dist"], "dist"),
        callee_modules=r.texts(callee["modules"], "modules"),
        check_imports=r.texts(callee["check_imports"], "check_imports") if "check_imports" in callee else (),
        helpers=helpers,
        patches=tuple(patches),
        external_bases=ext,
        external_lacks=lacks,
        lazy_files=r.texts(caller["lazy_files"], "lazy_files") if "lazy_files" in caller else (),
        known_good=tuple(good),
        sources=sources,
        path=r.path,
        line=node.line,
        note=r.text(m["note"], "note") if "note" in m else None,
    )


def read_list(path: Path, key: str, what: str) -> Tuple["_Reader", List["_Node"]]:
    """The reader for `path` and the items of its one top-level list `key` (a `what` file)."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleError(f"cannot read ({exc.strerror or exc})", path=name) from None
    root = _compose(text, name)
    r = _Reader(name)
    if root is None:
        raise RuleError(f"empty {what} file", path=name, hint=f"a {what} file holds `{key}:`")
    top = r.mapping(root, "top level", [key], [])
    if not isinstance(top[key].value, list):
        raise r.fail(top[key], f"{key}: expected a list")
    return r, list(top[key].value)


def load_file(path: Path) -> List[Pair]:
    r, nodes = read_list(path, "pairs", "contract")
    return [_pair(r, n) for n in nodes]


def contracts_dir() -> Path:
    from doctor.resources import rules_dir

    return rules_dir() / "contracts"


def _to_json(specs: Specs) -> List[Dict[str, Any]]:
    from dataclasses import asdict

    return [asdict(p) for p in specs.pairs]


def _from_json(rows: List[Dict[str, Any]]) -> Specs:
    pairs = []
    for r in rows:
        r = dict(r)
        r["patches"] = tuple(PatchTable(p["file"], tuple(p["names"]), p["classes_root"], p["classes_files"]) for p in r["patches"])
        r["known_good"] = tuple(KnownGood(**k) for k in r["known_good"])
        for key in ("caller_files", "callee_modules", "check_imports", "external_bases", "sources", "lazy_files"):
            r[key] = tuple(r[key])
        pairs.append(Pair(**r))
    return Specs(tuple(pairs))


def load_specs(directory: Optional[Path] = None, cache_dir: Optional[Path] = None) -> Specs:
    """Every pair in the folder (default: the shipped rules/contracts), ids unique.

    With `cache_dir`, the validated pairs are kept as JSON keyed by the files' paths, sizes and
    mtimes (doctor.probe.contract_cache), so a probe does not parse YAML when nothing changed."""
    from doctor.probe.contract_cache import _specs_key, cached_pairs, store_pairs

    folder = directory if directory is not None else contracts_dir()
    rows, key = cached_pairs(folder, cache_dir)
    if rows is not None:
        try:
            return _from_json(rows)
        except (KeyError, TypeError, ValueError):
            pass
    files, _ = _specs_key(folder)
    specs = _load_specs(files)
    store_pairs(cache_dir, key, _to_json(specs))
    return specs


def _load_specs(files: Sequence[Path]) -> Specs:
    pairs: List[Pair] = []
    seen: Dict[str, Pair] = {}
    for f in files:
        for p in load_file(f):
            if p.id in seen:
                raise RuleError(f"pair {p.id}: duplicate id (also at {seen[p.id].path}:{seen[p.id].line})",
                                path=p.path, line=p.line)
            seen[p.id] = p
            pairs.append(p)
    return Specs(tuple(pairs))


