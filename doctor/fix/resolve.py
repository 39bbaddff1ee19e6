"""Does a plan install? A real resolver (resolvelib, the library pip's resolver is built on)
over the release catalogue's Requires-Dist, offline.

    resolve(rel, installed, pins, python)
        1. the plan's pins (with their extras) are the root requirements, as on
           `pip install "A[x]==1" "B==2"`; installed versions are preferred, as pip does;
        2. the installed set with the resolution applied is then checked the way pip checks
           after installing ("X requires Y, but you have Z which is incompatible"): every
           installed package's Requires-Dist against the final versions. Conflicts that were
           there before the plan are not the plan's.

An installed package at its installed version is held to the Requires-Dist read from its
own installed metadata (the probe's `requires`: the build that is really there, an axolotl
installed from source with its exact pins included). Other releases: torch's dependencies
are its exact pins on what it bundles (cuDNN, NCCL, Triton: torch.json); every other
package's are the Requires-Dist the catalogue read from PyPI (markers evaluated for Linux
x86_64 and the target Python), or, where not fetched, its curated `requires`. A package the
catalogue does not list is taken as installed, at the exact version a requirement names, or,
where a requirement needs more than the installed one, at the lowest release its lower bound
allows (pip installs that or newer: "datasets 3.0 or newer would be installed").

resolvelib is a small pure-Python library without dependencies (pip vendors it), and a
dependency of attn-doctor (pyproject.toml).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from packaging.markers import UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from doctor.releases.catalogue import ReleaseCatalogue, torch_bundle
from doctor.versions import marker_environment

import resolvelib as _rl


@dataclass(frozen=True)
class Req:
    name: str
    spec: SpecifierSet
    extras: FrozenSet[str] = frozenset()
    parent: str = ""  # "torch 2.6.0" or "" for the plan itself
    text: str = ""


@dataclass(frozen=True)
class Cand:
    name: str
    version: Version
    extras: FrozenSet[str] = frozenset()
    known: bool = True  # in the catalogue (its dependencies are known)


@dataclass(frozen=True)
class Conflict:
    """One complaint pip would make. `who` (at `who_version`; "" for the plan's own pins)
    requires `requirement` on `name`; `found` is the version of `name` that would be installed,
    or None when no set of versions satisfies everything (the resolution is impossible)."""

    who: str
    who_version: str
    name: str
    requirement: str  # as written, marker dropped
    found: Optional[str] = None
    note: str = ""  # a complaint that names no requirement (the resolver gave up)

    @property
    def subject(self) -> str:
        return f"{self.who} {self.who_version}" if self.who else "the plan"

    def __str__(self) -> str:
        if self.note:
            return self.note
        if self.found is None:
            return f"{self.subject} requires {self.requirement}"
        return f"{self.subject} requires {self.requirement}, but {self.name} {self.found} would be installed"


@dataclass(frozen=True)
class Resolution:
    ok: bool
    versions: Mapping[str, str] = field(default_factory=dict)  # what pip installs or keeps, by name
    extras: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)
    conflicts: Tuple[Conflict, ...] = ()  # pip's complaints, new with this plan
    changed: Tuple[str, ...] = ()  # installed packages whose version the plan changes (pins and what they pull in)
    pulled: Tuple[str, ...] = ()  # packages the pins bring in or move besides themselves (not through an unchanged package)
    # installed packages the pins move besides themselves, through a pin or another such move
    # only (not through a package the plan newly brings in: where a snapshot lists only some
    # packages, as a rule's test case does, that one may already be installed at a fitting version)
    forced: Tuple[str, ...] = ()


@lru_cache(maxsize=16384)
def _ver(text: str) -> Optional[Version]:
    try:
        return Version(text)
    except (InvalidVersion, TypeError):
        return None


class _Meta:
    """Catalogue lookups for the resolver: versions and dependencies per package."""

    def __init__(
        self,
        rel: ReleaseCatalogue,
        installed: Mapping[str, str],
        python: Optional[str],
        cuda_major: Optional[int] = None,
        installed_requires: Optional[Mapping[str, Sequence[str]]] = None,
        machine: str = "x86_64",
    ) -> None:
        self.rel = rel
        self.machine = machine
        self.cuda_major = cuda_major
        self.installed: Dict[str, str] = {str(canonicalize_name(k)): v for k, v in installed.items()}
        # None: not probed (an older snapshot), the catalogue stands in for installed releases too
        self.installed_requires = None if installed_requires is None else {str(canonicalize_name(k)): tuple(v) for k, v in installed_requires.items()}
        self.python = python or "3.10"
        self.floors: Set[Tuple[str, Version]] = set()  # (name, version) only known as "this or newer"
        self._absent: Optional[Dict[str, List[SpecifierSet]]] = None

    def absent_constraints(self, name: str) -> List[SpecifierSet]:
        """What the installed packages require of `name` where the package list lacks it (a
        hand-written snapshot or a rule case names only some packages): a real environment has
        it at a version they accept, so a plan that pulls it in takes one of those, not
        necessarily the newest (which could drag another installed package along)."""
        if self._absent is None:
            self._absent = {}
            for n, v in self.installed.items():
                have = _ver(v)
                if have is None:
                    continue
                for req in self.requirements(n, Version(have.public), frozenset()):
                    if req.name not in self.installed:
                        self._absent.setdefault(req.name, []).append(req.spec)
        return self._absent.get(name, [])

    def env(self, extra: str = "") -> Dict[str, str]:
        return marker_environment(self.python, "linux", self.machine, extra)

    def known(self, name: str) -> bool:
        return name == "torch" or self.rel.knows(name)

    def versions(self, name: str) -> List[Version]:
        if name == "torch":
            texts = [r.version for r in self.rel.torch]
        else:
            texts = list(self.rel.versions(name))
        out = [v for v in (_ver(t) for t in texts) if v is not None]
        have = _ver(self.installed.get(name, ""))
        if have is not None:
            have = Version(have.public)
            if have not in out:
                out.append(have)
        return out

    def requirements(self, name: str, version: Version, extras: FrozenSet[str]) -> List[Req]:
        """Requires-Dist of one release with markers evaluated; for an extras candidate, the
        extra's own lines only (plus the base release itself)."""
        parent = f"{name} {version}"
        lines: Sequence[str]
        have = _ver(self.installed.get(name, ""))
        if self.installed_requires is not None and have is not None and Version(have.public) == version and not extras:
            lines = self.installed_requires.get(name, ())
        elif name == "torch":
            b = torch_bundle(str(version))
            lines = b.requires_dist if b is not None and b.version == version.base_version else ()
        else:
            pkg = self.rel.packages.get(name)
            r = pkg.get(str(version)) if pkg else None
            if r is None:
                lines = ()
            elif r.requires_dist is not None:
                lines = r.requires_dist
            else:
                lines = [f"{k}{v}" for k, v in r.requires.items()]
        out: List[Req] = []
        for line in lines:
            req = _requirement(line)
            if req is None:
                continue
            if extras:
                wanted = False
                if req.marker is not None:
                    for e in extras:
                        try:
                            if req.marker.evaluate(self.env(e)) and not req.marker.evaluate(self.env("")):
                                wanted = True
                        except UndefinedEnvironmentName:
                            pass
                if not wanted:
                    continue
            elif req.marker is not None:
                try:
                    if not req.marker.evaluate(self.env("")):
                        continue
                except UndefinedEnvironmentName:
                    continue
            dep = str(canonicalize_name(req.name))
            if name == "transformer-engine-torch" and dep.startswith("transformer-engine-cu") and self.cuda_major:
                # the sdist's PKG-INFO names the publisher's CUDA core; built here, its setup.py
                # asks for the core of the CUDA it builds with (torch's)
                dep = f"transformer-engine-cu{self.cuda_major}"
                line = line.replace(req.name, dep)
            exact = any(s.operator in ("==", "===") for s in req.specifier)
            if not self.known(dep) and dep not in self.installed and not exact:
                continue  # outside what the catalogue can decide
            out.append(Req(dep, req.specifier, frozenset(str(canonicalize_name(e)) for e in req.extras), parent, line))
        if extras:
            out.append(Req(name, SpecifierSet(f"=={version}"), frozenset(), parent, f"{name}=={version}"))
        return out


@lru_cache(maxsize=8192)
def _requirement(line: str) -> Optional[Requirement]:
    """A Requires-Dist line, parsed once per process (read only: the resolver re-reads the same
    releases' lines for every fix it checks)."""
    try:
        return Requirement(line)
    except InvalidRequirement:
        return None


def _id(x: Any) -> str:
    return str(x.name + (f"[{','.join(sorted(x.extras))}]" if x.extras else ""))


class _Provider(_rl.AbstractProvider):
    def __init__(self, meta: _Meta) -> None:
        self.meta = meta

    def identify(self, requirement_or_candidate: Any) -> str:
        x = requirement_or_candidate
        return x.name + (f"[{','.join(sorted(x.extras))}]" if x.extras else "")

    def get_preference(self, identifier: str, resolutions: Any, candidates: Any, information: Any, *args: Any, **kwargs: Any) -> Any:
        return sum(1 for _ in candidates[identifier])

    def find_matches(self, identifier: str, requirements: Any, incompatibilities: Any) -> Iterable[Cand]:
        reqs = list(requirements[identifier])
        bad = {c.version for c in incompatibilities[identifier]}
        name = reqs[0].name if reqs else identifier.split("[")[0]
        extras = frozenset().union(*(r.extras for r in reqs)) if reqs else frozenset()
        pool = self.meta.versions(name)
        known = self.meta.known(name)
        if not known:
            for r in reqs:
                for s in r.spec:
                    if s.operator in ("==", "===") and "*" not in s.version and _ver(s.version) is not None:
                        pool.append(Version(s.version))
                    elif s.operator in (">=", "~=", ">") and _ver(s.version) is not None:
                        # no release list: the lowest the bound allows stands for "this or newer"
                        low = Version(s.version + ".post0") if s.operator == ">" else Version(s.version)
                        pool.append(low)
                        self.meta.floors.add((name, low))
        have = _ver(self.meta.installed.get(name, ""))
        have_pub = Version(have.public) if have is not None else None

        def ok(v: Version) -> bool:
            if v in bad:
                return False
            for r in reqs:
                exact = any(s.operator in ("==", "===") for s in r.spec)
                if not r.spec.contains(v, prereleases=exact or (have_pub == v)):
                    return False
            return True

        fits = sorted({v for v in pool if ok(v)}, key=lambda v: (v != have_pub, [-x for x in v.release], v.is_prerelease))
        if have is None:
            held = [v for v in fits if all(spec.contains(v, prereleases=True) for spec in self.meta.absent_constraints(name))]
            fits = held or fits
        fits.sort(key=lambda v: (v != have_pub, v.is_prerelease))
        return [Cand(name, v, extras, known) for v in fits]

    def is_satisfied_by(self, requirement: Req, candidate: Cand) -> bool:
        exact = any(s.operator in ("==", "===") for s in requirement.spec)
        return bool(requirement.spec.contains(candidate.version, prereleases=True if exact else None)) or (
            not exact and requirement.spec.contains(candidate.version, prereleases=True)
        )

    def get_dependencies(self, candidate: Cand) -> Iterator[Req]:
        return iter(self.meta.requirements(candidate.name, candidate.version, candidate.extras))


_NEWEST = Version("999999")  # above any release: what an uncapped requirement allows


def _pip_check(meta: _Meta, final: Mapping[str, str]) -> List[Conflict]:
    """What `pip check` would say about this set (one complaint per broken requirement)."""
    out: List[Conflict] = []
    for name, version in sorted(final.items()):
        v = _ver(version)
        if v is None:
            continue
        v = Version(v.public)
        for req in meta.requirements(name, v, frozenset()):
            have = final.get(req.name)
            if have is None or _ver(have) is None:
                continue
            hv = Version(Version(have).public)
            floor = (req.name, hv) in meta.floors and have != meta.installed.get(req.name)
            # an unlisted package a pin moves: pip takes its newest release, which no cap holds
            # (a requirement with an upper bound is broken by it as soon as it is above the floor)
            if not req.spec.contains(hv, prereleases=True) or (floor and not req.spec.contains(_NEWEST, prereleases=True)):
                found = f"{have} or newer (pip takes the newest)" if floor else have
                out.append(Conflict(name, version, req.name, req.text.split(";")[0].strip(), found))
    return out


def resolve(
    rel: ReleaseCatalogue,
    installed: Mapping[str, str],
    pins: Sequence[Tuple[str, str, Tuple[str, ...]]],
    python: Optional[str] = None,
    cuda_major: Optional[int] = None,
    installed_requires: Optional[Mapping[str, Sequence[str]]] = None,
    machine: str = "x86_64",
) -> Resolution:
    """Resolve the plan's pins (name, version, extras) against the catalogue, then check the
    whole installed set with the result applied (see the module doc)."""
    meta = _Meta(rel, installed, python, cuda_major, installed_requires, machine)
    roots = [
        Req(str(canonicalize_name(n)), SpecifierSet(f"=={v}"), frozenset(str(canonicalize_name(e)) for e in extras), "", f"{n}=={v}")
        for n, v, extras in pins
    ]
    if not roots:
        return Resolution(ok=True)
    resolver = _rl.Resolver(_Provider(meta), _rl.BaseReporter())
    try:
        result = resolver.resolve(roots, max_rounds=500)
    except _rl.ResolutionImpossible as exc:
        causes: List[Conflict] = []
        for cause in exc.causes:
            p = cause.parent
            causes.append(Conflict(p.name if p is not None else "", str(p.version) if p is not None else "", cause.requirement.name, cause.requirement.text.split(";")[0].strip()))
        return Resolution(ok=False, conflicts=tuple(dict.fromkeys(causes)) or (Conflict("", "", "", "", note="no set of versions satisfies the plan"),))
    except _rl.ResolutionTooDeep:
        return Resolution(ok=False, conflicts=(Conflict("", "", "", "", note="the resolver gave up (too many rounds)"),))
    versions: Dict[str, str] = {}
    extras: Dict[str, Tuple[str, ...]] = {}
    for key, cand in result.mapping.items():
        versions[cand.name] = str(cand.version)
        if cand.extras:
            extras[cand.name] = tuple(sorted(set(extras.get(cand.name, ())) | set(cand.extras)))
    inst = meta.installed
    final = dict(inst)
    changed = []
    for n, v in versions.items():
        have = _ver(inst.get(n, ""))
        if have is None or Version(have.public) != Version(v):
            final[n] = v
        if have is not None and Version(have.public) != Version(v):
            changed.append(n)
    # what the pins pull in: walk the resolution graph from the roots, not through a package
    # that stays as installed (its dependencies are already there)
    root_ids = {_id(r) for r in roots}
    pulled: List[str] = []
    todo = list(root_ids)
    seen = set(todo)
    while todo:
        key = todo.pop()
        cand = result.mapping.get(key)
        if cand is None:
            continue
        have = _ver(inst.get(cand.name, ""))
        if key not in root_ids and have is not None and Version(have.public) == cand.version:
            continue
        if key not in root_ids and cand.name not in {r.name for r in roots}:
            pulled.append(cand.name)
        for child in result.graph.iter_children(key):
            if child is not None and child not in seen:
                seen.add(child)
                todo.append(child)
    # an installed package is forced to move where a pin, or a package already forced to move,
    # requires what its installed version does not satisfy
    root_names = {r.name for r in roots}
    movers = set(root_names)
    forced: List[str] = []
    grew = True
    while grew:
        grew = False
        for key, crit in result.criteria.items():
            cand = result.mapping.get(key)
            if cand is None or cand.name not in changed or cand.name in root_names or cand.name in forced:
                continue
            have = _ver(inst.get(cand.name, ""))
            if have is None:
                continue
            hv = Version(have.public)
            for info in crit.information:
                who = info.parent.name if info.parent is not None else None
                if who is not None and who in movers and not info.requirement.spec.contains(hv, prereleases=True):
                    forced.append(cand.name)
                    movers.add(cand.name)
                    grew = True
                    break
    before = set(_pip_check(meta, inst))
    # a requirement of an installed package on one that was not installed at all was already
    # unmet (pip check: "which is not installed"): a partial package list, not the plan's doing
    new = [c for c in _pip_check(meta, final) if c not in before and not (c.name not in inst and c.who in inst)]
    return Resolution(ok=not new, versions=versions, extras=extras, conflicts=tuple(new), changed=tuple(changed), pulled=tuple(sorted(set(pulled))), forced=tuple(sorted(set(forced))))
