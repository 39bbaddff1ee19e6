"""cuDNN and CUDA runtime libraries on disk: pip wheels (nvidia-*) and system installs.

Versions come from the wheel's distribution metadata, from full-version library file names
(libcudnn.so.9.1.0) and from cudnn_version.h. Nothing is loaded: what torch actually loads
is a child-process fact (doctor/probe/child.py).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from doctor.model import CudnnFile, CudnnFolder, CudnnSearch
from doctor.probe.envvars import scrub
from doctor.probe.packages import Dist, PackageScan
from doctor.probe.sources import LDCONFIG_TIMEOUT_S, Sources

_CUDNN_DIST = re.compile(r"^nvidia-cudnn-cu(\d+)$")
_RUNTIME_DIST = re.compile(r"^nvidia-cuda-runtime(-cu\d+)?$")
_SO_VERSION = re.compile(r"\.so\.(\d+(?:\.\d+)*)$")
_DEFINE = re.compile(r"^\s*#\s*define\s+CUDNN_(MAJOR|MINOR|PATCHLEVEL)\s+(\d+)", re.M)
_CUDNN_HEADERS = ("cudnn_version.h", "cudnn_version_v9.h", "cudnn_version_v8.h", "cudnn.h")


@dataclass(frozen=True)
class CudnnWheel:
    dist: str  # nvidia-cudnn-cu12
    version: str  # the distribution version, 9.1.0.70
    lib_dir: Optional[str]  # folder holding libcudnn.so.*


@dataclass(frozen=True)
class SystemCudnn:
    path: str
    version: Optional[str]  # 9.1.0, or only the major (9) when nothing better is known
    source: str  # file name, header, or soname


@dataclass(frozen=True)
class CudaLibs:
    cudnn_wheels: Tuple[CudnnWheel, ...]
    cudnn_system: Tuple[SystemCudnn, ...]
    runtime: Optional[str]
    runtime_source: Optional[str]
    runtime_wheels: Mapping[str, str]
    notes: Tuple[Tuple[str, str], ...]  # (fact path, why it is unknown)
    search: Optional[CudnnSearch] = None  # TransformerEngine's own cuDNN search (None: not probed)


def cudnn_release(version: Optional[str]) -> Optional[str]:
    """cuDNN release from a wheel version or file name: 9.1.0.70 -> 9.1.0; 9 stays 9."""
    if not version:
        return None
    parts = re.findall(r"\d+", version.split("+", 1)[0])[:3]
    return ".".join(parts) if parts else None


def version_key(version: Optional[str]) -> Tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version or ""))[:4]


def header_version(path: Path) -> Optional[str]:
    """x.y.z from the CUDNN_MAJOR / MINOR / PATCHLEVEL defines of a cuDNN header."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = dict((k, v) for k, v in _DEFINE.findall(text))
    if "MAJOR" not in found:
        return None
    return f"{found['MAJOR']}.{found.get('MINOR', '0')}.{found.get('PATCHLEVEL', '0')}"


def _headers_in(folders: Iterable[str]) -> Optional[Tuple[str, str]]:
    for folder in folders:
        for name in _CUDNN_HEADERS:
            path = Path(folder, name)
            version = header_version(path)
            if version:
                return version, str(path)
    return None


def _libs_in(folder: str, prefix: str) -> List[str]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(
        os.path.join(folder, n) for n in names if n == prefix or n.startswith(prefix + ".")
    )


def _file_version(path: str) -> Optional[str]:
    """Version in a library file name, following symlinks: libcudnn.so.9 -> 9.1.0."""
    for candidate in (os.path.realpath(path), path):
        m = _SO_VERSION.search(os.path.basename(candidate))
        if m:
            return m.group(1)
    return None


def _record_dir(dist: Dist, lib_prefix: str) -> Optional[str]:
    """The folder the wheel installed `lib_prefix`.* into, from its RECORD file."""
    record = dist.metadata.parent / "RECORD"
    try:
        lines = record.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        rel = line.split(",", 1)[0]
        base = rel.rsplit("/", 1)[-1]
        if base == lib_prefix or base.startswith(lib_prefix + "."):
            return os.path.normpath(os.path.join(dist.site_dir, os.path.dirname(rel)))
    return None


def _wheel_lib_dir(dist: Dist, cuda_major: str, lib_prefix: str, folder: str) -> Optional[str]:
    found = _record_dir(dist, lib_prefix)
    if found:
        return found
    for sub in (("nvidia", folder, "lib"), ("nvidia", f"cu{cuda_major}", "lib")):
        candidate = os.path.join(dist.site_dir, *sub)
        if _libs_in(candidate, lib_prefix):
            return candidate
    return None


def _ldconfig_paths(src: Sources, prefix: str) -> Tuple[List[Tuple[str, str]], Optional[str]]:
    """(name, path) of each `ldconfig -p` entry named `prefix` or `prefix`.N..., in cache order."""
    if not src.use_ldconfig:
        return [], None
    exe = src.find_program("ldconfig") or ("/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None)
    if exe is None:
        return [], "ldconfig not found"
    res = src.run([exe, "-p"], LDCONFIG_TIMEOUT_S, None)
    if not res.ok:
        why = "timed out" if res.timed_out else (res.error or f"exit code {res.returncode}")
        return [], f"`ldconfig -p` failed: {why}"
    paths = []
    for line in res.stdout.splitlines():
        name, _, target = line.partition("=>")
        name = name.strip().split(" ", 1)[0]
        if name == prefix or name.startswith(prefix + "."):
            paths.append((name, target.strip()))
    return paths, None


def _system_dirs(src: Sources) -> List[str]:
    dirs = list(src.system_lib_dirs)
    for d in src.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if d and d not in dirs:
            dirs.append(d)
    return dirs


def _system_cudnn(
    src: Sources, wheel_dirs: Set[str], ld_paths: Sequence[str]
) -> Tuple[SystemCudnn, ...]:
    """One entry per real libcudnn file outside the wheels (symlinks folded together)."""
    candidates: List[str] = list(ld_paths)
    for d in _system_dirs(src):
        candidates.extend(_libs_in(d, "libcudnn.so"))
    seen: Set[str] = set()
    found: List[SystemCudnn] = []
    for path in candidates:
        real = os.path.realpath(path)
        if real in seen or os.path.dirname(real) in wheel_dirs or not os.path.exists(real):
            continue
        seen.add(real)
        version, source = _lib_version(src, path)
        found.append(SystemCudnn(path=path, version=version, source=source))
    return tuple(found)


def _lib_version(src: Sources, path: str) -> Tuple[Optional[str], str]:
    """The cuDNN release of a libcudnn file: its (resolved) file name, else the cudnn_version.h
    beside its lib folder or in the system include folders; and where that came from."""
    real = os.path.realpath(path)
    version = _file_version(path)
    source = os.path.basename(real)
    if version is None or version.count(".") < 2:
        inc = os.path.join(os.path.dirname(os.path.dirname(real)), "include")
        hdr = _headers_in([inc, *src.system_include_dirs])
        if hdr and (version is None or hdr[0].split(".")[0] == version.split(".")[0]):
            version, source = hdr
    return version, source


# TransformerEngine's cuDNN search (transformer_engine/common/__init__.py: 2.4-2.10 `_load_cudnn`,
# 2.11+ `_load_cuda_library_from_system`): each folder is globbed with `{dir}/**/libcudnn.so*`
# (recursive, following links, hidden names skipped), sorted by file name, highest first; 2.11+
# drops paths containing "stub". The walk stops after WALK_LIMIT entries (CUDA_HOME=/ would walk
# the disk): that folder is then unknown.
TE_SEARCH_VARS = ("CUDNN_HOME", "CUDNN_PATH", "CUDA_HOME", "CUDA_PATH")
WALK_LIMIT = 50_000


def _glob_first(root: str) -> Tuple[Optional[str], Optional[str]]:
    """The file TE's glob of `root` takes first, and why the walk did not finish (or None)."""
    hits: List[str] = []
    seen: Set[str] = set()
    visited = 0
    stack = [root]
    while stack:
        folder = stack.pop()
        real = os.path.realpath(folder)
        if real in seen:
            continue
        seen.add(real)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for e in entries:
            visited += 1
            if visited > WALK_LIMIT:
                return None, f"more than {WALK_LIMIT} entries under {root}: not searched to the end"
            if e.name.startswith("."):
                continue
            if fnmatch.fnmatchcase(e.name, "libcudnn.so*") and "stub" not in e.path:
                hits.append(e.path)
            try:
                if e.is_dir():  # follows links, as glob's ** does
                    stack.append(e.path)
            except OSError:
                pass
    hits.sort(reverse=True, key=os.path.basename)
    return (hits[0] if hits else None), None


def _unversioned(src: Sources, ld_entries: Sequence[Tuple[str, str]]) -> Optional[CudnnFile]:
    """The file `dlopen("libcudnn.so")` loads: LD_LIBRARY_PATH, then ld.so.cache, then the
    loader's built-in folders. Only the unversioned name counts: a runtime-only cuDNN
    (libcudnn.so.9, no -dev link) is not found by it."""
    candidates = [os.path.join(d, "libcudnn.so") for d in src.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    candidates += [target for name, target in ld_entries if name == "libcudnn.so"]
    candidates += [os.path.join(d, "libcudnn.so") for d in src.loader_default_dirs]
    for path in candidates:
        if os.path.isfile(path):
            return CudnnFile(path=_shown(path), version=_lib_version(src, path)[0])
    return None


def _shown(path: str) -> str:
    """A path as the snapshot keeps it: scrubbed as environment values are (a random-looking
    segment becomes <redacted>), so a folder compares equal to its scrubbed variable."""
    return scrub(path, random_strings=True)


def te_search(src: Sources, ld_entries: Sequence[Tuple[str, str]]) -> CudnnSearch:
    """The folders TransformerEngine globs for cuDNN (those whose variable is set, and
    /usr/local/cuda) with the file each would give, and the unversioned libcudnn.so on the
    loader path. An empty variable is taken as unset (TE 2.11+ would glob from /)."""
    named = [(var, src.environ.get(var)) for var in TE_SEARCH_VARS]
    dirs: List[Tuple[Optional[str], str]] = [(var, d) for var, d in named if d]
    dirs.append((None, src.cuda_default_dir))
    folders = []
    for var, d in dirs:
        path, error = _glob_first(d)
        found = CudnnFile(path=_shown(path), version=_lib_version(src, path)[0]) if path else None
        folders.append(CudnnFolder(var=var, dir=_shown(d), found=found, error=_shown(error) if error else None))
    return CudnnSearch(folders=tuple(folders), unversioned=_unversioned(src, ld_entries))


def _runtime(
    scan: PackageScan, src: Sources, wheel_dirs: Iterable[str]
) -> Tuple[Optional[str], Optional[str]]:
    for name, dist in scan.dists.items():
        if _RUNTIME_DIST.match(name):
            return dist.version, str(dist.metadata)
    toolkit = scan.dists.get("cuda-toolkit")
    if toolkit is not None:
        return toolkit.version, str(toolkit.metadata)
    for d in list(wheel_dirs) + _system_dirs(src):
        for lib in _libs_in(d, "libcudart.so"):
            v = _file_version(lib)
            if v and v.count(".") >= 1:
                return v, os.path.realpath(lib)
    for root in ("/usr/local/cuda",):
        try:
            data = json.loads(Path(root, "version.json").read_text())
            return str(data["cuda"]["version"]), os.path.join(root, "version.json")
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return None, None


def probe(scan: PackageScan, src: Sources) -> CudaLibs:
    """cuDNN wheels, system cuDNN, CUDA runtime version and the nvidia-* runtime wheels."""
    notes: List[Tuple[str, str]] = []
    wheels: List[CudnnWheel] = []
    for name, dist in sorted(scan.dists.items()):
        m = _CUDNN_DIST.match(name)
        if m:
            lib_dir = _wheel_lib_dir(dist, m.group(1), "libcudnn.so", "cudnn")
            wheels.append(CudnnWheel(dist=name, version=dist.version, lib_dir=lib_dir))
    wheel_dirs = {os.path.realpath(w.lib_dir) for w in wheels if w.lib_dir}
    cudart_dirs: List[str] = []
    for name, dist in scan.dists.items():
        if _RUNTIME_DIST.match(name):
            major = (re.findall(r"\d+", name) or [dist.version.split(".")[0]])[0]
            d = _wheel_lib_dir(dist, major, "libcudart.so", "cuda_runtime")
            if d:
                cudart_dirs.append(d)
    ld_entries, ld_problem = _ldconfig_paths(src, "libcudnn.so")
    if ld_problem:
        notes.append(("cudnn.system", f"{ld_problem}; searched only the usual folders"))
        notes.append(("cudnn.search", f"{ld_problem}; the unversioned libcudnn.so was looked for only in the usual folders"))
    system = _system_cudnn(src, wheel_dirs, [target for _, target in ld_entries])
    search = te_search(src, ld_entries)
    runtime, runtime_source = _runtime(scan, src, cudart_dirs)
    if runtime is None:
        notes.append(("cuda.runtime", "no CUDA runtime wheel or libcudart found"))
    runtime_wheels: Dict[str, str] = {
        name: dist.version
        for name, dist in sorted(scan.dists.items())
        if (name.startswith("nvidia-") and name != "nvidia-ml-py" and not _CUDNN_DIST.match(name))
        or name.startswith("cuda-")
    }
    return CudaLibs(
        cudnn_wheels=tuple(wheels),
        cudnn_system=system,
        search=search,
        runtime=runtime,
        runtime_source=runtime_source,
        runtime_wheels=runtime_wheels,
        notes=tuple(notes),
    )


XFORMERS_BUILD_FILE = "cpp_lib.json"
XFORMERS_BUILD_MAX_BYTES = 65536


def xformers_build(module_dir: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """The CUDA the installed xformers' extensions were built with, from the cpp_lib.json its
    setup.py writes next to them ({"version": {"cuda": 1208, ...}} -> "12.8"; "rocm" or "cpu"
    for a build without CUDA), and why not when it cannot be read (None, None: xformers is not
    installed)."""
    if module_dir is None:
        return None, None
    path = Path(module_dir) / XFORMERS_BUILD_FILE
    try:
        with open(path, "rb") as fh:
            data = fh.read(XFORMERS_BUILD_MAX_BYTES + 1)
    except OSError:
        return None, f"no readable {XFORMERS_BUILD_FILE} in the xformers package (a source tree or a build without it)"
    if len(data) > XFORMERS_BUILD_MAX_BYTES:
        return None, f"{XFORMERS_BUILD_FILE} is larger than {XFORMERS_BUILD_MAX_BYTES} bytes: not read"
    try:
        built = json.loads(data.decode("utf-8"))["version"]
        cuda = built["cuda"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None, f"{XFORMERS_BUILD_FILE} has no version.cuda"
    if cuda is None:  # no CUDA: a ROCm build names its HIP (from 0.0.25), a CPU build neither
        return ("rocm" if built.get("hip") else "cpu"), None
    if isinstance(cuda, bool) or not isinstance(cuda, int) or cuda <= 0:
        return None, f"{XFORMERS_BUILD_FILE}: version.cuda is {cuda!r}, not a CUDA version"
    return f"{cuda // 100}.{cuda % 100}", None


def xformers_fa3(module_dir: Optional[str]) -> Tuple[Optional[bool], Optional[str]]:
    """Whether the installed xformers carries its own FlashAttention-3 extension, and why not
    when the package folder cannot be listed (None, None: xformers is not installed). Its
    setup.py builds that extension only for the archs it keeps (9.0 in 0.0.29-0.0.30, 8.0/9.0
    from 0.0.31) from TORCH_CUDA_ARCH_LIST, or, with none set, only on an sm90 build GPU
    (v0.0.30 setup.py:276-308 get_flash_attention3_nvcc_archs_flags): a source build for
    "12.0", or one made on another GPU, has none. It lands as xformers/_C_flashattention3.*
    (0.0.29-0.0.30) or xformers/flash_attn_3/_C.* (0.0.31 on); flash3.py imports whichever
    is there. True where either file is present, False where neither is."""
    if module_dir is None:
        return None, None
    folder = Path(module_dir)
    try:
        top = os.listdir(folder)
    except OSError as e:
        return None, f"the xformers package folder could not be listed ({e.strerror or e})"
    ext = (".so", ".pyd")
    if any(n.startswith("_C_flashattention3.") and n.endswith(ext) for n in top):
        return True, None
    if "flash_attn_3" in top:
        try:
            inner = os.listdir(folder / "flash_attn_3")
        except OSError as e:
            return None, f"xformers/flash_attn_3 could not be listed ({e.strerror or e})"
        if any(n.startswith("_C.") and n.endswith(ext) for n in inner):
            return True, None
    return False, None
