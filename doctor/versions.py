"""Package names, versions, specifiers and pins: the one place the project reads them.

    canonical_name("Flash_Attn")            -> "flash-attn"   (PEP 503, as packaging does it)
    parse_version("2.3.0a0+6ddf5cf.nv24.04") -> Version, or None when it is no version at all
    version_matches("2.4.0+cu121", "<=2.4.0") -> True  (local labels ignored, NGC builds as releases)
    parse_pin("flash-attn==2.5.8")           -> Pin("flash-attn", "2.5.8")

Specifiers are validated with packaging's SpecifierSet when the catalogue loads
(`validate_spec`), and matched here by a small matcher that needs only packaging.version:
importing packaging.specifiers / packaging.utils costs 13-38 ms at every start, and the
static check must feel instant. tests/test_versions.py checks both against packaging.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Dict, Optional, Tuple

from packaging.version import InvalidVersion, Version

from doctor.errors import InputError
from doctor.model import Pin

_SEPARATORS = re.compile(r"[-_.]+")


def canonical_name(name: str) -> str:
    """PEP 503 normalised distribution name: packaging.utils.canonicalize_name without
    importing it (it pulls packaging.tags, ~38 ms)."""
    return _SEPARATORS.sub("-", name).lower()


@lru_cache(maxsize=4096)
def parse_version(text: str) -> Optional[Version]:
    """A PEP 440 version; a string that only starts with a release ("12.4.127 (driver)") is
    read as that release; None when there is no version in it at all."""
    try:
        return Version(str(text))
    except InvalidVersion:
        m = re.match(r"^\s*(\d+(?:\.\d+)*)", str(text))
        return Version(m.group(1)) if m else None


def version_key(text: str) -> Version:
    """A sort key for version strings: what parse_version reads, 0 for none at all."""
    return parse_version(text) or Version("0")


def is_version(text: str) -> bool:
    """True for a PEP 440 version, incl. local and NGC forms (2.3.0a0+6ddf5cf.nv24.04)."""
    try:
        Version(str(text))
    except InvalidVersion:
        return False
    return True


@lru_cache(maxsize=4096)
def release(text: str) -> Optional[Version]:
    """The release part only: 2.7.4.post1+cu12 -> 2.7.4."""
    v = parse_version(text)
    return None if v is None else Version(v.base_version)


_CLAUSE = re.compile(r"^\s*(~=|===|==|!=|<=|>=|<|>)\s*([0-9][0-9A-Za-z.+!*-]*)\s*$")


@lru_cache(maxsize=2048)
def parse_spec(text: str) -> Tuple[Tuple[str, str], ...]:
    """'>=2.6,<2.7' -> (('>=', '2.6'), ('<', '2.7'))."""
    out = []
    for clause in text.split(","):
        m = _CLAUSE.match(clause)
        if not m:
            raise ValueError(f"bad version specifier {text!r}")
        out.append((m.group(1), m.group(2)))
    return tuple(out)


def _clause(v: Version, op: str, target: str) -> bool:
    if target.endswith(".*"):  # ==2.6.* / !=2.6.*: prefix match on the release
        prefix = tuple(int(x) for x in target[:-2].split("."))
        hit = v.release[: len(prefix)] == prefix
        return hit if op == "==" else not hit
    t = Version(target)
    if op in ("==", "==="):
        return v == t
    if op == "!=":
        return v != t
    if op == "<":  # PEP 440: <2.6 does not take 2.6's own pre-releases (2.6.0.dev1)
        return v < t and not (v.is_prerelease and not t.is_prerelease and Version(v.base_version) == Version(t.base_version))
    if op == "<=":
        return v <= t
    if op == ">":  # PEP 440: >2.5.8 does not take 2.5.8's post-releases (2.5.8.post1)
        return v > t and not (v.is_postrelease and not t.is_postrelease and Version(v.base_version) == Version(t.base_version))
    if op == ">=":
        return v >= t
    # ~=X.Y(.Z): >= X.Y(.Z) and == X.*(.Y.*)
    prefix = t.release[:-1]
    return v >= t and v.release[: len(prefix)] == prefix


def _shipped_as_release(v: Version) -> bool:
    """A development pre-release with a build label, X.Y.Za0+label (NGC's 2.3.0a0+6ddf5cf.nv24.04,
    torch source builds): what was built and shipped as release X.Y.Z."""
    return bool(v.local) and v.pre == ("a", 0) and v.dev is None


def _labelled_build_of_release(v: Version) -> bool:
    """What `version_matches` compares as its release: X.Y.Za0+label (`_shipped_as_release`) and
    a labelled development snapshot (a nightly 2.6.0.dev20241112+cu124, a source build
    2.9.0.dev0+g1a2b3c), which PEP 440 would keep on neither side of X.Y.Z (not >=2.6, and not
    <2.6 either, since <2.6 skips 2.6's own pre-releases). `version_verdict` answers None for the
    snapshot where the two readings disagree; a labelled beta or rc stays that pre-release."""
    return _shipped_as_release(v) or (bool(v.local) and v.dev is not None and v.pre is None)


@lru_cache(maxsize=8192)
def version_matches(version: str, spec: str) -> bool:
    """PEP 440 match that ignores local labels (2.4.0+cu121 satisfies <=2.4.0) and lets
    pre-releases such as NGC's 2.3.0a0+6ddf5cf.nv24.04 match like their release."""
    v = parse_version(version)
    if v is None:
        return False
    # Drop the local label; an NGC-style pre-release with a local label (2.3.0a0+6ddf5cf.nv24.04)
    # is that release as shipped, so compare it as 2.3.0. Post releases (2.7.4.post1) stay. A
    # labelled beta or release candidate (flash-attn-3's 3.0.0b1+20250911.cu128torch280) is that
    # pre-release, not the release.
    public = Version(v.base_version) if _labelled_build_of_release(v) else Version(v.public)
    return all(_clause(public, op, target) for op, target in parse_spec(spec))


def version_verdict(version: str, spec: str) -> Optional[bool]:
    """`version_matches`, except for a build made before release X and named after it, where the
    answer depends on that (reading it as release X and as a build before X disagree): then None
    (whether it has the change made at X is not known). Such builds are development snapshots
    with a build label (2.9.0.dev0+g1a2b3c, a source build between two releases;
    2.6.0.dev20241112+cu124, a nightly), and alpha, beta and release-candidate pre-releases
    without one (5.0.0rc1, 3.0.0b2), which PEP 440 would keep on neither side of X, so that a
    rule bounded at X would stay silent on both sides. A spec that names a pre-release itself (>=0.9.2.dev0) is
    taken as written; an NGC-style pre-release with a local label (2.3.0a0+6ddf5cf.nv24.04) is
    that release as shipped (`version_matches`)."""
    v = parse_version(version)
    if v is None:
        return version_matches(version, spec)
    snapshot = v.dev is not None and bool(v.local)
    pre = v.pre is not None and not _shipped_as_release(v)  # a1 / b2 / rc1 (labelled or not); a bare .devN is a build of its own
    # (xformers publishes 0.0.35.dev1147 to PyPI; a source tree says 0.9.2.dev0 for months): as PEP 440
    if not (snapshot or pre):
        return version_matches(version, spec)
    clauses = parse_spec(spec)
    if any(not t.endswith(".*") and Version(t).is_prerelease for _, t in clauses):
        return version_matches(version, spec)
    as_release = all(_clause(Version(v.base_version), op, t) for op, t in clauses)
    before = Version(v.public)  # plain ordering: after every release below X, before X itself
    as_before = all(_plain(before, op, t) for op, t in clauses)
    return as_release if as_release == as_before else None


def version_plain(version: str, spec: str) -> bool:
    """`spec` as a framework's own version check reads it (transformers' require_version and
    packaging's comparison operators): plain ordering, so 0.18.0rc0 satisfies <0.18.0 and
    0.18.0+local does not."""
    v = parse_version(version)
    return v is not None and all(_plain(v, op, t) for op, t in parse_spec(spec))


def _plain(v: Version, op: str, target: str) -> bool:
    if target.endswith(".*") or op == "~=":
        return _clause(v, op, target)
    t = Version(target)
    return {"==": v == t, "===": v == t, "!=": v != t, "<": v < t, "<=": v <= t, ">": v > t, ">=": v >= t}[op]


def below_release(version: str, since: str) -> bool:
    """Whether `version` is older than the release `since`, by the same test a rule's
    `{package: P, version: "<since"}` makes (the coverage floor and TE-OLDER-THAN-COVERED agree)."""
    return version_matches(version, f"<{since}")


def validate_spec(text: str) -> Optional[str]:
    """None when `text` is a specifier both packaging and our matcher read; else why not."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(text)
        parse_spec(text)
    except (InvalidSpecifier, ValueError) as exc:
        return str(exc)
    return None


_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([0-9][^\s;]*)\s*$")


def parse_pin(text: str, *, what: str = "--assume") -> Pin:
    """'flash-attn==2.5.8' or 'transformer-engine[pytorch]==2.1.0' -> Pin; InputError otherwise."""
    m = _PIN.match(text)
    if not m or not is_version(m.group(3)):
        raise InputError(f"{what} {text!r}: expected NAME==VERSION", hint="e.g. --assume flash-attn==2.5.8")
    extras = tuple(sorted(e.strip().lower() for e in m.group(2)[1:-1].split(",") if e.strip())) if m.group(2) else ()
    return Pin(canonical_name(m.group(1)), m.group(3), extras)


def marker_environment(python: str, system: str, machine: str, extra: str = "", python_full: Optional[str] = None) -> Dict[str, str]:
    """The names a PEP 508 marker reads ("python_version < '3.13' and platform_machine == 'x86_64'"),
    for CPython `python` ("3.12") on `system` (linux | windows | darwin) and `machine` as the
    interpreter reports it. Shared by the offline resolver (doctor.fix.resolve) and the installed
    requirements check (doctor.rules.conditions.broken_requirements)."""
    platform_system = {"linux": "Linux", "windows": "Windows", "darwin": "Darwin"}.get(system, system)
    return {
        "python_version": python,
        "python_full_version": python_full or python + ".0",
        "sys_platform": {"Linux": "linux", "Windows": "win32", "Darwin": "darwin"}.get(platform_system, platform_system.lower()),
        "platform_system": platform_system,
        "platform_machine": machine,
        "os_name": "nt" if platform_system == "Windows" else "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": extra,
    }
