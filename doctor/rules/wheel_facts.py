"""Facts derived from the release catalogue about the installed (or assumed) flash-attn version:
whether its release published a prebuilt wheel for this torch, CUDA, C++ ABI and Python, and
whether that wheel is one known not to import. They let rules judge a static snapshot (no
import was tried, the C++ ABI not probed) from the catalogue alone.

    wheels.flash-attn.wheel         True / False: a prebuilt wheel exists for this environment
                                    (unknown for a release the catalogue has no matrix for)
    wheels.flash-attn.needs_build   no wheel, and the compiled extension is not known to import
                                    (so `pip install` compiles it: an hour or more)
    wheels.flash-attn.broken_wheel  the wheel for this environment is listed as broken and the
                                    import was not probed (a probe that tried it reports it)
    wheels.flash-attn.why           the catalogue's reason, for messages
    wheels.flash-attn.build         the source-build command
"""

from __future__ import annotations

from typing import Any, Optional

from packaging.version import Version

from doctor.model import Facts

# the first flash-attn release whose setup.py fetches a prebuilt wheel from GitHub Releases
NO_WHEEL_DOWNLOAD_BEFORE = Version("2.0.6")
NAMES = ("wheel", "needs_build", "broken_wheel", "why", "build")
PATHS = tuple(f"wheels.flash-attn.{n}" for n in NAMES)


def _import_known_ok(facts: Facts) -> bool:
    st = facts.imports.get("flash_attn") or facts.imports.get("flash_attn_2_cuda")
    # `--assume flash-attn==X` marks the import ok "assumed: ..."; that says nothing about
    # whether a wheel exists for X, so it does not count as a probed import.
    return st is not None and st.status == "ok" and not (st.cause or "").startswith("assumed")


def _import_probed(facts: Facts) -> bool:
    st = facts.imports.get("flash_attn") or facts.imports.get("flash_attn_2_cuda")
    return st is not None and st.status in ("ok", "error") and not (st.cause or "").startswith("assumed")


def resolve_wheel_fact(name: str, facts: Facts) -> "tuple[bool, Any, str]":
    """(known, value, reason-if-unknown) of wheels.flash-attn.<name>."""
    from doctor.releases.wheels import build_command, choose_wheel, listed_broken, wheel_target
    from doctor.releases.catalogue import load_release_catalogue
    from doctor.versions import parse_version

    if name not in NAMES:
        return False, None, f"unknown wheel fact {name!r}"
    if facts.packages is None:
        return False, None, "installed packages were not probed"
    raw: Optional[str] = facts.packages.get("flash-attn")
    if raw is None:
        return True, None, ""  # flash-attn is not installed: no wheel question
    pv = parse_version(raw)
    version = pv.public if pv is not None else raw
    target = wheel_target(facts)
    if target is None:
        return False, None, "torch version unknown"
    if name == "build":
        return True, build_command(version), ""
    if pv is not None and pv < NO_WHEEL_DOWNLOAD_BEFORE:
        # setup.py of these releases has no wheel download (sdists 0.2.0-2.0.5; 2.0.6 adds
        # BASE_WHEEL_URL and CachedWheelsCommand): pip install always compiles
        if name == "why":
            return True, f"flash-attn {version}'s setup.py downloads no prebuilt wheel (that came with 2.0.6)", ""
        if name == "wheel":
            return True, False, ""
        if name == "needs_build":
            return True, not _import_known_ok(facts), ""
    rel = load_release_catalogue()
    choice = choose_wheel(rel, version, target)
    if name == "why":
        # the notes end with how to build; rules say that themselves with wheels.flash-attn.build
        notes = [n.split("; no prebuilt wheel:")[0] for n in choice.notes if not n.startswith("install with --no-deps")]
        return True, "; ".join(notes) or "a prebuilt wheel exists", ""
    if name == "wheel":
        if version not in rel.flash_attn_wheels:
            # a release the catalogue has no build matrix for (one newer than it): whether a
            # wheel exists is not known, not "none"
            return False, None, f"flash-attn {version} is not in the wheel catalogue"
        return True, choice.available, ""
    if name == "needs_build":
        if version not in rel.flash_attn_wheels:
            return False, None, f"flash-attn {version} is not in the wheel catalogue"
        return True, (not choice.available) and not _import_known_ok(facts), ""
    # broken_wheel
    if _import_probed(facts):
        return True, False, ""
    if listed_broken(rel, version, target) is None:
        return True, False, ""
    if version not in rel.flash_attn_wheels:
        return False, None, f"flash-attn {version} is not in the wheel catalogue"
    # setup.py downloads the listed wheel only where the release published one for this torch's
    # CUDA major and CPython: a CUDA 11, ROCm or CPU torch gets none and compiles (needs_build)
    return True, choice.broken, ""
