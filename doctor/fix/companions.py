"""torch's companion packages: a fix that moves torch moves them too.

torchvision, torchaudio and xformers (up to 0.0.30) wheels pin the torch they were built with
exactly (Requires-Dist `torch==2.7.0` for torchvision 0.22.0, read from each release's wheel
metadata into rules/releases/torchvision.json, torchaudio.json and xformers.json). `pip install torch==X` on its own leaves an
installed companion behind: pip reports "torchvision 0.22.0 requires torch==2.7.0, but you have
torch 2.9.1 which is incompatible", and `import torchvision` then fails on undefined symbols of
the old torch. So wherever the doctor offers or plans a torch move, each installed companion that
does not accept the new torch is pinned to the release built for it (torchvision and torchaudio in
torch's own pip command, doctor.fix.install), and where PyPI has none the user is told so.
"""

from __future__ import annotations

from dataclasses import replace
from typing import List, Mapping, Optional, Tuple

from doctor.model import Fix, Pin
from doctor.releases.catalogue import ReleaseCatalogue
from doctor.versions import parse_version

TORCH_COMPANIONS = ("torchvision", "torchaudio", "xformers")
# the ones PyTorch's CUDA indexes carry: installed in torch's own pip command (doctor.fix.install);
# xformers, not on every index, gets its own step after torch
IN_TORCH_COMMAND = ("torchvision", "torchaudio")


def _torch_spec(requires_dist: Optional[Tuple[str, ...]]) -> Optional[str]:
    """The specifier a release puts on torch ('==2.7.0'), '' when it has no torch requirement,
    None when its metadata is not in the catalogue."""
    from packaging.requirements import InvalidRequirement, Requirement

    if requires_dist is None:
        return None
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower() == "torch" and (req.marker is None or req.marker.evaluate({"extra": ""})):
            return str(req.specifier)
    return ""


def _built_for(name: str, version: str, requires_dist: Optional[Tuple[str, ...]]) -> Optional[str]:
    """The torch a companion release is built for, as a specifier: its Requires-Dist on torch;
    for a torchaudio release that names no torch (2.11 on), the torch of its own number (torchaudio
    X.Y.Z is released with torch X.Y.Z); None where not known."""
    spec = _torch_spec(requires_dist)
    if spec:
        return spec
    if spec == "" and name == "torchaudio":
        v = parse_version(version)
        return f"=={v.base_version}" if v is not None else None
    return None


def _admits(spec: str, torch_version: str) -> bool:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    v = parse_version(torch_version)
    if v is None:
        return True
    try:
        return SpecifierSet(spec).contains(v.public, prereleases=True)
    except InvalidSpecifier:
        return True


def torch_companions(rel: ReleaseCatalogue, installed: Mapping[str, str], torch_version: str) -> Tuple[List[Pin], List[str]]:
    """(pins, advice) for moving torch to `torch_version`: for each installed companion whose
    release does not accept that torch, the release built for it (an exact `torch==` pin on it
    first, then the newest that accepts it); advice where PyPI has none. A companion whose
    release the catalogue does not know, or that puts no bound on torch, is left alone."""
    pins: List[Pin] = []
    advice: List[str] = []
    for name in TORCH_COMPANIONS:
        have = installed.get(name)
        pkg = rel.packages.get(name)
        hv = parse_version(have) if have else None
        if hv is None or pkg is None:
            continue
        current = pkg.get(hv.public) or pkg.get(hv.base_version)
        spec = _built_for(name, current.version, current.requires_dist) if current is not None else None
        if not spec or _admits(spec, torch_version):
            continue
        fits = []
        for r in pkg.releases:
            rv = parse_version(r.version)
            s = _built_for(name, r.version, r.requires_dist)
            if rv is None or rv.is_prerelease or not s or not _admits(s, torch_version):
                continue
            fits.append((s.startswith("=="), rv, r.version))
        if fits:
            pins.append(Pin(name, max(fits)[2]))
        else:
            advice.append(
                f"{name} {have} requires torch{spec} and PyPI has no {name} release for torch {torch_version}: "
                f"uninstall {name} or build it from source against the new torch"
            )
    return pins, advice


def with_torch_companions(fix: Fix, installed: Mapping[str, str], rel: Optional[ReleaseCatalogue] = None) -> Fix:
    """The fix with the companion pins its torch pin needs (see the module doc); unchanged when
    it pins no torch or nothing installed depends on the torch it leaves."""
    torch_pin = next((p for p in fix.pins if p.name == "torch"), None)
    if torch_pin is None or not any(n in installed for n in TORCH_COMPANIONS):
        return fix
    if rel is None:
        from doctor.releases.catalogue import load_release_catalogue

        rel = load_release_catalogue()
    pinned = {p.name for p in fix.pins}
    pins, advice = torch_companions(rel, {k: v for k, v in installed.items() if k not in pinned}, torch_pin.version)
    if not pins and not advice:
        return fix
    words = ", ".join(f"{p.name} {p.version}" for p in pins)
    description = f"{fix.description} (with {words}, built for torch {torch_pin.version})" if pins else fix.description
    return replace(fix, pins=fix.pins + tuple(pins), description=description, config=fix.config + tuple(a for a in advice if a not in fix.config))
