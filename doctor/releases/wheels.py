"""Which prebuilt flash-attn wheel fits a torch build, or why none does.

PyPI ships flash-attn as an sdist only; its setup.py downloads a wheel from GitHub Releases
named after the *installed torch*:

    flash_attn-{ver}+cu{CUDA}torch{major.minor}cxx11abi{TRUE|FALSE}-cp{py}-cp{py}-linux_x86_64.whl

How `{CUDA}` is spelled changed over time (setup.py `get_wheel_url` at each tag):

    ver < 2.2.3.post2          torch.version.cuda major+minor          cu118, cu121
    2.2.3.post2 ... 2.3.1      as above, but torch 2.1 always cu122
    2.3.1.post1 ... 2.3.5      as above, but torch 2.1 with CUDA 12 cu122
    2.3.6 ... 2.6.0.post1      CUDA 11 -> cu118, CUDA 12 -> cu122
    2.6.1 ... 2.6.3            CUDA 11 -> cu118, CUDA 12 -> cu123
    2.7.0 and later            the major only: cu11, cu12

A wheel exists when the release's CI matrix (rules/releases/flash-attn-wheels.json) built that
torch line with a toolkit of that spelling, for that CPython and C++ ABI. Sources:
https://github.com/Dao-AILab/flash-attention/blob/v2.8.3/setup.py and publish.yml per tag;
a CUDA minor mismatch is fine, a torch minor mismatch is not (Dao-AILab/flash-attention#1292).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from doctor.model import Facts
from doctor.releases.catalogue import BrokenWheel, FlashAttnBuild, ReleaseCatalogue, torch_bundle
from packaging.version import Version

from doctor.versions import parse_version, version_key, version_matches

RELEASES_URL = "https://github.com/Dao-AILab/flash-attention/releases/download"


@dataclass(frozen=True)
class WheelTarget:
    """The environment a flash-attn wheel must fit."""

    torch: str  # "2.4.1"
    cuda: Optional[str]  # torch.version.cuda: "12.1"; None for CPU/ROCm builds
    cxx11_abi: Optional[bool]
    python: Optional[str]  # "3.10"
    assumed: Tuple[str, ...] = ()  # what was filled in from the catalogue, not probed
    hip: Optional[str] = None  # torch.version.hip of a probed ROCm build (never for a moved torch)

    @property
    def torch_mm(self) -> str:
        v = parse_version(self.torch)
        return f"{v.major}.{v.minor}" if v else self.torch

    @property
    def cp(self) -> str:
        return "cp" + self.python.replace(".", "") if self.python else "cp{XY}"


@dataclass(frozen=True)
class WheelChoice:
    version: str
    available: bool
    filename: Optional[str] = None
    url: Optional[str] = None
    notes: Tuple[str, ...] = ()
    build: str = ""  # how to build from source when no wheel fits
    broken: bool = False  # a wheel was published for this target but is listed as not importing
    build_fails: Optional[str] = None  # why the source build cannot compile against this torch

    @property
    def pip_command(self) -> str:
        if self.available and self.url and "{XY}" not in self.url:
            return f"pip install --no-deps {self.url}"
        return self.build


def _mm(version: str) -> str:
    v = parse_version(version)
    return f"{v.major}.{v.minor}" if v else version


def cuda_tag(fa_version: str, torch_mm: str, torch_cuda: str) -> str:
    """The `cu…` part setup.py of this flash-attn release asks for (see the module docstring)."""
    v = parse_version(fa_version)
    cu = parse_version(torch_cuda)
    if v is None or cu is None:
        return ""
    major, minor = cu.major, cu.minor if len(cu.release) > 1 else 0
    if v >= Version("2.7.0"):
        return str(major)
    if v >= Version("2.6.1"):
        return "118" if major == 11 else "123"
    if v >= Version("2.3.6"):
        return "118" if major == 11 else "122"
    if v >= Version("2.3.1.post1") and torch_mm == "2.1" and major == 12:
        return "122"
    if Version("2.2.3.post2") <= v < Version("2.3.1.post1") and torch_mm == "2.1":
        return "122"
    return f"{major}{minor}"


def _ci_tag(fa_version: str, ci_cuda: str) -> str:
    """How the release CI spelled the toolkit it built with in the asset name."""
    v = parse_version(fa_version)
    cu = parse_version(ci_cuda)
    if v is None or cu is None:
        return ""
    if v >= Version("2.7.0"):
        return str(cu.major)
    return f"{cu.major}{cu.minor}"


def wheel_target(facts: Facts, torch_version: Optional[str] = None) -> Optional[WheelTarget]:
    """The torch build a flash-attn wheel must match: the probed one, or (when the plan moves
    torch, or a fact was not probed) the default PyPI wheel of that torch release."""
    assumed = []
    version = torch_version or facts.torch.version or (facts.packages or {}).get("torch")
    if not version:
        return None
    bundle = torch_bundle(version)
    moved = torch_version is not None and torch_version != facts.torch.version
    cuda = None if moved else facts.torch.cuda
    cpu_build = not moved and ("+cpu" in version or bool(facts.torch.hip))
    if cuda is None and not cpu_build:
        cuda = bundle.cuda if bundle else None
        if cuda:
            assumed.append(f"CUDA {cuda} (the default PyPI build of torch {version})")
    abi = None if moved else facts.torch.cxx11_abi
    if abi is None and cuda is not None and _mm(version) == "2.6" and _mm(cuda) == "12.6":
        # torch 2.6's CUDA 12.6 builds (download.pytorch.org) are the one 2.6 variant built
        # with the new C++ ABI (pytorch#142064: manylinux 2.28 / cxx11-abi for 12.6 only);
        # PyPI's 2.6 wheels (CUDA 12.4) keep the old one
        abi = True
        assumed.append("C++ ABI TRUE (torch 2.6's CUDA 12.6 builds)")
    if abi is None and bundle is not None and bundle.cxx11_abi is not None:
        abi = bundle.cxx11_abi
        assumed.append(f"C++ ABI {'TRUE' if abi else 'FALSE'} (PyPI's torch {_mm(version)} wheels)")
    py = None
    if facts.python.version:
        pv = parse_version(facts.python.version)
        py = f"{pv.major}.{pv.minor}" if pv else None
    hip = None if moved else (facts.torch.hip or None)
    return WheelTarget(torch=version, cuda=cuda, cxx11_abi=abi, python=py, assumed=tuple(assumed), hip=hip)


def build_command(version: str) -> str:
    return (
        f"MAX_JOBS=4 FLASH_ATTENTION_FORCE_BUILD=TRUE pip install flash-attn=={version} --no-build-isolation"
    )


def listed_broken(rel: ReleaseCatalogue, version: str, target: WheelTarget) -> Optional[BrokenWheel]:
    """The catalogue's entry saying flash-attn `version`'s published wheel for this torch line
    (and C++ ABI) does not import, if any."""
    return next(
        (b for b in rel.broken_wheels
         if b.torch == target.torch_mm and version_matches(version, b.flash_attn) and b.cxx11_abi in (None, target.cxx11_abi)),
        None,
    )


# torch 2.14's headers stop any compile below C++20 outside MSVC (torch 2.14.0 include/ATen/ATen.h:4-5,
# torch/all.h:4-5; 2.13's ask for C++17), and every flash-attn setup.py up to 2.8.3.post2 compiles with
# -std=c++17 (v2.8.2 setup.py:201, :220, :408): a source build against torch >= 2.14 on Linux fails at
# its first file (sample 40 row 25, deep-8: reproduced with g++ against the 2.14.0 headers)
CXX20_TORCH = Version("2.14")


def source_build_fails(version: str, target: WheelTarget) -> Optional[str]:
    """Why building flash-attn `version` from source against `target`'s torch fails, or None."""
    tv = parse_version(target.torch)
    fv = parse_version(version)
    if tv is None or fv is None or Version(tv.base_version) < CXX20_TORCH or fv.major >= 3:
        return None
    return (
        f"flash-attn {version}'s setup.py compiles with -std=c++17 and torch {target.torch}'s headers "
        "require C++20 (ATen.h stops the compile): this build fails unless its flags are changed"
    )


def flash_attn_unbuildable(rel: ReleaseCatalogue, facts: Facts, pins: "Mapping[str, str]") -> Optional[str]:
    """Why the flash-attn that installing `pins` over `facts` needs (a pinned release, or the
    installed one rebuilt for a new torch line) can neither come from a prebuilt wheel nor be
    compiled against the torch it runs with (source_build_fails), or None. The fix planner refuses
    such a plan and the fix re-check counts such a pin as not installable."""
    torch0 = facts.torch.version or (facts.packages or {}).get("torch")
    new_torch = pins.get("torch")
    moved = new_torch is not None and _mm(new_torch) != _mm(torch0 or "")
    have = parse_version((facts.packages or {}).get("flash-attn") or "")
    want = parse_version(pins.get("flash-attn") or "")
    if want is None:
        if not moved or have is None:
            return None
        want = have
    elif not moved and have is not None and have.public == want.public:
        return None  # nothing to install
    target = wheel_target(facts, new_torch)
    if target is None:
        return None
    choice = choose_wheel(rel, want.public, target)
    if choice.available or not choice.build_fails:
        return None
    return f"flash-attn=={want.public} has no prebuilt wheel for torch {target.torch} and cannot be built against it ({choice.build_fails})"


# The GPUs flash-attn's own run-time check admits (mha_fwd/mha_bwd in csrc/flash_attn at each tag):
#   0.2.x          fmha_api.cpp   TORCH_CHECK(is_sm8x || is_sm75)            sm75, sm80-sm89
#   1.0.0-1.0.9    fmha_api.cpp   TORCH_CHECK(is_sm90 || is_sm8x || is_sm75)  sm75, sm80-sm89, sm90
#   2.0.0-2.7.2.post1 flash_api.cpp TORCH_CHECK(is_sm90 || is_sm8x, ...)     sm80-sm89, sm90
#   2.7.3 and later   flash_api.cpp TORCH_CHECK(cc_major >= 8, ...)         sm80 and newer
# (whether a build then carries code for an sm100+ GPU is a question of the wheel, read by the
# rules' fa2_build_lacks_blackwell_kernel; this table is only the check every call runs first).
_FA_ARCH_CHECK = (
    ("<1.0", lambda sm: sm == 75 or 80 <= sm < 90, "sm75 and sm80-sm89"),
    (">=1.0,<2.0", lambda sm: sm in (75, 90) or 80 <= sm < 90, "sm75, sm80-sm89 and sm90"),
    (">=2.0,<2.7.3", lambda sm: sm == 90 or 80 <= sm < 90, "sm80-sm89 and sm90"),
    (">=2.7.3", lambda sm: sm >= 80, "sm80 and newer"),
)


# flash-attn on ROCm (a HIP torch): setup.py builds for ROCm from 2.6.2 on (IS_HIP_EXTENSION; 2.6.1
# and older compile CUDA sources only), with composable_kernel (CK) as the default backend, which
# v2.6.2-v2.8.3 README.md gives as ROCm 6.0+ and MI200 or MI300 GPUs only (setup.py allowed_archs:
# gfx90a, gfx940-942; gfx950 from 2.8.0). HIP reports gfx90a as 9.0, gfx94x as 9.4, gfx950 as 9.5,
# and also 9.0 for the older gfx900/gfx906/gfx908 (MI25, MI50/MI60, MI100, Radeon VII), told apart
# by name as the catalogue's amd_gfx9_before_gfx90a condition does. The Triton backend
# (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE at build and run time) has other limits: not judged.
_FA_ROCM_FIRST = "2.6.2"
_AMD_BEFORE_GFX90A = re.compile(r"(?i)\bMI(25|50|60|100)\b|Radeon (Pro )?VII|\bVega\b")


def _ck_admits(sm: int, name: str, fa: Version) -> bool:
    if sm == 90:
        return not _AMD_BEFORE_GFX90A.search(name or "")
    return sm == 94 or (sm == 95 and fa >= Version("2.8.0"))


def _no_rocm_build(want: Version) -> Optional[str]:
    """Why a release has no ROCm build at all (setup.py compiles CUDA sources only before 2.6.2)."""
    if want < Version(_FA_ROCM_FIRST):
        return f"flash-attn=={want.public} has no ROCm build (its setup.py compiles for ROCm from {_FA_ROCM_FIRST} on)"
    return None


def _rocm_refuses(facts: Facts, want: Version) -> Optional[str]:
    # flash-attn compares the exact text (v2.8.3 setup.py:65, flash_attn_interface.py:11)
    if (facts.env or {}).get("FLASH_ATTENTION_TRITON_AMD_ENABLE", "") == "TRUE":
        return None
    no_rocm = _no_rocm_build(want)
    if no_rocm:
        return no_rocm
    hip = parse_version(facts.torch.hip or "")
    if hip is not None and hip < Version("6.0"):
        return f"flash-attn=={want.public}'s ROCm build needs ROCm 6.0 or newer (this torch: ROCm {facts.torch.hip})"
    refused = sorted({g.name or f"sm{g.sm}" for g in (facts.gpus or ()) if not _ck_admits(g.sm, g.name, want)})
    if refused:
        return (f"flash-attn=={want.public}'s ROCm build (composable_kernel) supports MI200/MI300 "
                f"(gfx90a, gfx94x{', gfx950' if want >= Version('2.8.0') else ''}) only, not {', '.join(refused)}")
    return None


def flash_attn_refuses_gpu(facts: Facts, pins: "Mapping[str, str]") -> Optional[str]:
    """Why a flash-attn pin cannot help on this host's GPUs: its own run-time arch check refuses
    one of them at the first call (flash-attn 2.6.3 on a Blackwell card, any 2.x on a Turing
    card), or on a ROCm torch its build has no ROCm support or no kernels for the GPU (an MI100),
    or None."""
    want = parse_version(pins.get("flash-attn") or "")
    if want is None or not facts.gpus:
        return None
    have = parse_version((facts.packages or {}).get("flash-attn") or "")
    if have is not None and have.public == want.public:
        return None  # the installed release rebuilt for a new torch: no new refusal
    if facts.torch.hip:
        return _rocm_refuses(facts, want)
    for spec, admits, words in _FA_ARCH_CHECK:
        if version_matches(want.public, spec):
            refused = sorted({g.sm for g in facts.gpus if not admits(g.sm)})
            if refused:
                where = ", ".join(f"sm{sm}" for sm in refused)
                return f"flash-attn=={want.public} refuses {where} at its first call (its check admits {words} only)"
            return None
    return None


def choose_wheel(rel: ReleaseCatalogue, version: str, target: WheelTarget) -> WheelChoice:
    """The exact prebuilt wheel of flash-attn `version` for `target`, or why there is none."""
    build = build_command(version)
    fails = source_build_fails(version, target)
    how = (
        f"no prebuilt wheel: build from source against the installed torch with `{build}` "
        "(needs nvcc of the same CUDA major as torch, ninja, and about an hour; MAX_JOBS bounds RAM)"
        + (f"; but {fails}" if fails else "")
    )
    notes = [f"assumed {a}" for a in target.assumed]
    if target.cuda is None and target.hip:
        # ROCm: setup.py builds for HIP from 2.6.2 on; its CachedWheelsCommand asks GitHub
        # Releases for a +rocm{hip}torch{mm} wheel (v2.6.2-v2.8.3 get_wheel_url IS_ROCM branch),
        # which no release's publish.yml builds (CUDA jobs only), so the download fails and it
        # compiles the composable_kernel extension (sample 47 row 24)
        notes = [n for n in notes if not n.startswith("assumed C++ ABI")]  # no wheel to match
        fv = parse_version(version)
        no_rocm = _no_rocm_build(fv) if fv is not None else None
        if no_rocm:
            return WheelChoice(version, False, notes=tuple(notes + [f"torch {target.torch} is a ROCm build and {no_rocm}"]), build=build)
        rocm_how = (
            f"no prebuilt wheel: its setup.py asks for a +rocm wheel that no release publishes and builds the "
            f"composable_kernel extension from source with `{build}` (needs hipcc of torch's ROCm, ninja, and an hour "
            "or more; GPU_ARCHS defaults to this machine's GPU; MAX_JOBS bounds RAM)"
            + (f"; but {fails}" if fails else "")
        )
        return WheelChoice(version, False, notes=tuple(notes + [f"torch {target.torch} is a ROCm build (HIP {target.hip}) and flash-attn {version} publishes CUDA wheels only; {rocm_how}"]), build=build, build_fails=fails)
    if target.cuda is None:
        return WheelChoice(version, False, notes=tuple(notes + [f"torch {target.torch} is not a CUDA build: flash-attn needs one"]), build=build)
    builds = rel.flash_attn_wheels.get(version)
    if builds is None:
        return WheelChoice(version, False, notes=tuple(notes + [f"flash-attn {version}: the catalogue has no wheel matrix for this release; {how}"]), build=build, build_fails=fails)
    tag = cuda_tag(version, target.torch_mm, target.cuda)
    row: Optional[FlashAttnBuild] = next((b for b in builds if b.torch == target.torch_mm), None)
    if row is None:
        lines = ", ".join(sorted({b.torch for b in builds}, key=version_key))
        return WheelChoice(version, False, notes=tuple(notes + [f"flash-attn {version} published wheels for torch {lines}, not {target.torch_mm}; {how}"]), build=build, build_fails=fails)
    if tag not in {_ci_tag(version, c) for c in row.cuda}:
        return WheelChoice(version, False, notes=tuple(notes + [f"flash-attn {version} has no cu{tag} wheel for torch {target.torch_mm} (torch CUDA {target.cuda}); {how}"]), build=build, build_fails=fails)
    if target.python and target.python not in row.python:
        return WheelChoice(version, False, notes=tuple(notes + [f"flash-attn {version} has no wheel for Python {target.python} with torch {target.torch_mm} (only {', '.join(row.python)}); {how}"]), build=build, build_fails=fails)
    if target.cxx11_abi is not None and target.cxx11_abi not in row.cxx11_abi:
        return WheelChoice(version, False, notes=tuple(notes + [f"flash-attn {version} has no cxx11abi{str(target.cxx11_abi).upper()} wheel for torch {target.torch_mm}; {how}"]), build=build, build_fails=fails)
    broken = listed_broken(rel, version, target)
    if broken is not None:
        return WheelChoice(version, False, notes=tuple(notes + [f"the published wheel does not import: {broken.why} ({broken.source}); {how}"]), build=build, broken=True, build_fails=fails)
    abi = "TRUE" if target.cxx11_abi else "FALSE" if target.cxx11_abi is not None else "{TRUE|FALSE}"
    filename = f"flash_attn-{version}+cu{tag}torch{target.torch_mm}cxx11abi{abi}-{target.cp}-{target.cp}-linux_x86_64.whl"
    url = f"{RELEASES_URL}/v{version}/{filename}"
    if target.python is None:
        notes.append(f"Python not probed: replace cp{{XY}} with your CPython tag (wheels exist for {', '.join(row.python)})")
    if target.cxx11_abi is None:
        notes.append("C++ ABI not probed: use TRUE if torch._C._GLIBCXX_USE_CXX11_ABI is True, else FALSE")
    tb = parse_version(row.torch_build)
    if tb is not None and tb.is_prerelease:
        notes.append(
            f"this wheel was built against a torch {target.torch_mm} pre-release ({row.torch_build}); if importing "
            f"flash_attn_2_cuda fails with an undefined symbol, build from source: `{build}`"
        )
    notes.append("install with --no-deps so pip keeps your torch (Dao-AILab/flash-attention#1724)")
    return WheelChoice(version, True, filename=filename, url=url, notes=tuple(notes), build=build, build_fails=fails)
