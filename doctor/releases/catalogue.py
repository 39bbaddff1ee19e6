"""The release catalogue: real versions the doctor may pin, and what each torch wheel bundles.

Data lives in rules/releases/*.json (shipped in the wheel; refreshed by `attn-doctor releases
refresh`):

    torch.json               default PyPI torch wheels: the CUDA, cuDNN, NCCL, Triton each pins
    <package>.json           every version of a package on PyPI, with the Pythons it installs on
    flash-attn-wheels.json   which prebuilt flash-attn wheels each release published (GitHub)

`torch_bundle` is what the what-if (doctor.assume) uses; `load_release_catalogue` is what the
fix planner uses. Lookups are cached per process and directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Tuple

from doctor.resources import rules_dir

# Packages whose every PyPI version the catalogue lists (one file each).
CATALOGUE_PACKAGES = (
    "torch",
    "flash-attn",
    "transformer-engine",
    "transformers",
    "xtuner",
    "axolotl",
    "accelerate",
    "xformers",
    "transformer-engine-cu12",
    "transformer-engine-torch",
    "nvidia-cudnn-cu11",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
    # training frameworks whose fixes pin them (the field corpus, tests/field/)
    "peft",
    "trl",
    "deepspeed",
    "ms-swift",
    "llamafactory",
    "unsloth",
    # unsloth pins its own unsloth_zoo floor (each unsloth release asks for unsloth_zoo>=its month);
    # a fix that pins an older unsloth must pin the matching unsloth_zoo or pip takes the newest
    "unsloth-zoo",
    "ring-flash-attn",
    "verl",
    # torch's companions (their wheels pin torch exactly): a fix that moves torch moves them
    "torchvision",
    "torchaudio",
)


@dataclass(frozen=True)
class TorchBundle:
    """What a default PyPI torch wheel pins exactly (Requires-Dist)."""

    version: str
    cuda: Optional[str]
    cudnn_dist: Optional[str]
    cudnn: Optional[str]
    nccl: Optional[str] = None
    triton: Optional[str] = None
    python: Optional[str] = None  # PEP 440 specifier: the Pythons PyPI has a wheel for
    cxx11_abi: Optional[bool] = None  # torch._C._GLIBCXX_USE_CXX11_ABI of the PyPI wheel
    size: Optional[int] = None  # bytes of the Linux x86_64 wheel PyPI serves (torch alone, not its nvidia-* wheels)

    @property
    def requires_dist(self) -> Tuple[str, ...]:
        """torch's exact pins on what it bundles, as Requires-Dist lines (Linux x86_64)."""
        out = []
        if self.cudnn_dist and self.cudnn:
            out.append(f"{self.cudnn_dist}=={self.cudnn}")
        if self.nccl and self.cudnn_dist:
            out.append(f"nvidia-nccl-cu{self.cudnn_dist.rsplit('cu', 1)[1]}=={self.nccl}")
        if self.triton:
            out.append(f"triton=={self.triton}")
        return tuple(out)


# PyPI's torch wheels for these platforms are CPU-only builds before this release: their nvidia-*
# Requires-Dist carry platform_machine == "x86_64" and torch/lib holds libtorch_cpu.so but no
# libtorch_cuda.so (read in the cp311 manylinux_2_28_aarch64 wheels of 2.7.1, 2.8.0, 2.9.0, 2.9.1
# and 2.10.0; 2.4.1-2.6.0's manylinux2014/2_28 aarch64 metadata the same); from 2.11.0 PyPI's
# aarch64 wheels are CUDA 13 builds (cuda-toolkit, nvidia-cudnn-cu13 without a machine marker).
# PyPI's Windows torch wheels are CPU-only in every release (CUDA builds only on PyTorch's index;
# read in the 2.8.0 and 2.15.0 win_amd64 wheels: no nvidia-* Requires-Dist, no torch_cuda.dll): no floor
TORCH_CUDA_WHEELS_FROM: Mapping[str, Optional[str]] = MappingProxyType({"linux-aarch64": "2.11.0", "windows-x86_64": None})


ASCEND_NPU = "Ascend NPU"  # non_cuda_gpu_torch's answer beside torch-npu (no PyTorch index to point at)


def non_cuda_gpu_torch(installed_torch: Optional[str], rocm: bool = False, npu: bool = False) -> Optional[str]:
    """"ROCm" or "XPU" where the installed torch is such a build (torch.hip set, or a +rocm / +xpu
    label), "Ascend NPU" where torch-npu is installed beside it (`npu`; each torch-npu release
    requires one torch release, e.g. torch-npu 2.1.0.post8: torch==2.1.0+cpu): PyPI's torch would
    replace it with a CUDA build, or leave torch_npu without its torch. None otherwise."""
    label = (installed_torch or "").partition("+")[2]
    if rocm or "rocm" in label:
        return "ROCm"
    if npu:
        return ASCEND_NPU
    return "XPU" if label.startswith("xpu") else None


def torch_cuda_index_tag(torch_before: Optional[str], torch_pin: str) -> Optional[str]:
    """The PyTorch CUDA index ("cu128") that `fix` installs a torch pin from: where the installed
    torch carries a +cuXXX label and the release table knows the pin's CUDA. None: from PyPI.
    (doctor.fix.install builds the command with it; cuda_build_ok exempts exactly these pins.)"""
    label = (torch_before or "").partition("+")[2]
    bundle = torch_bundle(torch_pin)
    if label.startswith("cu") and bundle is not None and bundle.cuda:
        return "cu" + bundle.cuda.replace(".", "")
    return None


@dataclass(frozen=True)
class Release:
    """One version of a package on the index."""

    version: str
    python: Optional[str] = None  # PEP 440 specifier over the Python version; None: any
    requires: Mapping[str, str] = field(default_factory=dict)  # Requires-Dist on packages we pin
    works_with: Mapping[str, str] = field(default_factory=dict)  # run-time windows (if installed)
    requires_dist: Optional[Tuple[str, ...]] = None  # the real Requires-Dist (tracked names, markers kept); None: not fetched
    provides_extra: Tuple[str, ...] = ()
    file: Optional[str] = None  # the file pip installs on Linux x86_64
    size: Optional[int] = None  # its size in bytes
    kind: Optional[str] = None  # wheel | sdist (an sdist builds on install)
    # the platforms PyPI has a binary wheel for ("linux-x86_64", "darwin-aarch64", ...); None:
    # not recorded, or a pure-Python wheel that installs anywhere
    platforms: Optional[Tuple[str, ...]] = None


@dataclass(frozen=True)
class PackageReleases:
    """Every known version of one package, oldest first."""

    name: str
    releases: Tuple[Release, ...]
    source: str = ""
    retrieved: str = ""

    def get(self, version: str) -> Optional[Release]:
        for r in self.releases:
            if r.version == version:
                return r
        return None

    @property
    def versions(self) -> Tuple[str, ...]:
        return tuple(r.version for r in self.releases)


@dataclass(frozen=True)
class FlashAttnBuild:
    """One row of a flash-attn release's wheel matrix: a torch line it was built against."""

    torch: str  # major.minor as it appears in the wheel name: "2.3"
    torch_build: str  # the torch the CI installed: "2.3.0", "2.4.0.dev20240514"
    cuda: Tuple[str, ...]  # CUDA toolkits the CI built with: "12.2.2"
    python: Tuple[str, ...]  # "3.10"
    cxx11_abi: Tuple[bool, ...] = (False, True)


@dataclass(frozen=True)
class BrokenWheel:
    """Published wheels known not to import on some torch builds."""

    flash_attn: str  # specifier over the flash-attn version
    torch: str  # major.minor
    cxx11_abi: Optional[bool]
    why: str
    source: str


@dataclass(frozen=True)
class ReleaseCatalogue:
    packages: Mapping[str, PackageReleases]
    torch: Tuple[TorchBundle, ...] = ()
    flash_attn_wheels: Mapping[str, Tuple[FlashAttnBuild, ...]] = field(default_factory=dict)
    broken_wheels: Tuple[BrokenWheel, ...] = ()
    retrieved: str = ""

    def knows(self, name: str) -> bool:
        return name in self.packages

    def exists(self, name: str, version: str) -> bool:
        pkg = self.packages.get(name)
        return pkg is not None and pkg.get(version) is not None

    def versions(self, name: str) -> Tuple[str, ...]:
        pkg = self.packages.get(name)
        return pkg.versions if pkg else ()

    def torch_row(self, version: str) -> Optional[TorchBundle]:
        for row in self.torch:
            if row.version == version:
                return row
        return None

    def platform_ok(self, name: str, version: str, platform: Optional[str]) -> bool:
        """Has PyPI a wheel of this version for this platform ("darwin-x86_64")? True when
        either is unknown or the release's platforms were not recorded."""
        if not platform:
            return True
        pkg = self.packages.get(name)
        rel = pkg.get(version) if pkg else None
        if rel is None or rel.platforms is None:
            return True
        return platform in rel.platforms

    def cuda_build_ok(
        self,
        name: str,
        version: str,
        platform: Optional[str],
        installed_torch: Optional[str] = None,
        rocm: bool = False,
        npu: bool = False,
    ) -> bool:
        """Is PyPI's wheel of this release for this platform a CUDA build, where the catalogue knows
        it is not (torch below TORCH_CUDA_WHEELS_FROM on that platform)? True otherwise, and when
        either is unknown: a CPU-only torch pin installs there but brings no CUDA, cuDNN or kernel.
        True too where `fix` installs the pin from PyTorch's CUDA index instead of PyPI
        (torch_cuda_index_tag: the installed torch carries a +cuXXX label and the pin's CUDA is known).
        False for any torch pin over a ROCm or Intel XPU torch (`rocm`, or a +rocm / +xpu label): `fix`
        would install PyPI's torch, a CUDA (or CPU) build, over it, and the AMD or Intel GPU would be lost;
        the same beside torch-npu (`npu`), which is built for one torch release."""
        if name == "torch" and non_cuda_gpu_torch(installed_torch, rocm, npu):
            return False
        if name != "torch" or not platform or platform not in TORCH_CUDA_WHEELS_FROM:
            return True
        if torch_cuda_index_tag(installed_torch, version) is not None:
            return True
        from doctor.versions import parse_version

        since = TORCH_CUDA_WHEELS_FROM[platform]
        if since is None:
            return False
        v = parse_version(version)
        floor = parse_version(since)
        return v is None or floor is None or v.release >= floor.release

    def python_ok(self, name: str, version: str, python: Optional[str]) -> bool:
        """Can this version be installed on this Python? True when either is unknown."""
        from doctor.versions import version_matches

        if not python:
            return True
        spec: Optional[str] = None
        if name == "torch" and self.torch_row(version) is not None:
            spec = self.torch_row(version).python  # type: ignore[union-attr]
        else:
            pkg = self.packages.get(name)
            rel = pkg.get(version) if pkg else None
            spec = rel.python if rel else None
        if not spec:
            return True
        return version_matches(python, spec)


# --------------------------------------------------------------------------- loading


def _read(path: Path) -> Dict[str, Any]:
    from doctor.bounded import load_document
    from doctor.errors import InputError

    try:
        doc, _ = load_document(path, "json", what="release catalogue file")
    except (InputError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


@lru_cache(maxsize=None)
def _load(name: str, directory: Optional[str] = None) -> Dict[str, Any]:
    base = Path(directory) if directory else rules_dir() / "releases"
    return _read(base / f"{name}.json")


def _bundle(row: Mapping[str, Any]) -> TorchBundle:
    return TorchBundle(
        version=row["version"],
        cuda=row.get("cuda"),
        cudnn_dist=row.get("cudnn_dist"),
        cudnn=row.get("cudnn"),
        nccl=row.get("nccl"),
        triton=row.get("triton"),
        python=row.get("python"),
        cxx11_abi=row.get("cxx11_abi"),
        size=(row.get("file") or {}).get("size"),
    )


def torch_bundle(version: str) -> Optional[TorchBundle]:
    """The bundle of the default PyPI wheel of this torch release (local label ignored;
    an x.y.z that is not in the table falls back to the newest patch of x.y listed)."""
    from doctor.versions import parse_version

    v = parse_version(version)
    if v is None:
        return None
    rows = _load("torch").get("torch", [])
    exact = [r for r in rows if r["version"] == v.base_version]
    same_minor = [r for r in rows if r["version"].split(".")[:2] == v.base_version.split(".")[:2]]
    row = (exact or same_minor or [None])[-1]
    if row is None:
        return None
    return _bundle(row)


def cuda_major_after(torch_pin: Optional[str], torch_installed: Optional[str], cuda_installed: Optional[str]) -> Optional[int]:
    """The CUDA major the environment has after a plan: a torch pin of another release brings
    its default PyPI wheel's CUDA; otherwise the installed build's (or, unread, its release's
    default). What TE's torch extension and flash-attn's wheels are chosen for."""
    from doctor.versions import parse_version

    pin = parse_version(torch_pin) if torch_pin else None
    have = parse_version(torch_installed) if torch_installed else None
    if pin is not None and (have is None or pin.base_version != have.base_version):
        b = torch_bundle(torch_pin or "")
        cuda = b.cuda if b else None
    else:
        b0 = torch_bundle(torch_installed) if torch_installed else None
        cuda = cuda_installed or (b0.cuda if b0 else None)
    parsed = parse_version(cuda) if cuda else None
    return parsed.major if parsed is not None else None


@lru_cache(maxsize=8)
def _catalogue(directory: Optional[str]) -> ReleaseCatalogue:
    from doctor.versions import version_key

    packages: Dict[str, PackageReleases] = {}
    dates: List[str] = []
    for name in CATALOGUE_PACKAGES:
        doc = _load(name, directory)
        rows = doc.get("releases") or []
        if name == "torch" and not rows:
            rows = [{"version": r["version"], "python": r.get("python")} for r in doc.get("torch", [])]
        if not rows:
            continue
        rels = sorted(
            (
                Release(
                    version=str(r["version"]),
                    python=r.get("python"),
                    requires=MappingProxyType(dict(r.get("requires") or {})),
                    works_with=MappingProxyType(dict(r.get("works_with") or {})),
                    requires_dist=tuple(str(x) for x in r["requires_dist"]) if "requires_dist" in r else None,
                    provides_extra=tuple(str(x) for x in r.get("provides_extra") or ()),
                    file=(r.get("file") or {}).get("name"),
                    size=(r.get("file") or {}).get("size"),
                    kind=(r.get("file") or {}).get("kind"),
                    platforms=tuple(str(x) for x in r["platforms"]) if r.get("platforms") else None,
                )
                for r in rows
            ),
            key=lambda r: version_key(r.version),
        )
        packages[name] = PackageReleases(
            name=name, releases=tuple(rels), source=str(doc.get("source", "")), retrieved=str(doc.get("retrieved", ""))
        )
        if doc.get("retrieved"):
            dates.append(str(doc["retrieved"]))
    torch_rows = tuple(_bundle(r) for r in _load("torch", directory).get("torch", []))
    wheels_doc = _load("flash-attn-wheels", directory)
    wheels: Dict[str, Tuple[FlashAttnBuild, ...]] = {}
    for rel in wheels_doc.get("releases", []):
        wheels[str(rel["version"])] = tuple(
            FlashAttnBuild(
                torch=str(b["torch"]),
                torch_build=str(b.get("torch_build", b["torch"])),
                cuda=tuple(str(c) for c in b.get("cuda", ())),
                python=tuple(str(p) for p in b.get("python", ())),
                cxx11_abi=tuple(bool(x) for x in b.get("cxx11_abi", (False, True))),
            )
            for b in rel.get("builds", [])
        )
    broken = tuple(
        BrokenWheel(
            flash_attn=str(b["flash_attn"]),
            torch=str(b["torch"]),
            cxx11_abi=b.get("cxx11_abi"),
            why=str(b["why"]),
            source=str(b["source"]),
        )
        for b in wheels_doc.get("broken", [])
    )
    return ReleaseCatalogue(
        packages=MappingProxyType(packages),
        torch=torch_rows,
        flash_attn_wheels=MappingProxyType(wheels),
        broken_wheels=broken,
        retrieved=max(dates) if dates else "",
    )


def load_release_catalogue(directory: Optional[Path] = None) -> ReleaseCatalogue:
    """The release catalogue shipped with attn-doctor, or the one in `directory`
    (written by `attn-doctor releases refresh --output DIR`). A malformed user catalogue is an
    input error naming the folder; one without torch or flash-attn data is refused."""
    from doctor.errors import InputError

    if directory is not None and not Path(directory).is_dir():
        what = "is not a folder" if Path(directory).exists() else "does not exist"
        raise InputError(f"release catalogue folder {what}", path=str(directory), hint="give the folder `attn-doctor releases refresh --output DIR` wrote")
    try:
        cat = _catalogue(str(directory) if directory else None)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        where = str(directory or rules_dir() / "releases")
        raise InputError(f"malformed release catalogue: {type(exc).__name__}: {exc}", path=where, hint="re-create it with `attn-doctor releases refresh --output DIR`") from None
    if directory is not None and (not cat.torch or not cat.versions("flash-attn")):
        raise InputError("release catalogue has no torch or flash-attn releases", path=str(directory), hint="re-create it with `attn-doctor releases refresh --output DIR`")
    return cat
