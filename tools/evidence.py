#!/usr/bin/env python3
"""Derive rules' version boundaries from released artifacts (a developer tool, not shipped).

A rule may carry `evidence:` entries (docs/evidence.md): assertion sets about files inside a
package's released artifact (the pure wheel, else the sdist, from PyPI). This tool downloads the
artifacts of every final release into a cache, evaluates each assertion set on each release,
and writes what it found to `rules/evidence.lock.json`: per entry, the releases where all
assertions hold and where they do not, and the range derived from them. The offline test
(tests/rules/test_evidence_lock.py) compares each rule's `range` with the lock.

    python tools/evidence.py                      # evaluate every entry, rewrite the lock
    python tools/evidence.py --rule TE-NO-BACKEND # only these rules (the rest of the lock is kept)
    python tools/evidence.py --check              # evaluate and report; write nothing
    python tools/evidence.py --cache DIR          # default ~/.cache/attn-doctor-evidence or
                                                  # $ATTN_DOCTOR_EVIDENCE_CACHE

Exit status: 0 when every entry's derived releases equal the rule's `range` (or the rule is
`confidence: inferred`), 1 when some differ, 2 on bad input or a download failure.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import fnmatch
import hashlib
import json
import os
import subprocess
import re
import sys
import tarfile
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "rules" / "evidence.lock.json"
LOCK_FORMAT = 1
PYPI_JSON = "https://pypi.org/pypi/{name}/json"


# --------------------------------------------------------------------------- versions

sys.path.insert(0, str(ROOT))
from doctor.rules.evidence import Verdict, derive_range, entry_key, judge  # noqa: E402

__all__ = ["Verdict", "derive_range", "entry_key", "judge", "main"]


def version_matches(version: str, spec: str) -> bool:
    """The catalogue's own matcher, so that the lock and the rules read a specifier alike."""
    from doctor.versions import version_matches as vm

    return bool(vm(version, spec))


def _key(v: str) -> Version:
    return Version(v)


# --------------------------------------------------------------------------- artifacts


@dataclass(frozen=True)
class Artifact:
    version: str
    filename: str
    url: str
    sha256: str


def pick_artifact(files: Sequence[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    """A pure-Python wheel if there is one (small, the installed layout), else the sdist."""
    pure = [f for f in files if f["filename"].endswith("-none-any.whl")]
    sdist = [f for f in files if f.get("packagetype") == "sdist"]
    for group in (pure, sdist):
        if group:
            return sorted(group, key=lambda f: f["filename"])[0]
    return None


def list_releases(package: str, cache: Path, fetch: Callable[[str], bytes]) -> List[Artifact]:
    """Final releases on PyPI that have an artifact this tool can read, oldest first."""
    cached = cache / "index" / f"{package}.json"
    index_url = PYPI_JSON.format(name=package)
    doc = json.loads(fetch(index_url))
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(doc["releases"]), encoding="utf-8")
    out = []
    for ver, files in doc["releases"].items():
        try:
            v = Version(ver)
        except InvalidVersion:
            continue
        if v.is_prerelease or v.is_devrelease:
            continue
        f = pick_artifact(files)
        if f is not None:
            url = urllib.parse.urljoin(index_url, f["url"])  # a mirror may answer with relative URLs
            out.append(Artifact(ver, f["filename"], url, f["digests"]["sha256"]))
    return sorted(out, key=lambda a: _key(a.version))


def _http(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as resp:  # noqa: S310 - https PyPI only
        return bytes(resp.read())


def download(art: Artifact, package: str, cache: Path, fetch: Callable[[str], bytes] = _http) -> Path:
    """The artifact in the cache, downloaded and its sha256 checked on first use."""
    dest = cache / "artifacts" / package / art.filename
    if dest.is_file() and hashlib.sha256(dest.read_bytes()).hexdigest() == art.sha256:
        return dest
    data = fetch(art.url)
    got = hashlib.sha256(data).hexdigest()
    if got != art.sha256:
        raise RuntimeError(f"{art.filename}: sha256 {got} != PyPI's {art.sha256}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
    return dest


class Files:
    """The text files inside one wheel or sdist, by their path in the installed layout
    (an sdist's top folder `name-version/` is dropped)."""

    def __init__(self, path: Path) -> None:
        self._texts: Dict[str, bytes] = {}
        name = path.name
        if name.endswith(".whl") or name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    if not info.is_dir() and info.file_size < 8_000_000:
                        self._texts[info.filename] = zf.read(info)
        else:
            with tarfile.open(path) as tf:
                for m in tf.getmembers():
                    if m.isfile() and m.size < 8_000_000:
                        parts = m.name.split("/", 1)
                        inner = parts[1] if len(parts) == 2 else parts[0]
                        fh = tf.extractfile(m)
                        if fh is not None:
                            self._texts[inner] = fh.read()

    def glob(self, pattern: str) -> List[str]:
        """Paths matching a glob in which `*` also crosses folders."""
        return sorted(p for p in self._texts if fnmatch.fnmatchcase(p, pattern))

    def text(self, name: str) -> str:
        return self._texts[name].decode("utf-8", errors="replace")


class GitFiles:
    """The files of one release tag in a git mirror of the upstream repository (for releases
    that are not on PyPI, or files a wheel does not ship: C++ sources, CI workflows)."""

    def __init__(self, git_dir: Path, tag: str) -> None:
        self._git, self._tag = git_dir, tag
        out = _git(git_dir, "ls-tree", "-r", "--name-only", tag)
        self._paths = out.decode().splitlines()
        self._cache: Dict[str, str] = {}

    def glob(self, pattern: str) -> List[str]:
        return sorted(p for p in self._paths if fnmatch.fnmatchcase(p, pattern))

    def text(self, name: str) -> str:
        if name not in self._cache:
            self._cache[name] = _git(self._git, "show", f"{self._tag}:{name}").decode("utf-8", errors="replace")
        return self._cache[name]


def _git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True).stdout


def git_releases(git_dir: Path) -> List[Tuple[str, str]]:
    """(version, tag) for every final release tag `vX.Y[.Z]`, oldest first."""
    out = []
    for tag in _git(git_dir, "tag").decode().split():
        if not tag.startswith("v"):
            continue
        try:
            v = Version(tag[1:])
        except InvalidVersion:
            continue
        if not (v.is_prerelease or v.is_devrelease):
            out.append((str(tag[1:]), tag))
    return sorted(out, key=lambda t: _key(t[0]))


def mirror_for(repo: str, mirrors: Mapping[str, Path], cache: Path) -> Path:
    """A git directory holding `repo`'s tags: one given with --mirror, else a bare clone in the cache."""
    if repo in mirrors:
        return mirrors[repo]
    dest = cache / "git" / repo.replace("/", "+")
    if not dest.is_dir():
        dest.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "--bare", "--filter=blob:none", f"https://github.com/{repo}.git", str(dest)], check=True)
    return dest


# --------------------------------------------------------------------------- assertions


def _functions(tree: ast.AST, name: str) -> List[ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]  # type: ignore[misc]


def _params(fn: ast.FunctionDef) -> Tuple[List[str], List[str]]:
    """(all parameter names, the required ones: no default)."""
    a = fn.args
    pos = list(a.posonlyargs) + list(a.args)
    n_def = len(a.defaults)
    required = [p.arg for p in pos[: len(pos) - n_def]]
    required += [p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
    names = [p.arg for p in pos + list(a.kwonlyargs)]
    return names, required


def _parse(files: Any, name: str, memo: Dict[str, Optional[ast.AST]]) -> Optional[ast.AST]:
    if name not in memo:
        try:
            memo[name] = ast.parse(files.text(name))
        except (SyntaxError, ValueError):
            memo[name] = None
    return memo[name]


def check_assertion(a: Mapping[str, Any], files: Any, memo: Dict[str, Optional[ast.AST]]) -> bool:
    """Whether one assertion holds in one release's artifact. A glob that matches no file
    makes every assertion false, `absent` included: a missing file is not evidence."""
    globs = [a["file"]] if isinstance(a["file"], str) else list(a["file"])
    names = sorted({n for g in globs for n in files.glob(g)})
    if not names:
        return False
    if "regex" in a:
        rx = re.compile(a["regex"], re.M)
        return any(rx.search(files.text(n)) for n in names)
    if "absent" in a:
        rx = re.compile(a["absent"], re.M)
        return not any(rx.search(files.text(n)) for n in names)
    if "literal" in a:
        return any(a["literal"] in files.text(n) for n in names)
    trees = [t for t in (_parse(files, n, memo) for n in names if n.endswith(".py")) if t is not None]
    if "function" in a:
        defs = [fn for t in trees for fn in _functions(t, a["function"])]
        if not defs:
            return False
        ok = []
        for fn in defs:
            params, required = _params(fn)
            if "required_param" in a:
                ok.append(a["required_param"] in required)
            elif "param" in a:
                ok.append(a["param"] in params)
            elif "no_param" in a:
                ok.append(a["no_param"] not in params)
            else:
                ok.append(True)
        return any(ok)
    if "class" in a:
        classes = [n for t in trees for n in ast.walk(t) if isinstance(n, ast.ClassDef) and n.name == a["class"]]
        if not classes:
            return False
        methods = [{m.name for m in c.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))} for c in classes]
        if "method" in a:
            return any(a["method"] in ms for ms in methods)
        if "no_method" in a:
            return all(a["no_method"] not in ms for ms in methods)
        return True
    raise ValueError(f"assertion without a test: {a}")


# --------------------------------------------------------------------------- catalogue


@dataclass
class Entry:
    rule: str
    index: int
    spec: Mapping[str, Any]
    inferred: bool
    path: str
    line: int

    @property
    def package(self) -> str:
        return str(self.spec["package"])

    @property
    def key(self) -> str:
        return entry_key(self.spec)


def catalogue_entries(rule_ids: Sequence[str] = ()) -> List[Entry]:
    from doctor.rules.loader import load_catalogue

    cat = load_catalogue(use_cache=False)
    out = []
    for r in cat.rules:
        if rule_ids and r.id not in rule_ids:
            continue
        for i, ev in enumerate(r.evidence):
            out.append(Entry(r.id, i, ev, r.confidence == "inferred", r.path, r.line))
    return out


# --------------------------------------------------------------------------- run


@dataclass
class Run:
    cache: Path
    fetch: Callable[[str], bytes] = _http
    mirrors: Dict[str, Path] = field(default_factory=dict)
    releases: Dict[str, List[Artifact]] = field(default_factory=dict)
    failures: List[str] = field(default_factory=list)

    def artifacts(self, package: str) -> List[Artifact]:
        if package not in self.releases:
            self.releases[package] = list_releases(package, self.cache, self.fetch)
        return self.releases[package]

    def fetch_all(self, package: str, arts: Sequence[Artifact]) -> Dict[str, Path]:
        out: Dict[str, Path] = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            futs = {pool.submit(download, a, package, self.cache, self.fetch): a for a in arts}
            for fut in concurrent.futures.as_completed(futs):
                a = futs[fut]
                try:
                    out[a.version] = fut.result()
                except Exception as exc:  # noqa: BLE001 - one bad download is reported, not fatal
                    self.failures.append(f"{package} {a.version}: {exc}")
        return out


def evaluate(entries: Sequence[Entry], run: Run, progress: Callable[[str], None]) -> Dict[str, Any]:
    """Lock records for `entries`, keyed 'RULE#INDEX'; plus the artifacts read per package."""
    by_pkg: Dict[str, List[Entry]] = {}
    by_repo: Dict[str, List[Entry]] = {}
    for e in entries:
        if e.spec.get("repo"):
            by_repo.setdefault(str(e.spec["repo"]), []).append(e)
        else:
            by_pkg.setdefault(e.package, []).append(e)
    records: Dict[str, Any] = {}
    packages: Dict[str, Any] = {}
    for repo, ents in sorted(by_repo.items()):
        try:
            git_dir = mirror_for(repo, run.mirrors, run.cache)
        except (OSError, subprocess.CalledProcessError) as exc:
            run.failures.append(f"github:{repo}: no release tags ({exc}); pass --mirror {repo}=GITDIR")
            continue
        tags = [(v, t) for v, t in git_releases(git_dir) if any(version_matches(v, e.spec.get("scan", ">=0")) for e in ents)]
        progress(f"{repo}: {len(tags)} release tags to read")
        results = {f"{e.rule}#{e.index}": {} for e in ents}  # type: Dict[str, Dict[str, bool]]
        for v, tag in tags:
            files = GitFiles(git_dir, tag)
            memo: Dict[str, Optional[ast.AST]] = {}
            for e in ents:
                if version_matches(v, e.spec.get("scan", ">=0")):
                    results[f"{e.rule}#{e.index}"][v] = all(check_assertion(x, files, memo) for x in e.spec["all"])
        packages["github:" + repo] = {v: {"tag": t, "commit": _git(git_dir, "rev-list", "-n1", t).decode().strip()} for v, t in tags}
        for e in ents:
            records[f"{e.rule}#{e.index}"] = _record(e, results[f"{e.rule}#{e.index}"], "github:" + repo)
    for package, ents in sorted(by_pkg.items()):
        arts = run.artifacts(package)
        wanted = [a for a in arts if any(version_matches(a.version, e.spec.get("scan", ">=0")) for e in ents)]
        progress(f"{package}: {len(wanted)} releases to read ({len(arts)} on PyPI)")
        paths = run.fetch_all(package, wanted)
        results: Dict[str, Dict[str, bool]] = {e.rule + "#" + str(e.index): {} for e in ents}
        for a in wanted:
            if a.version not in paths:
                continue
            try:
                files = Files(paths[a.version])
            except (OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
                run.failures.append(f"{package} {a.version}: unreadable artifact: {exc}")
                continue
            memo: Dict[str, Optional[ast.AST]] = {}
            for e in ents:
                if not version_matches(a.version, e.spec.get("scan", ">=0")):
                    continue
                ok = all(check_assertion(x, files, memo) for x in e.spec["all"])
                results[e.rule + "#" + str(e.index)][a.version] = ok
        packages["pypi:" + package] = {
            a.version: {"file": a.filename, "sha256": a.sha256} for a in wanted if a.version in paths
        }
        for e in ents:
            records[f"{e.rule}#{e.index}"] = _record(e, results[e.rule + "#" + str(e.index)], "pypi:" + package)
    return {"records": records, "packages": packages}


def _record(e: Entry, res: Mapping[str, bool], source: str) -> Dict[str, Any]:
    holds = sorted((v for v, ok in res.items() if ok), key=_key)
    fails = sorted((v for v, ok in res.items() if not ok), key=_key)
    rec = {"rule": e.rule, "index": e.index, "package": e.package, "source": source, "key": e.key, "range": e.spec["range"], "holds": holds, "fails": fails}
    rec["derived"] = derive_range(holds + fails, holds)
    return rec


def merge_lock(old: Mapping[str, Any], new: Mapping[str, Any], keep: Callable[[str], bool]) -> Dict[str, Any]:
    records = {k: v for k, v in old.get("records", {}).items() if keep(k)}
    records.update(new["records"])
    packages = {k: dict(v) for k, v in old.get("packages", {}).items()}
    for p, arts in new["packages"].items():
        packages.setdefault(p, {}).update(arts)
    return {
        "format": LOCK_FORMAT,
        "about": "Written by tools/evidence.py: per evidence entry, the releases where its assertions hold. Do not edit, except `notes`.",
        "notes": list(old.get("notes", [])),
        "records": dict(sorted(records.items())),
        "packages": {p: dict(sorted(a.items(), key=lambda kv: _key(kv[0]))) for p, a in sorted(packages.items())},
    }


def dump_lock(lock: Mapping[str, Any]) -> str:
    """JSON with one line per record and per package release, so that a diff shows what moved."""
    out = ["{"]
    out.append(f' "format": {json.dumps(lock["format"])},')
    out.append(f' "about": {json.dumps(lock["about"])},')
    out.append(' "notes": [')
    notes = list(lock.get("notes", []))
    for i, note in enumerate(notes):
        out.append(f"  {json.dumps(note, sort_keys=True)}" + ("," if i < len(notes) - 1 else ""))
    out.append(" ],")
    for name in ("records", "packages"):
        out.append(f' "{name}": {{')
        items = list(lock[name].items())
        for i, (k, v) in enumerate(items):
            if name == "packages":
                out.append(f"  {json.dumps(k)}: {{")
                rels = list(v.items())
                for j, (ver, info) in enumerate(rels):
                    out.append(f"   {json.dumps(ver)}: {json.dumps(info, sort_keys=True)}" + ("," if j < len(rels) - 1 else ""))
                out.append("  }" + ("," if i < len(items) - 1 else ""))
            else:
                out.append(f"  {json.dumps(k)}: {json.dumps(v)}" + ("," if i < len(items) - 1 else ""))
        out.append(" }" + ("," if name == "records" else ""))
    out.append("}")
    return "\n".join(out) + "\n"


def summary(lock: Mapping[str, Any]) -> str:
    """A markdown table: per package, its rules' version conditions by standing (no network)."""
    from doctor.rules.evidence import CONDITION_LEVELS, condition_standings, load_oracle_coverage
    from doctor.rules.loader import load_catalogue

    coverage = load_oracle_coverage()
    table: Dict[str, Dict[str, int]] = {}
    cat = load_catalogue(use_cache=False)
    for rule in cat.rules:
        for pkg, _spec, level in condition_standings(rule, lock, coverage, cat.floors):
            row = table.setdefault(pkg, {})
            row[level] = row.get(level, 0) + 1
    levels = [lv for lv in CONDITION_LEVELS if any(lv in row for row in table.values())]
    out = ["| package | conditions | " + " | ".join(levels) + " |", "|---|---|" + "---|" * len(levels)]
    for pkg, row in sorted(table.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
        out.append(f"| {pkg} | {sum(row.values())} | " + " | ".join(str(row.get(lv, 0)) for lv in levels) + " |")
    total = {lv: sum(row.get(lv, 0) for row in table.values()) for lv in levels}
    out.append(f"| **all** | {sum(total.values())} | " + " | ".join(str(total[lv]) for lv in levels) + " |")
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("ATTN_DOCTOR_EVIDENCE_CACHE", Path.home() / ".cache" / "attn-doctor-evidence")))
    ap.add_argument("--lock", type=Path, default=LOCK)
    ap.add_argument("--rule", action="append", default=[], help="only this rule id (repeatable)")
    ap.add_argument("--package", action="append", default=[], help="only entries about this package (repeatable)")
    ap.add_argument("--mirror", action="append", default=[], metavar="OWNER/NAME=GITDIR", help="a local git mirror with the release tags (repeatable); else a bare clone in the cache")
    ap.add_argument("--check", action="store_true", help="evaluate and report, do not write the lock")
    ap.add_argument("--summary", action="store_true", help="offline: per package, how its version conditions stand against the lock")
    args = ap.parse_args(argv)
    if args.summary:
        try:
            print(summary(json.loads(args.lock.read_text()) if args.lock.is_file() else {}), flush=True)
        except BrokenPipeError:  # `| head`: the reader left; say nothing more
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

    try:
        entries = catalogue_entries(args.rule)
    except Exception as exc:  # noqa: BLE001 - the catalogue's own one-line error
        print(f"evidence: {exc}", file=sys.stderr)
        return 2
    if args.package:
        entries = [e for e in entries if e.package in args.package]
    if not entries:
        print("evidence: no evidence entries selected", file=sys.stderr)
        return 2
    mirrors = {}
    for m in args.mirror:
        repo, _, gd = m.partition("=")
        mirrors[repo] = Path(gd)
    run = Run(args.cache, mirrors=mirrors)
    new = evaluate(entries, run, lambda s: print(s, file=sys.stderr))
    bad = 0
    from doctor.rules.loader import load_catalogue

    floors = load_catalogue(use_cache=False).floors
    for e in entries:
        rec = new["records"].get(f"{e.rule}#{e.index}")
        if rec is None:
            print(f"SKIPPED  {e.rule}#{e.index} {e.package}: its releases could not be read")
            continue
        v = judge(e.spec, rec, floors)
        tag = "ok" if v.ok else ("INFERRED" if e.inferred else "DIFFERS")
        bad += 0 if v.ok or e.inferred else 1
        print(f"{tag:8} {e.rule}#{e.index} {e.package} range {e.spec['range']!r} derived {v.derived!r}" + (f"  ({v.problem})" if v.problem else ""))
    for f in run.failures:
        print(f"download: {f}", file=sys.stderr)
    if not args.check:
        old = json.loads(args.lock.read_text()) if args.lock.is_file() else {}
        live = {f"{e.rule}#{e.index}" for e in catalogue_entries()}
        lock = merge_lock(old, new, keep=lambda k: k in live)  # records not re-derived this run are kept
        args.lock.write_text(dump_lock(lock), encoding="utf-8")
        print(f"wrote {args.lock.relative_to(ROOT) if args.lock.is_relative_to(ROOT) else args.lock}", file=sys.stderr)
    if run.failures:
        return 2
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
