"""Which cuDNN: installed (on disk), loaded (what torch really uses), bundled (what torch pins).

These are three separate facts and they disagree more often than one would like: a system
cuDNN on LD_LIBRARY_PATH shadows the wheel, a later `pip install` moves the wheel off torch's
pin, an NGC image carries a system cuDNN next to a stray wheel. `assess` keeps all three and
states each disagreement in one sentence.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.probe.cuda_libs import CudaLibs, cudnn_release, version_key
from doctor.probe.torch_build import TorchBuild

if TYPE_CHECKING:  # the child module is imported only when a child runs
    from doctor.probe.child import LoadedTorch


@dataclass(frozen=True)
class CudnnFacts:
    version: Optional[str]
    loaded: Optional[str]
    loaded_path: Optional[str]
    installed: Optional[str]
    bundled: Optional[str]  # the nvidia-cudnn-cuXX version torch pins (dist version, 9.1.0.70)
    bundled_dist: Optional[str]
    mismatch: Optional[str]  # one line per disagreement
    provenance: Mapping[str, str]


def _same(a: Optional[str], b: Optional[str]) -> bool:
    """Same cuDNN release; a major-only version (9) matches any 9.x."""
    ka, kb = version_key(cudnn_release(a)), version_key(cudnn_release(b))
    n = min(len(ka), len(kb))
    return ka[:n] == kb[:n]


def _newest(libs: CudaLibs) -> Tuple[Optional[str], Optional[str]]:
    candidates: List[Tuple[Tuple[int, ...], str, str]] = []
    for w in libs.cudnn_wheels:
        rel = cudnn_release(w.version)
        if rel:
            candidates.append((version_key(rel), rel, f"{w.dist} {w.version} ({w.lib_dir or 'no lib folder'})"))
    for s in libs.cudnn_system:
        if s.version:
            candidates.append((version_key(s.version), s.version, f"{s.path} ({s.source})"))
    if not candidates:
        return None, None
    best = max(candidates, key=lambda c: c[0])
    return best[1], best[2]


def _mixed(mapped: Sequence[str]) -> List[str]:
    """Two main cuDNN libraries in one process, or cuDNN's parts loaded from several folders."""
    problems: List[str] = []
    mains = sorted({os.path.realpath(p) for p in mapped if os.path.basename(p).startswith("libcudnn.so")})
    if len(mains) > 1:
        problems.append(
            "two cuDNN libraries are loaded in one process: " + ", ".join(mains)
            + " (symbols bind to whichever was loaded first)"
        )
    folders: Dict[str, List[str]] = {}
    for p in mapped:
        real = os.path.realpath(p)
        folders.setdefault(os.path.dirname(real), []).append(os.path.basename(p))
    if len(folders) > 1:
        parts = "; ".join(f"{', '.join(sorted(set(names)))} from {d}" for d, names in sorted(folders.items()))
        problems.append(
            f"cuDNN is assembled from more than one folder ({parts}): libcudnn.so.9 loads its "
            "parts by name, so LD_LIBRARY_PATH decides which cuDNN actually runs"
        )
    return problems


def assess(
    libs: CudaLibs,
    build: Optional[TorchBuild],
    loaded: Optional["LoadedTorch"],
    environ: Mapping[str, str],
) -> CudnnFacts:
    """`loaded` is None when the child did not run (static probe) or could not report."""
    prov: Dict[str, str] = {}
    problems: List[str] = []
    pin = build.pin_for("nvidia-cudnn-cu") if build else None
    bundled_dist, bundled = pin if pin else (None, None)
    if pin and build and build.metadata:
        prov["cudnn.bundled"] = f"{build.metadata} (Requires-Dist)"
    installed, installed_from = _newest(libs)
    if installed_from:
        prov["cudnn.installed"] = installed_from
    loaded_version = (loaded.cudnn_runtime or loaded.cudnn_version) if loaded else None
    loaded_path = loaded.cudnn_path if loaded else None
    if loaded is not None:
        prov["cudnn.loaded"] = (
            "child-process: cudnnGetVersion() as torch resolves it"
            if loaded.cudnn_runtime
            else "child-process: torch.backends.cudnn.version()"
        )
        if loaded_path:
            prov["cudnn.loaded_path"] = "child-process: /proc/self/maps"

    pinned_wheel = next((w for w in libs.cudnn_wheels if w.dist == bundled_dist), None)
    wheel_dirs = [os.path.realpath(w.lib_dir) for w in libs.cudnn_wheels if w.lib_dir]
    torch_name = f"torch {build.version}" if build and build.version else "torch"

    if bundled and pinned_wheel is None:
        problems.append(
            f"{torch_name} pins {bundled_dist}=={bundled} but that wheel is not installed "
            f"(pip install {bundled_dist}=={bundled})"
        )
    elif bundled and pinned_wheel and not _same(pinned_wheel.version, bundled):
        problems.append(
            f"{bundled_dist} {pinned_wheel.version} is installed but {torch_name} pins {bundled} "
            f"(pip install {bundled_dist}=={bundled})"
        )
    if loaded_version:
        outside = loaded_path is not None and os.path.dirname(os.path.realpath(loaded_path)) not in wheel_dirs
        where = f" from {loaded_path}" if loaded_path else ""
        if bundled and not _same(loaded_version, bundled):
            why = (
                ": a cuDNN outside the pip wheel (LD_LIBRARY_PATH, LD_PRELOAD or the system "
                "library path) shadows it"
                if outside
                else ""
            )
            problems.append(
                f"torch loaded cuDNN {loaded_version}{where} but {torch_name} pins "
                f"{bundled_dist}=={bundled}{why}"
            )
        for w in libs.cudnn_wheels:
            if w.dist != bundled_dist and not _same(w.version, loaded_version):
                problems.append(
                    f"torch loaded cuDNN {loaded_version}{where} while the {w.dist} {w.version} "
                    "wheel is also installed: libraries that load the wheel (TransformerEngine, "
                    "cudnn-frontend) will run a different cuDNN in the same process"
                )
    elif loaded is None and bundled:
        ld_dirs = [os.path.realpath(d) for d in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
        for s in libs.cudnn_system:
            if os.path.dirname(os.path.realpath(s.path)) in ld_dirs and not _same(s.version, bundled):
                problems.append(
                    f"{s.path} (cuDNN {s.version or 'unknown version'}) is on LD_LIBRARY_PATH and "
                    f"may shadow the {bundled_dist}=={bundled} wheel torch pins"
                )
    if loaded is not None:
        problems.extend(_mixed(loaded.cudnn_mapped))
    if loaded is not None and loaded.cudnn_error:
        problems.append(f"torch rejects the cuDNN it loaded: {loaded.cudnn_error}")

    if loaded_version:
        version: Optional[str] = loaded_version
        prov["cudnn.version"] = "loaded (child-process)"
    elif pinned_wheel is not None:
        version = cudnn_release(pinned_wheel.version)
        prov["cudnn.version"] = f"estimate: the {pinned_wheel.dist} wheel torch pins"
    else:
        version = installed
        if installed:
            prov["cudnn.version"] = "estimate: newest cuDNN found on disk"
    return CudnnFacts(
        version=version,
        loaded=loaded_version,
        loaded_path=loaded_path,
        installed=installed,
        bundled=bundled,
        bundled_dist=bundled_dist,
        mismatch="\n".join(problems) or None,
        provenance=prov,
    )
