"""Installed distributions, read from dist-info / egg-info folders without importing them.

Only the `Name` and `Version` headers are read (a few lines per package), which is several
times faster than `importlib.metadata` for a large environment. The first folder on the path
wins, as it does for `import`. A distribution without a version is skipped and reported.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

_NORMALIZE = re.compile(r"[-_.]+")
_MODULE_SUFFIX = re.compile(r"(\.cpython-[^.]*|\.abi3)?\.(py|pyc|so|pyd)$")


def normalize(name: str) -> str:
    """PEP 503 normalized project name: `Flash_Attn` -> `flash-attn`."""
    return _NORMALIZE.sub("-", name).lower().strip()


@dataclass(frozen=True)
class Dist:
    name: str  # normalized
    version: str  # verbatim: local labels (2.4.0+cu121) and NGC builds (2.3.0a0+6ddf5cf.nv24.04) kept
    metadata: Path  # the METADATA / PKG-INFO file
    site_dir: str  # the sys.path entry it was found in


@dataclass(frozen=True)
class Skipped:
    name: str
    path: str
    reason: str


@dataclass(frozen=True)
class PackageScan:
    dists: Mapping[str, Dist]
    skipped: Tuple[Skipped, ...]
    modules: Mapping[str, str]  # top-level importable name -> its folder or file (first on path)
    paths: Tuple[str, ...]  # the path entries that were folders and could be listed

    def version(self, name: str) -> Optional[str]:
        dist = self.dists.get(normalize(name))
        return dist.version if dist else None

    def has_module(self, name: str) -> bool:
        return name.split(".")[0] in self.modules


def read_headers(path: Path, wanted: Iterable[str], multi: FrozenSet[str] = frozenset()) -> Dict[str, List[str]]:
    """Header lines of an RFC 822 style metadata file, stopping at the body.

    Returns {header: [values]} for the names in `wanted`; scanning stops as soon as every
    single-valued header was seen, unless a multi-valued one (Requires-Dist) is asked for.
    """
    want = {w.lower() for w in wanted}
    many = {m.lower() for m in multi}
    found: Dict[str, List[str]] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line in ("\n", "\r\n"):
                break
            if line[:1] in (" ", "\t"):
                continue  # continuation of a folded header
            key, sep, value = line.partition(":")
            if not sep:
                continue
            k = key.strip().lower()
            if k in want:
                found.setdefault(k, []).append(value.strip())
                if not many and all(w in found for w in want):
                    break
    return found


def _metadata_file(entry: str, name: str) -> Optional[Path]:
    full = os.path.join(entry, name)
    if name.endswith(".dist-info"):
        return Path(full, "METADATA")
    if os.path.isdir(full):
        return Path(full, "PKG-INFO")
    return Path(full)  # a single-file .egg-info is itself PKG-INFO


def _name_from_folder(folder: str) -> str:
    stem = folder.rsplit(".", 1)[0]
    return normalize(stem.split("-", 1)[0])


def _read_dist(entry: str, folder: str) -> Tuple[Optional[Dist], Optional[Skipped]]:
    meta = _metadata_file(entry, folder)
    guess = _name_from_folder(folder)
    if meta is None:
        return None, None
    try:
        headers = read_headers(meta, ("Name", "Version"))
    except OSError as exc:
        reason = f"{meta}: unreadable ({exc.strerror or exc})"
        return None, Skipped(guess, str(meta), reason)
    name = normalize(headers.get("name", [guess])[0] or guess)
    version = (headers.get("version") or [""])[0]
    if not version:
        return None, Skipped(name, str(meta), f"{meta}: no Version header")
    return Dist(name=name, version=version, metadata=meta, site_dir=entry), None


def scan(paths: Sequence[str]) -> PackageScan:
    """Every distribution and top-level module on `paths` (in import order)."""
    dists: Dict[str, Dist] = {}
    skipped: List[Skipped] = []
    modules: Dict[str, str] = {}
    listed: List[str] = []
    seen: Set[str] = set()
    for raw in paths:
        entry = os.path.abspath(raw or ".")
        if entry in seen:
            continue
        seen.add(entry)
        try:
            names = os.listdir(entry)
        except OSError:
            continue  # zip files, missing folders: nothing to read
        listed.append(entry)
        for folder in names:
            if folder.endswith((".dist-info", ".egg-info")):
                dist, skip = _read_dist(entry, folder)
                if dist is not None and dist.name not in dists:
                    dists[dist.name] = dist
                if skip is not None and skip.name not in dists:
                    skipped.append(skip)
                continue
            if folder.startswith("__editable__") and folder.endswith("_finder.py"):
                for module, where in _editable_mapping(os.path.join(entry, folder)).items():
                    modules.setdefault(module, where)  # `pip install -e` (setuptools' import hook)
                continue
            if folder.startswith((".", "__")):
                continue
            module = _MODULE_SUFFIX.sub("", folder)
            if module.isidentifier():
                modules.setdefault(module, os.path.join(entry, folder))
    # A distribution found later on the path fixes an earlier broken copy only if it is the
    # one import would use; a skipped entry for a name we did find is noise.
    kept = tuple(s for s in skipped if s.name not in dists)
    return PackageScan(dists=dists, skipped=kept, modules=modules, paths=tuple(listed))


def _editable_mapping(path: str) -> Dict[str, str]:
    """{top-level module: source folder} from setuptools' editable finder (`MAPPING = {...}`),
    read with ast; {} when it is not of that shape."""
    import ast

    from doctor.probe.pysource import PARSE_ERRORS

    try:
        if os.path.getsize(path) > 1024 * 1024:
            return {}
        with open(path, "rb") as fh:
            tree = ast.parse(fh.read())
    except (OSError, *PARSE_ERRORS):
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MAPPING" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except PARSE_ERRORS:
                return {}
            if isinstance(value, dict):
                return {str(k): str(v) for k, v in value.items() if str(k).isidentifier() and isinstance(v, str)}
    return {}


_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*===?\s*([^\s;,]+)")


def requires(dist: Dist) -> Tuple[str, ...]:
    """The Requires-Dist lines of `dist` (reads the whole header block)."""
    try:
        found = read_headers(dist.metadata, ("Requires-Dist",), multi=frozenset({"Requires-Dist"}))
    except OSError:
        return ()
    return tuple(found.get("requires-dist", []))


_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER = re.compile(r";.*\bextra\s*==")


def installed_requires(scan: PackageScan) -> Dict[str, List[str]]:
    """{name: Requires-Dist lines} of every installed distribution, keeping only the lines that
    name another installed distribution and are not an extra's (what `pip check` would hold the
    environment to after a fix moves one of them). Markers stay as written; direct URL
    references are left out (a resolver cannot use them, and a URL may carry a token)."""
    out: Dict[str, List[str]] = {}
    for name in sorted(scan.dists):
        keep = []
        for line in requires(scan.dists[name]):
            m = _REQ_NAME.match(line)
            if m and normalize(m.group(1)) in scan.dists and normalize(m.group(1)) != name and not _EXTRA_MARKER.search(line) and "://" not in line:
                keep.append(line.strip())
        if keep:
            out[name] = keep
    return out


def exact_pins(lines: Iterable[str]) -> Dict[str, str]:
    """{normalized name: version} for the `name==version` requirements among `lines`."""
    pins: Dict[str, str] = {}
    for line in lines:
        m = _PIN.match(line)
        if m:
            pins.setdefault(normalize(m.group(1)), m.group(2))
    return pins
