"""Assemble the snapshot document (docs/snapshot.md) from the fact sources.

Static facts (packages, torch/version.py, cuDNN and CUDA libraries on disk, NVML, the
environment) are read in this process without importing torch. Loaded facts come from one
child process (doctor/probe/child.py), or from the cache when nothing they depend on changed.
Every source is guarded: a failure becomes an `unknown` entry with its reason.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, TypeVar

from doctor import __version__
from doctor.model import SCHEMA_VERSION
from doctor.probe import cuda_libs, cudnn, envvars, fatbin, gpus, hostinfo, packages, torch_build
from doctor.probe.sources import Sources
from doctor.snapshot import cudnn_search_doc
from doctor.probe.targets import IMPORT_DISTS, IMPORTS, PRESENCE_ONLY, TORCH_LOADED_FACTS

if TYPE_CHECKING:  # child and cache are imported only when the child runs (not for --static)
    from doctor.probe import child

T = TypeVar("T")

STATIC_ONLY = "not probed: static mode (--static), torch was not imported"


class _Notes:
    """unknown / provenance being filled in while one document is assembled."""

    def __init__(self) -> None:
        self.unknown: Dict[str, str] = {}
        self.provenance: Dict[str, str] = {}

    def guard(self, key: str, fn: Callable[[], T], default: T) -> T:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop the probe
            self.unknown[key] = f"internal error while probing ({type(exc).__name__}: {exc})"
            return default


def _empty_scan() -> packages.PackageScan:
    return packages.PackageScan(dists={}, skipped=(), modules={}, paths=())


def _present(name: str, scan: packages.PackageScan) -> bool:
    """Could `import name` find something? (False means the import is certainly missing.)"""
    if any(d in scan.dists for d in IMPORT_DISTS.get(name, ())):
        return True
    top, _, rest = name.partition(".")
    if top not in scan.modules:
        return False
    if not rest:
        return True
    # a submodule (flash_attn.cute): any folder on the path may hold a namespace portion
    parts = rest.split(".")
    for p in scan.paths:
        sub = os.path.join(p, top, *parts)
        if os.path.exists(sub) or os.path.exists(sub + ".py"):
            return True
    return False


def _flash_attn_extension(scan: packages.PackageScan) -> Tuple[Optional[str], str]:
    """The installed flash-attn's CUDA extension (its file, or None) and the module name looked
    for: flash_attn_2_cuda for 2.x, flash_attn_cuda for 0.2.x/1.x (flash-attn v1.0.9
    flash_attn/flash_attn_interface.py imports `flash_attn_cuda`; setup.py builds sm_90 code only
    with nvcc >= 11.8, so a 1.x build can lack Hopper code)."""
    version = scan.version("flash-attn") or ""
    major = version.split(".")[0]
    name = "flash_attn_cuda" if major.isdigit() and int(major) < 2 else "flash_attn_2_cuda"
    return scan.modules.get(name), name


def _fingerprint(
    python: str, src: Sources, scan: packages.PackageScan, gp: gpus.GpuProbe, libs: cuda_libs.CudaLibs
) -> str:
    import hashlib

    from doctor.probe import cache, child

    watched = [scan.modules[m.split(".")[0]] for m in ("torch", *IMPORTS) if m.split(".")[0] in scan.modules]
    return cache.fingerprint(
        {
            "doctor": __version__,
            "script": hashlib.sha256(child.SCRIPT.read_bytes()).hexdigest(),
            "imports": IMPORTS,
            "python": cache.file_state([python, os.path.realpath(python)]),
            "paths": scan.paths,
            "dists": sorted(
                (n, d.version, cache.file_state([str(d.metadata.parent)])) for n, d in scan.dists.items()
            ),
            "modules": cache.file_state(sorted(set(watched))),
            "env": sorted((k, v) for k, v in src.environ.items() if envvars.is_relevant(k) or k.startswith("LD_")),
            "driver": gp.driver_version,
            "gpus": [(g.index, g.name, g.compute_capability) for g in gp.gpus or ()],
            "cudnn_system": [(s.path, s.version) for s in libs.cudnn_system],
        }
    )


def _cacheable(loaded: "child.Loaded", gp: gpus.GpuProbe) -> bool:
    """Only complete answers are reused: no crash, no timeout, torch imported."""
    if not loaded.complete or loaded.torch.version is None:
        return False
    if any(r.status == "timeout" for r in loaded.imports.values()):
        return False
    # GPUs the driver sees but torch does not may be a passing driver state: ask again next time
    return not (gp.gpus and loaded.torch.cuda_available is False)


def _loaded_facts(
    src: Sources,
    build: torch_build.TorchBuild,
    scan: packages.PackageScan,
    gp: gpus.GpuProbe,
    libs: cuda_libs.CudaLibs,
) -> "child.Loaded":
    from doctor.probe import cache, child

    python = src.python or child.owner_python(build.site_dir)
    versions = {n: d.version for n, d in scan.dists.items()}
    key = _fingerprint(python, src, scan, gp, libs) if src.cache_dir is not None else ""
    hit = cache.load(src.cache_dir, key) if key else None
    if hit is not None:
        return child.interpret(
            hit["records"], None, python=python, timeout=src.effective_child_timeout(),
            versions=versions, seconds=float(hit.get("seconds", 0.0)), cached_at=str(hit.get("created")),
        )
    result = child.probe(src, python, versions)
    if key and _cacheable(result, gp):
        cache.store(src.cache_dir, key, result.records, result.seconds)
    return result


def _imports(
    loaded: Optional["child.Loaded"], scan: packages.PackageScan, why_not: str, notes: _Notes
) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for name in IMPORTS:
        key = f"imports.{name}"
        if loaded is not None and name in loaded.imports:
            r = loaded.imports[name]
            out[name] = {"status": r.status, "error": r.error, "cause": r.cause, "fix": r.fix}
            notes.provenance[key] = "child-process"
        elif not _present(name, scan):
            out[name] = {"status": "missing", "error": None, "cause": None, "fix": None}
            notes.provenance[key] = "static: no module or distribution on sys.path"
        elif loaded is not None and key in loaded.unknown:
            notes.unknown[key] = loaded.unknown[key]
        else:
            notes.unknown[key] = why_not
    for name in PRESENCE_ONLY:
        out[name] = {"status": "present" if _present(name, scan) else "missing", "error": None, "cause": None, "fix": None}
        notes.provenance[f"imports.{name}"] = "static: looked for on sys.path, not imported"
    return out


def _torch_section(
    build: Optional[torch_build.TorchBuild], loaded: Optional["child.Loaded"], why_not: str, notes: _Notes
) -> Dict[str, Any]:
    section: Dict[str, Any] = {
        "version": None, "cuda": None, "hip": None, "git_version": None, "cxx11_abi": None,
        "cuda_available": None, "device_count": None, "arch_list": None, "cudnn_version": None,
    }
    if build is None:
        notes.unknown["torch"] = "torch is not installed on this Python (no torch on sys.path)"
        return section
    section.update(version=build.version, cuda=build.cuda, hip=build.hip, git_version=build.git_version)
    origin = build.version_file or build.metadata or build.site_dir
    for key in ("version", "cuda", "hip", "git_version"):
        notes.provenance[f"torch.{key}"] = origin
    if build.version_file is None:
        for key in ("cuda", "hip", "git_version"):
            notes.unknown[f"torch.{key}"] = f"{build.site_dir}/torch/version.py is missing or unreadable"
    if loaded is None:
        for key in TORCH_LOADED_FACTS:
            notes.unknown[f"torch.{key}"] = why_not
        return section
    t = loaded.torch
    section.update(
        cxx11_abi=t.cxx11_abi, cuda_available=t.cuda_available, device_count=t.device_count,
        arch_list=list(t.arch_list) if t.arch_list is not None else None, cudnn_version=t.cudnn_version,
    )
    origin = "child-process" + (f" (cached {loaded.cached_at})" if loaded.cached_at else "")
    for key in TORCH_LOADED_FACTS:
        if f"torch.{key}" in loaded.unknown:
            notes.unknown[f"torch.{key}"] = loaded.unknown[f"torch.{key}"]
        else:
            notes.provenance[f"torch.{key}"] = f"{origin}: {loaded.python}"
    if t.version and build.version and t.version != build.version:
        notes.unknown["torch.loaded_version"] = (
            f"the child python imported torch {t.version}, not the {build.version} found at "
            f"{build.site_dir}: PYTHONPATH or a second install shadows it"
        )
    return section


def _gpu_section(gp: gpus.GpuProbe, notes: _Notes) -> Tuple[Optional[List[Dict[str, Any]]], Dict[str, Any]]:
    cuda: Dict[str, Any] = {"driver_version": gp.driver_version, "driver_cuda": gp.driver_cuda}
    if gp.gpus is None:
        reason = notes.unknown.setdefault("gpus", gp.reason or "no GPU information")
        notes.unknown["cuda.driver_version"] = reason
        notes.unknown["cuda.driver_cuda"] = reason
        return None, cuda
    notes.provenance["gpus"] = str(gp.source)
    notes.provenance["cuda.driver_version"] = str(gp.source)
    if gp.driver_cuda:
        notes.provenance["cuda.driver_cuda"] = str(gp.source)
    else:
        notes.unknown["cuda.driver_cuda"] = gp.driver_cuda_reason or "not reported"
    rows = [
        {"index": g.index, "name": g.name, "compute_capability": g.compute_capability, "memory_mib": g.memory_mib}
        for g in gp.gpus
    ]
    return rows, cuda


def _contracts(scan: packages.PackageScan, src: Sources) -> Dict[str, Any]:
    """The contract analysis (doctor.probe.contracts); the ast work only runs for installed pairs."""
    from doctor.probe.contract_cache import cached_pairs, cached_result, result_key
    from doctor.resources import rules_dir

    rows, _ = cached_pairs(rules_dir() / "contracts", src.cache_dir)
    if rows is not None:  # the usual run: validated pairs and the last result from the cache
        key = result_key(scan, rows)
        hit = cached_result(src.cache_dir, key) if key is not None else None
        if key is None or hit is not None:  # no pair installed, or nothing changed since
            return {"analyser": __version__, "pairs": [], "sites": [], **(hit or {}), "parsed_files": 0}
    from doctor.probe.contract_specs import load_specs
    from doctor.probe.contracts import analyse  # ast and the guard evaluator: only when needed

    return analyse(scan, load_specs(cache_dir=src.cache_dir), src.cache_dir)


def _startup(scan: packages.PackageScan) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """The start-up checks of the installed frameworks (doctor.probe.startup): one small file each."""
    from doctor.probe.startup import analyse, load_checks

    checks = load_checks()
    if not any(c.dist in scan.dists for c in checks):
        return [], []
    return analyse(scan, checks)


def collect(loaded: bool = True, *, sources: Optional[Sources] = None) -> Dict[str, Any]:
    """The snapshot document for this machine (see docs/snapshot.md). Never raises.

    loaded=False is the static probe: nothing imports torch, so the loaded facts (C++ ABI,
    cuda_available, arch list, the cuDNN torch loads, import status of compiled extensions)
    are unknown with that reason.
    """
    src = sources if sources is not None else Sources.system()
    notes = _Notes()
    host = notes.guard("python", hostinfo.probe, None)
    scan = notes.guard("packages", lambda: packages.scan(src.site_paths), _empty_scan())
    build = notes.guard("torch", lambda: torch_build.read(scan), None)
    gp = notes.guard("gpus", lambda: gpus.probe(src), gpus.GpuProbe(None, None, None, None))
    no_libs = cuda_libs.CudaLibs((), (), None, None, {}, ())
    libs = notes.guard("cudnn", lambda: cuda_libs.probe(scan, src), no_libs)

    result: Optional["child.Loaded"] = None
    if build is None:
        why_not = "not tried: torch is not installed"
    elif not loaded:
        why_not = STATIC_ONLY
    else:
        result = notes.guard("child", lambda: _loaded_facts(src, build, scan, gp, libs), None)
        why_not = notes.unknown.pop("child", "the child python did not report it")

    for s in scan.skipped:
        notes.unknown[f"packages.{s.name}"] = f"skipped: {s.reason}"
    notes.provenance["packages"] = f"dist-info/egg-info metadata in {len(scan.paths)} sys.path folders"
    no_requires: Dict[str, List[str]] = {}
    requires = notes.guard("requires", lambda: packages.installed_requires(scan), no_requires)
    notes.provenance["requires"] = "Requires-Dist of each installed distribution, on other installed ones (extras left out)"

    torch_section = _torch_section(build, result, why_not, notes)
    gpu_rows, cuda_section = _gpu_section(gp, notes)
    cuda_section.update(runtime=libs.runtime, runtime_wheels=dict(libs.runtime_wheels))
    if "xformers" in scan.dists:
        xf, why = cuda_libs.xformers_build(scan.modules.get("xformers"))
        cuda_section["xformers_build"] = xf
        if why:
            notes.unknown["cuda.xformers_build"] = why
        fa3, why = cuda_libs.xformers_fa3(scan.modules.get("xformers"))
        cuda_section["xformers_fa3"] = fa3
        if why:
            notes.unknown["cuda.xformers_fa3"] = why
    if "flash-attn" in scan.dists:
        ext, name = _flash_attn_extension(scan)
        if ext is None:
            notes.unknown["cuda.flash_attn_archs"] = f"no {name} extension on the path"
        else:
            fa_archs, why = fatbin.cached_archs(ext, src.cache_dir)
            cuda_section["flash_attn_archs"] = list(fa_archs) if fa_archs else None
            if why:
                notes.unknown["cuda.flash_attn_archs"] = why
    if libs.runtime_source:
        notes.provenance["cuda.runtime"] = libs.runtime_source
    for key, why in libs.notes:
        notes.unknown.setdefault(key, why)

    loaded_torch = result.torch if result is not None and "cudnn.loaded" not in result.unknown else None
    cd = notes.guard(
        "cudnn",
        lambda: cudnn.assess(libs, build, loaded_torch, src.environ),
        cudnn.CudnnFacts(None, None, None, None, None, None, None, {}),
    )
    notes.provenance.update(cd.provenance)
    if loaded_torch is None and build is not None:
        notes.unknown.setdefault(
            "cudnn.loaded", result.unknown.get("cudnn.loaded", why_not) if result else why_not
        )
    cudnn_section = {
        "version": cd.version,
        "loaded": cd.loaded,
        "loaded_path": cd.loaded_path,
        "installed": cd.installed,
        "bundled": cd.bundled,
        "bundled_dist": cd.bundled_dist,
        "wheels": [{"dist": w.dist, "version": w.version, "lib_dir": w.lib_dir} for w in libs.cudnn_wheels],
        "system": [{"path": s.path, "version": s.version} for s in libs.cudnn_system],
        "search": cudnn_search_doc(libs.search),
        "mismatch": cd.mismatch,
    }
    imports = _imports(result, scan, why_not, notes)
    contracts = notes.guard("contracts", lambda: _contracts(scan, src), None)
    startup = notes.guard("contracts.startup", lambda: _startup(scan), None)
    if contracts is not None and startup is not None and startup[0]:
        contracts["startup_checks"], contracts["startup"] = startup
    elif startup is not None and startup[0]:
        # the start-up rows live in the contracts section, which the failed analysis left out:
        # say so, so that `check` reports the start-up check as not evaluated, with this reason
        notes.unknown["contracts.startup"] = f"not recorded: the contract analysis failed: {notes.unknown.get('contracts')}"
    if contracts is not None:
        notes.provenance["contracts"] = (
            f"static analysis of the installed sources ({contracts.pop('parsed_files')} file(s) parsed, "
            f"the rest from the cache)"
        )
    env = envvars.relevant(src.environ)
    notes.provenance["env"] = "process environment (secret-like values redacted)"
    if result is not None:
        when = f"cached {result.cached_at}" if result.cached_at else f"{result.seconds:g} s"
        notes.provenance["child"] = f"{result.python} ({when})"

    doc: Dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "doctor_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": host.host if host else None,
        "python": {
            "version": host.python_version if host else None,
            "implementation": host.implementation if host else None,
            "executable": host.executable if host else None,
        },
        "platform": {
            "os": host.os if host else None,
            "arch": host.arch if host else None,
            "libc": host.libc if host else None,
        },
        "packages": {n: scan.dists[n].version for n in sorted(scan.dists)},
        "requires": requires,
        "torch": torch_section,
        "cuda": cuda_section,
        "cudnn": cudnn_section,
        "gpus": gpu_rows,
        "imports": imports,
        "env": env,
        "contracts": contracts,
        "unknown": dict(sorted(notes.unknown.items())),
        "provenance": dict(sorted(notes.provenance.items())),
    }
    return doc
