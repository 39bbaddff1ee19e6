"""Refresh the release catalogue (rules/releases/*.json) from the package index.

Two ways to ask the index, both injectable so tests never touch the network:

* PyPI's JSON API (`{index}/pypi/NAME/json`): every version with its Requires-Python and
  file names; for torch also each new release's Requires-Dist, which is what the what-if
  needs to know the CUDA and cuDNN a torch wheel pins.
* `pip index versions NAME --python-version X` for each Python 3.8 ... 3.14: versions only,
  from which the Pythons each version installs on are worked out. New torch releases found
  this way are listed but not pinnable (their bundle is unknown).

Nothing is written unless the index answered for every package: a partial refresh would
leave the catalogue inconsistent. The flash-attn wheel matrix (flash-attn-wheels.json) is
curated from each release's CI workflow and is not touched here.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from doctor.errors import DoctorError, ExitCode
from doctor.releases.catalogue import CATALOGUE_PACKAGES

PYTHONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")
# Binary wheels tagged py3-none: the Python does not decide which versions install.
PYTHON_AGNOSTIC = ("nvidia-cudnn-cu11", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13")
DEFAULT_INDEX = "https://pypi.org"

Runner = Callable[[Sequence[str]], Tuple[int, str, str]]  # argv -> (rc, stdout, stderr)
Fetcher = Callable[[str], Any]  # url -> parsed JSON (raises OSError when unreachable)


class IndexUnreachable(DoctorError):
    """The package index could not be reached; the shipped catalogue is kept."""

    exit_code = ExitCode.FINDINGS


# --------------------------------------------------------------------------- helpers


def _version_key(v: str) -> Any:
    from doctor.versions import parse_version

    return parse_version(v) or parse_version("0")


def python_spec(available: Iterable[str], probed: Sequence[str] = PYTHONS) -> Optional[str]:
    """A PEP 440 specifier for the Pythons a version was found for, out of those probed.

    The ends of the probed range are open: found on 3.8 means "3.8 or older" too.
    None when it was found for every probed Python.
    """
    have = [p for p in probed if p in set(available)]
    if not have or len(have) == len(probed):
        return None
    lo, hi = probed.index(have[0]), probed.index(have[-1])
    parts: List[str] = []
    if lo > 0:
        parts.append(f">={probed[lo]}")
    if hi < len(probed) - 1:
        parts.append(f"<{probed[hi + 1]}")
    parts.extend(f"!={p}.*" for p in probed[lo : hi + 1] if p not in have)
    return ",".join(parts)


def _public(versions: Iterable[str]) -> List[str]:
    return [v for v in versions if "+" not in v]


def _default_runner(argv: Sequence[str]) -> Tuple[int, str, str]:
    """pip, through the probe's subprocess runner (a timeout kills pip's whole process group)."""
    from doctor.probe.sources import run_command

    r = run_command(argv, timeout=120)
    return (1 if r.returncode is None else r.returncode), r.stdout, r.stderr or (r.error or "")


def _default_fetcher(url: str) -> Any:
    req = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "attn-doctor"})
    with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - https index URL
        return json.loads(resp.read().decode("utf-8"))


# --------------------------------------------------------------------------- index clients


@dataclass(frozen=True)
class Found:
    """What the index said about one package."""

    name: str
    releases: Tuple[Tuple[str, Optional[str]], ...]  # (version, python spec)
    torch_rows: Tuple[Mapping[str, Any], ...] = ()  # new torch bundles (JSON API only)
    source: str = ""
    platforms: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)  # version -> wheel platforms (JSON API only)


def via_pip(name: str, python: str, runner: Runner) -> Found:
    """Versions per Python from `pip index versions`."""
    pythons = ("3.11",) if name in PYTHON_AGNOSTIC else PYTHONS
    seen: Dict[str, List[str]] = {}
    errors: List[str] = []
    for py in pythons:
        argv = [python, "-m", "pip", "index", "versions", name, "--python-version", py, "--only-binary=:none:"]
        if name in PYTHON_AGNOSTIC:
            argv = [python, "-m", "pip", "index", "versions", name]
        rc, out, err = runner(argv)
        m = re.search(r"^Available versions:\s*(.+)$", out, re.M)
        if rc != 0 or not m:
            errors.append((err or out).strip().splitlines()[-1] if (err or out).strip() else f"exit {rc}")
            continue
        for v in _public(x.strip() for x in m.group(1).split(",")):
            seen.setdefault(v, []).append(py)
    if not seen:
        raise IndexUnreachable(f"pip index versions {name}: {errors[-1] if errors else 'no versions'}")
    rels = tuple(
        (v, None if name in PYTHON_AGNOSTIC else python_spec(pys)) for v, pys in sorted(seen.items(), key=lambda kv: _version_key(kv[0]))
    )
    return Found(name=name, releases=rels, source=f"pip index versions {name} --python-version 3.8 ... 3.14")


_CP = re.compile(r"-cp(\d)(\d+)-")
_PLATFORM_TAGS = (("macosx", "darwin"), ("win", "windows"), ("linux", "linux"))  # in this order: "manylinux" holds no "win"
_MACHINES = (("x86_64", "x86_64"), ("amd64", "x86_64"), ("aarch64", "aarch64"), ("arm64", "aarch64"))


def wheel_platforms(filenames: Iterable[str]) -> Optional[Tuple[str, ...]]:
    """The platforms ("linux-x86_64", "darwin-aarch64", "windows-x86_64", ...) the binary wheels
    among these file names are for; None when there is a pure-Python wheel (it installs
    anywhere) or no wheel at all."""
    out = set()
    for name in filenames:
        if not name.endswith(".whl"):
            continue
        tag = name[: -len(".whl")].split("-")[-1].lower()
        if tag == "any":
            return None
        system = next((sys_ for key, sys_ in _PLATFORM_TAGS if key in tag), None)
        machine = next((m for key, m in _MACHINES if key in tag), None)
        if system and machine:
            out.add(f"{system}-{machine}")
        elif system == "darwin" and "universal2" in tag:
            out.update({"darwin-x86_64", "darwin-aarch64"})
    return tuple(sorted(out)) or None


def _torch_row(version: str, info: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """A torch.json row from one release's Requires-Dist (Linux x86_64 markers)."""
    row: Dict[str, Any] = {"version": version}
    for req in info.get("requires_dist") or []:
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*\(?==\s*([0-9][^\s;,)]*)", req)
        if not m:
            continue
        dist, ver = m.group(1).lower().replace("_", "-"), m.group(2)
        if dist.startswith("nvidia-cudnn-cu"):
            row["cudnn_dist"], row["cudnn"] = dist, ver
        elif dist.startswith("nvidia-cuda-runtime-cu") or dist == "cuda-toolkit":
            row["cuda_runtime_dist"], row["cuda_runtime"] = dist, ver
            row["cuda"] = ".".join(ver.split(".")[:2])
        elif dist.startswith("nvidia-nccl-cu"):
            row["nccl"] = ver
        elif dist == "triton":
            row["triton"] = ver
    if "cudnn" not in row or "cuda" not in row:
        return None
    row["cxx11_abi"] = _version_key(version) >= _version_key("2.7")
    return row


def via_json(name: str, index: str, fetch: Fetcher, known_torch: Iterable[str] = ()) -> Found:
    """Versions with their Requires-Python (and new torch bundles) from PyPI's JSON API."""
    base = index.rstrip("/")
    try:
        doc = fetch(f"{base}/pypi/{name}/json")
    except (OSError, ValueError, urllib.error.URLError) as exc:
        raise IndexUnreachable(f"{base}/pypi/{name}/json: {exc}") from None
    rels: List[Tuple[str, Optional[str]]] = []
    platforms: Dict[str, Tuple[str, ...]] = {}
    torch_rows: List[Mapping[str, Any]] = []
    known = set(known_torch)
    for version, files in sorted((doc.get("releases") or {}).items(), key=lambda kv: _version_key(kv[0])):
        files = [f for f in files or [] if not f.get("yanked")]
        if not files or "+" in version:
            continue
        spec: Optional[str] = next((f.get("requires_python") for f in files if f.get("requires_python")), None)
        if name == "torch":
            cps = {f"{m.group(1)}.{m.group(2)}" for f in files for m in [_CP.search(f.get("filename", ""))] if m}
            linux = [f for f in files if "linux" in f.get("filename", "") and "x86_64" in f.get("filename", "")]
            if not linux:
                continue
            spec = python_spec(cps) or spec
            if version not in known and _version_key(version) >= _version_key("2.1"):
                try:
                    info = fetch(f"{base}/pypi/torch/{version}/json").get("info", {})
                except (OSError, ValueError, urllib.error.URLError):
                    info = {}
                row = _torch_row(version, info)
                if row is not None:
                    row["python"] = spec
                    torch_rows.append(row)
        rels.append((version, spec))
        plats = wheel_platforms(str(f.get("filename", "")) for f in files)
        if plats:
            platforms[version] = plats
    return Found(name=name, releases=tuple(rels), torch_rows=tuple(torch_rows), source=f"{base}/pypi/{name}/json", platforms=platforms)


# --------------------------------------------------------------------------- merge and write


@dataclass(frozen=True)
class RefreshResult:
    written: Tuple[Path, ...]
    added: Mapping[str, Tuple[str, ...]]  # package -> versions new to the catalogue
    method: str


def merge(existing: Mapping[str, Any], found: Found, retrieved: str) -> Tuple[Dict[str, Any], Tuple[str, ...]]:
    """The new file contents: existing fields kept, releases unioned, provenance updated."""
    doc = dict(existing)
    old = {str(r["version"]): r for r in existing.get("releases") or []}
    rows: Dict[str, Dict[str, Any]] = {v: dict(r) for v, r in old.items()}
    for version, spec in found.releases:
        row = rows.setdefault(version, {"version": version})
        if spec:
            row["python"] = spec
        if version in found.platforms:
            row["platforms"] = list(found.platforms[version])
    added = tuple(v for v, _ in found.releases if v not in old)
    doc.setdefault("about", f"Every version of {found.name} on PyPI and the Pythons it installs on.")
    doc["package"] = found.name
    doc["source"] = found.source
    doc["retrieved"] = retrieved
    doc["releases"] = [rows[v] for v in sorted(rows, key=_version_key)]
    if found.name == "torch" and found.torch_rows:
        have = {r["version"] for r in doc.get("torch", [])}
        doc["torch"] = sorted(
            list(doc.get("torch", [])) + [dict(r) for r in found.torch_rows if r["version"] not in have],
            key=lambda r: _version_key(r["version"]),
        )
    return doc, added


def refresh(
    directory: Path,
    *,
    output: Optional[Path] = None,
    packages: Sequence[str] = CATALOGUE_PACKAGES,
    method: str = "auto",
    index: str = DEFAULT_INDEX,
    python: str = "python",
    runner: Runner = _default_runner,
    fetch: Fetcher = _default_fetcher,
    today: Optional[str] = None,
    dry_run: bool = False,
) -> RefreshResult:
    """Ask the index about every package, then write all files (or none)."""
    retrieved = today or _dt.date.today().isoformat()
    out_dir = output or directory
    found: List[Found] = []
    used = method
    for name in packages:
        existing = _read_json(directory / f"{name}.json")
        if method in ("auto", "json"):
            try:
                known = [r["version"] for r in existing.get("torch", [])]
                found.append(via_json(name, index, fetch, known))
                used = "json"
                continue
            except IndexUnreachable:
                if method == "json":
                    raise
        found.append(via_pip(name, python, runner))
        used = "pip" if used != "json" else "json+pip"
    written: List[Path] = []
    added: Dict[str, Tuple[str, ...]] = {}
    docs: List[Tuple[Path, Dict[str, Any]]] = []
    for f in found:
        doc, new = merge(_read_json(directory / f"{f.name}.json"), f, retrieved)
        added[f.name] = new
        docs.append((out_dir / f"{f.name}.json", doc))
    if not dry_run:
        out_dir.mkdir(parents=True, exist_ok=True)
        for path, doc in docs:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            tmp.replace(path)
            written.append(path)
    return RefreshResult(written=tuple(written), added=added, method=used)


def _read_json(path: Path) -> Dict[str, Any]:
    from doctor.bounded import load_document
    from doctor.errors import InputError

    try:
        doc, _ = load_document(path, "json", what="release catalogue file")
    except (InputError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


# --------------------------------------------------------------------------- install metadata


def refresh_metadata(
    directory: Path,
    *,
    output: Optional[Path] = None,
    packages: Optional[Sequence[str]] = None,
    index: str = DEFAULT_INDEX,
    http: Any = None,
    today: Optional[str] = None,
    only_missing: bool = True,
) -> RefreshResult:
    """Add each release's real Requires-Dist, Provides-Extra and installed file (name, size)
    from the index (doctor.releases.metadata) to <package>.json, for the releases at or above
    METADATA_FLOOR; torch rows of torch.json get their wheel's size. Packages new to the
    catalogue (TE's core and torch-extension distributions) get their version list from the
    simple index. All files are written, or none."""
    from doctor.releases import metadata as md

    fetch_http = http or md._http
    retrieved = today or _dt.date.today().isoformat()
    out_dir = output or directory
    names = list(packages or md.METADATA_FLOOR)
    docs: List[Tuple[Path, Dict[str, Any]]] = []
    added: Dict[str, Tuple[str, ...]] = {}
    for name in names:
        path = directory / f"{name}.json"
        doc = _read_json(path)
        try:
            files = md.index_files(name, index, fetch_http)
        except (OSError, ValueError) as exc:
            raise IndexUnreachable(f"{index}/simple/{name}/: {exc}") from None
        rows = {str(r["version"]): dict(r) for r in doc.get("releases") or []}
        # new versions only for packages new to the catalogue (the others get theirs from `refresh`)
        new = tuple(v for v in files if not rows or ("+" not in v and v not in rows and not _version_key(v).is_prerelease and v != "0.0.0"))
        new = tuple(v for v in new if v not in rows and not _version_key(v).is_prerelease and not _version_key(v).is_devrelease)
        for v in new:
            rows[v] = {"version": v}
        floor = _version_key(md.METADATA_FLOOR.get(name, "0"))
        want = [v for v in rows if _version_key(v) >= floor and (not only_missing or "requires_dist" not in rows[v])]
        got = md.fetch_metadata(name, want, index, fetch_http) if want else {}
        for v, meta in got.items():
            rows[v].update(meta)
        doc.setdefault("about", f"Every version of {name} on PyPI, with the install metadata of each release from {md.METADATA_FLOOR.get(name, 'the first')} on.")
        doc["package"] = name
        doc.setdefault("source", f"{index}/simple/{name}/")
        doc["metadata_source"] = (
            f"{index}/simple/{name}/ (PEP 691 file list and sizes); Requires-Dist and Provides-Extra read from the "
            "Linux x86_64 wheel's METADATA (else the sdist's PKG-INFO); only requirements on packages the doctor tracks are kept"
        )
        doc["retrieved"] = retrieved
        doc["releases"] = [rows[v] for v in sorted(rows, key=_version_key)]
        docs.append((out_dir / f"{name}.json", doc))
        added[name] = new
    out_dir.mkdir(parents=True, exist_ok=True)
    written: List[Path] = []
    for p, doc in docs:
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(p)
        written.append(p)
    return RefreshResult(written=tuple(written), added=added, method="simple+metadata")


def refresh_torch_sizes(directory: Path, *, output: Optional[Path] = None, index: str = DEFAULT_INDEX, http: Any = None) -> Path:
    """torch.json rows: the size of the Linux x86_64 CPython 3.10 wheel (else 3.12) PyPI serves."""
    from doctor.releases import metadata as md

    fetch_http = http or md._http
    path = directory / "torch.json"
    doc = _read_json(path)
    files = md.index_files("torch", index, fetch_http)
    for row in doc.get("torch", []):
        for py in ("3.10", "3.12", "3.13"):
            f = md.pick_file([x for x in files.get(row["version"], []) if x.filename.endswith(".whl")], py)
            if f is not None and "x86_64" in f.filename:
                row["file"] = {"name": f.filename, "size": f.size, "kind": "wheel"}
                break
    out = (output or directory) / "torch.json"
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return out
