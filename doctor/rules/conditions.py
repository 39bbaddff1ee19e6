"""Condition trees over named facts, evaluated in three-valued logic.

A leaf predicate is true, false, or unknown (a fact it needs could not be probed). `all` is
false if any child is false, unknown if any is unknown, else true; `any` mirrors it; `not`
keeps unknown. The operator set is closed: OPERATORS plus the package / backend /
framework leaves. Nothing here evaluates code.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from doctor.memo import Memo
from doctor.rules.callpath import FIELDS as PATH_FIELDS
from doctor.rules.callpath import FLASH_ATTN_FA3_HOPPER, CallPath
from doctor.versions import canonical_name, marker_environment, release, version_matches, version_plain, version_verdict
from doctor.model import (
    WORKLOAD_DERIVED,
    WORKLOAD_UNKNOWN_WHEN_NONE,
    BackendStatus,
    CudaInfo,
    CudnnFile,
    CudnnFolder,
    CudnnInfo,
    CudnnSearch,
    Facts,
    TorchInfo,
    Workload,
    TE_PLACEHOLDER_VERSION,
    TEGRA_SMS,
    arch_runs_on,
    driver_behind,
    installed_te,
    major_minor,
    te_dist_versions,
)

# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Value:
    known: bool
    value: Any = None
    reason: str = ""  # why it is unknown


def _unknown(path: str, facts: Facts, default: str) -> Value:
    for key in (path, path.split(".")[0]):
        if key in facts.unknown:
            return Value(False, reason=f"{path}: {facts.unknown[key]}")
    return Value(False, reason=f"{path}: {default}")


FACT_PATHS = frozenset(
    [f"torch.{f.name}" for f in fields(TorchInfo)]
    + [f"cuda.{f.name}" for f in fields(CudaInfo)]
    + [f"cudnn.{f.name}" for f in fields(CudnnInfo) if f.name != "search"]  # search: read by te.cudnn_*
    + ["cudnn.installed_is_bundled", "cudnn.loaded_incompatible", "cuda.driver_behind", "torch.arch_runs_gpu", "torch.arch_list_probed"]
    + ["flash_attn.arch_runs_gpu", "flash_attn.archs_probed"]
    + ["te.fp8_recipe", "te.fp8_attention", "te.cudnn_first_2_4", "te.cudnn_first_2_11", "te.cudnn_file", "te.cudnn_runtime", "te.pypi_placeholder", "te.placeholder_beside_real"]
    + ["flash_attn.build"]
    + ["gpu.sm", "gpu.sm_max", "gpu.name", "gpu.count", "gpu.memory_mib", "python.version", "python.implementation"]
    + ["platform.os", "platform.arch", "platform.libc"]
    + ["requires.broken"]
    + [f"workload.{f.name}" for f in fields(Workload) if f.name not in ("source", "defaulted", "context_parallel")]
    + [f"workload.{name}" for name in WORKLOAD_DERIVED]
    + [f"path.{name}" for name in PATH_FIELDS]
)
FACT_PREFIXES = ("env.", "imports.", "package.", "startup.")
# Derived from the release catalogue (doctor/rules/wheel_facts.py)
WHEEL_FACT_PATHS = frozenset(f"wheels.flash-attn.{n}" for n in ("wheel", "needs_build", "broken_wheel", "why", "build"))


def startup_current(facts: Facts, row: Mapping[str, Any]) -> bool:
    """A `contracts.startup_checks` row describes the framework as installed: its version is the one
    in the packages (or the packages do not name it), not one an --assume pin moved."""
    return (facts.packages or {}).get(str(row.get("dist"))) in (None, row.get("version"))


def startup_read(facts: Facts, check_id: str) -> bool:
    """The start-up check `check_id` was read from the framework as installed (doctor.probe.startup)."""
    section = facts.contracts if isinstance(facts.contracts, Mapping) else {}
    return any(
        isinstance(r, Mapping) and r.get("check") == check_id and r.get("status") == "read" and startup_current(facts, r)
        for r in section.get("startup_checks") or ()
    )


# The attention stack whose installed requirements `requires.broken` reads: the packages the
# release catalogue fetches metadata for, plus the ones it names by prefix (TE, cuDNN, NCCL).
_STACK_EXTRA = ("megatron-core", "flash-attn-3", "flash-attn-4", "kernels", "ring-flash-attn")


def _in_stack(name: str) -> bool:
    from doctor.releases.metadata import METADATA_FLOOR, tracked

    n = canonical_name(name)
    return tracked(n) or n in METADATA_FLOOR or n in _STACK_EXTRA


def _marker_env(facts: Facts) -> Optional[Dict[str, str]]:
    v = release(facts.python.version or "")
    pv = v.release if v is not None else ()
    if len(pv) < 2 or not facts.platform.system:
        return None
    return marker_environment(f"{pv[0]}.{pv[1]}", facts.platform.system, (facts.platform.arch or "").strip(),
                              python_full=".".join(str(x) for x in pv))


def broken_requirements(facts: Facts) -> Optional[Tuple[str, ...]]:
    """What `pip check` says about the attention stack as installed: each requirement of an
    installed package (its own Requires-Dist, `facts.requires`) on another installed one that the
    installed version breaks, e.g. "ms-swift 3.6.4 requires transformers<4.53,>=4.33, but
    transformers 5.0.0 is installed". None where the requirements were not probed. A requirement
    whose marker cannot be decided here is skipped; so is torch's exact cuDNN pin (a newer cuDNN
    over it is what several fixes install, and torch loads it)."""
    if facts.requires is None or facts.packages is None:
        return None
    from packaging.markers import UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    env = _marker_env(facts)
    installed = {canonical_name(k): v for k, v in facts.packages.items()}
    out = []
    for who, lines in sorted(facts.requires.items()):
        who_n = canonical_name(who)
        if not _in_stack(who_n) or who_n not in installed:
            continue
        for line in lines:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            dep = canonical_name(req.name)
            have = installed.get(dep)
            if have is None or not _in_stack(dep) or (who_n == "torch" and dep.startswith("nvidia-cudnn-cu")):
                continue
            if req.marker is not None:
                try:
                    if env is None or not req.marker.evaluate(env):
                        continue
                except UndefinedEnvironmentName:  # not decidable here
                    continue
            try:
                hv = Version(Version(have).public)
            except InvalidVersion:
                continue
            if not req.specifier.contains(hv, prereleases=True):
                out.append(f"{who_n} {installed[who_n]} requires {dep}{req.specifier}, but {dep} {have} is installed")
    return tuple(out)


def is_known_fact_path(path: str) -> bool:
    if path.startswith("startup."):  # a check rules/startup/ ships: a misspelt id would never be true
        return path[len("startup."):] in _startup_ids()
    return path in FACT_PATHS or path in WHEEL_FACT_PATHS or path.startswith(FACT_PREFIXES)


@functools.lru_cache(maxsize=1)
def _startup_ids() -> frozenset:
    from doctor.probe.startup import load_checks

    return frozenset(c.id for c in load_checks())


def te_dpa_f16(te_release: Tuple[int, ...], switch: Optional[str]) -> bool:
    """NVTE_DPA_FP8_RECIPE=F16, which TE reads from 2.8: attention stays out of FP8."""
    return te_release >= (2, 8) and switch == "F16"


def te_dpa_fp8_recipe(te: str, sm: Optional[int], stated: Optional[str], framework: Optional[str],
                      switch: Optional[str]) -> Optional[str]:
    """The FP8 recipe TransformerEngine's attention runs with, for TE release `te`: the recipe
    given to autocast (`stated`; else Megatron's and NeMo's default, delayed, or TE's own default
    for the GPU: MXFP8 on sm100+ from TE 2.0, but from 2.6 only where TE supports MXFP8, sm100-119,
    and Float8CurrentScaling on sm120+ from 2.7), then NVTE_DPA_FP8_RECIPE (`switch`), which
    TE 2.8+ reads to run attention in another recipe ("F16": not in FP8 at all; MXFP8 is switched
    from 2.15). Returns one of FP8_RECIPES, "f16", or None when the GPU is needed and unknown."""
    rel = release(te)
    v = rel.release if rel is not None else (0,)
    recipe = stated
    if recipe is None and framework in ("megatron", "nemo"):
        recipe = "delayed"  # Megatron's --fp8-recipe default
    if recipe is None:
        if v < (2, 0):
            recipe = "delayed"
        elif sm is None:
            return None
        elif v < (2, 6):
            recipe = "mxfp8" if sm >= 100 else "delayed"
        elif 100 <= sm < 120:
            recipe = "mxfp8"
        elif sm >= 120 and v >= (2, 7):
            recipe = "current"
        else:
            recipe = "delayed"
    if te_dpa_f16(v, switch):
        return "f16"
    if v < (2, 8) or not switch:
        return recipe
    if switch == "DelayedScaling" and (recipe in ("current", "nvfp4") or (recipe == "mxfp8" and v >= (2, 15))):
        return "delayed"
    if switch == "Float8CurrentScaling" and (recipe in ("delayed", "nvfp4") or (recipe == "mxfp8" and v >= (2, 15))):
        return "current"
    if switch == "MXFP8BlockScaling" and v >= (2, 15) and recipe in ("delayed", "current", "nvfp4"):
        return "mxfp8"
    return recipe


NOT_SEARCHED = (
    "not probed: the snapshot does not record TransformerEngine's own cuDNN search (cudnn.search; "
    "snapshots from attn-doctor before it); re-create it with `attn-doctor probe --format json`"
)


def te_cudnn_first(te: Tuple[int, ...], search: CudnnSearch, env: Mapping[str, str]) -> Tuple[Optional[CudnnFile], str]:
    """The libcudnn TransformerEngine release `te` loads before looking at the Python wheels,
    with how it got there; (None, "") when it reaches the wheels. Raises LookupError (why) where
    the probe did not search what this environment names. transformer_engine/common/__init__.py:
    up to 2.3 the wheel comes first; 2.4-2.10 `_load_cudnn` globs CUDNN_HOME or else CUDNN_PATH,
    then one of CUDA_HOME, CUDA_PATH, /usr/local/cuda (the first set), then the wheel; 2.11+
    `_load_cuda_library_from_system` globs each of CUDNN_HOME, CUDNN_PATH, CUDA_HOME, CUDA_PATH,
    /usr/local/cuda, then calls dlopen("libcudnn.so"), and only then the wheels."""
    if te < (2, 4):
        return None, ""

    def folder(var: Optional[str]) -> Optional[CudnnFolder]:
        want = env.get(var) if var else None
        if var and not want:
            return None
        for f in search.folders:
            # the snapshot's env is redacted (a random-looking path segment becomes <redacted>)
            if f.var == var and (var is None or f.dir == want or "<redacted>" in str(want)):
                if f.error:
                    raise LookupError(f.error)
                return f
        if var is None:
            raise LookupError("the probe did not search /usr/local/cuda")
        raise LookupError(f"the probe did not search {var}={want} (it was not set, or set otherwise, when the snapshot was taken)")

    if te < (2, 11):
        first_cudnn = "CUDNN_HOME" if env.get("CUDNN_HOME") else "CUDNN_PATH"
        first_cuda = next((v for v in ("CUDA_HOME", "CUDA_PATH") if env.get(v)), None)
        order: Tuple[Optional[str], ...] = (first_cudnn, first_cuda)
    else:
        order = ("CUDNN_HOME", "CUDNN_PATH", "CUDA_HOME", "CUDA_PATH", None)
    for var in order:
        f = folder(var)
        if f is not None and f.found is not None:
            return f.found, f"in {var or '/usr/local/cuda'}"
    if te >= (2, 11) and search.unversioned is not None:
        return search.unversioned, 'dlopen("libcudnn.so")'
    return None, ""


def _te_cudnn_runtime(facts: Facts) -> Value:
    """te.cudnn_runtime: the cuDNN version TransformerEngine 2.11+ finds at import, which is what
    TE 2.20's import check reads (cudnnGetVersion through the global scope, where TE's own
    RTLD_GLOBAL load of the file its search finds first comes before the wheel: sample 39's
    device run). The file found first (te_cudnn_first, the 2.11+ search) where the probe searched;
    else, and where the search reaches the wheels, the cuDNN torch loads (cudnn.version)."""
    search = facts.cudnn.search
    found = None
    if search is not None and facts.env is not None:
        try:
            found, _how = te_cudnn_first((2, 11), search, facts.env)
        except LookupError:
            found = None
    if found is not None:
        if found.version is None:
            return _unknown("cudnn.search", facts, f"the version of {found.path} is not known")
        return Value(True, found.version)
    if facts.cudnn.version is None:
        return _unknown("cudnn.version", facts, "torch's cuDNN was not probed")
    return Value(True, facts.cudnn.version)


def _te_cudnn(path: str, facts: Facts) -> Value:
    """te.cudnn_first_2_4 / te.cudnn_first_2_11: what the cuDNN search of TE 2.4-2.10 / 2.11+
    loads before the Python wheels on this machine: "wheel" (nothing: the wheel's libraries,
    all of them loaded by path), "other" (a cuDNN of another version, same major, than the
    effective one), "other_major" (a cuDNN of another major: torch does not
    use it, but TE's cuDNN frontend looks its functions up by name and gets this one's),
    "same" (the same version, but one file loaded by path, whose sub-libraries then come by name
    from the loader path). te.cudnn_file: that file for the installed TE, for messages."""
    if path == "te.cudnn_file":
        if facts.packages is None:
            return _unknown(path, facts, "installed packages were not probed")
        te = installed_te(facts.packages)
        rel = release(te) if te is not None else None
        if rel is None:
            return Value(True, None)
        family = rel.release
    else:
        family = (2, 11) if path.endswith("2_11") else (2, 4)
    search = facts.cudnn.search
    if search is None:
        return _unknown("cudnn.search", facts, NOT_SEARCHED)
    if facts.env is None:
        return _unknown("env", facts, "environment variables were not probed")
    try:
        found, how = te_cudnn_first(family, search, facts.env)
    except LookupError as exc:
        return _unknown("cudnn.search", facts, str(exc))
    if found is None and family >= (2, 11) and "cudnn.search" in facts.unknown:
        return _unknown("cudnn.search", facts, "not probed")  # ld.so.cache could not be read
    if path == "te.cudnn_file":
        return Value(True, "" if found is None else f"{found.path} ({how}, cuDNN {found.version or 'of unknown version'})")
    if found is None:
        return Value(True, "wheel")
    if found.version is None or facts.cudnn.version is None:
        return _unknown("cudnn.search", facts, f"the version of {found.path} or of torch's cuDNN is not known")
    mine, torch_s = found.version.split(".")[:3], facts.cudnn.version.split(".")[:3]
    if mine[0] != torch_s[0]:
        # another major (a libcudnn.so.8 beside torch's cuDNN 9): its soname and symbol versions
        # (cudnnCreate@@libcudnn.so.8) serve neither torch's NEEDED libcudnn.so.9 nor TE's direct
        # calls (cudnnCreate@libcudnn.so.9, transformer-engine-cu12 2.8.0 libtransformer_engine.so),
        # but TE's cuDNN frontend resolves its calls with dlsym(cudnn_dlhandle = nullptr, name)
        # (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, TE v2.4-v2.10 common/CMakeLists.txt,
        # cudnn_utils.cpp:75; cudnn_frontend_shim.h get_symbol) and gets the first cuDNN loaded
        # RTLD_GLOBAL, this one: FusedAttention runs on it
        return Value(True, "other_major")
    if len(mine) < 3 and mine == torch_s[: len(mine)]:
        return _unknown("cudnn.search", facts, f"{found.path} names only cuDNN {found.version}, torch's is {facts.cudnn.version}")
    return Value(True, "same" if mine == torch_s else "other")



def _flash_attn_build(facts: Facts) -> Value:
    """Which build the installed `flash-attn` distribution is: "fa3_hopper" (a hopper/ build,
    modules flash_attn_interface / flash_attn_3_cuda), "fa2" (the flash_attn package with the
    FlashAttention-2 API: every PyPI release, 0.x/1.x included, source builds, ROCm's fork at
    3.0.0.r1), or "none" (not installed)."""
    if facts.packages is None:
        return _unknown("package.flash-attn", facts, "installed packages were not probed")
    v = facts.packages.get("flash-attn")
    if v is None:
        return Value(True, "none")
    verdict = version_verdict(v, FLASH_ATTN_FA3_HOPPER)
    if verdict is None:
        return _unknown("package.flash-attn", facts, f"flash-attn {v}: whether it is a hopper/ build is not known")
    return Value(True, "fa3_hopper" if verdict else "fa2")


def _tegra(facts: Facts, sm: int) -> bool:
    """Whether a GPU gets Tegra's exact-SM cubin rule: a Jetson SM under a CUDA 12 or older
    build. CUDA 13 on Orin (JetPack 7, one toolkit for all Arm) is left to the desktop rule:
    not established either way (conda-forge#527, holohub#1687). torch 2.14.1's own table
    (pytorch#186285) switches at a CUDA 13.2 build instead; Orin's first CUDA 13 is JetPack 7.2's
    13.2 driver, the only one under which a CUDA 13.0/13.1 build reads an arch list there."""
    if sm not in TEGRA_SMS:
        return False
    cuda = major_minor(facts.torch.cuda)
    return cuda is None or cuda[0] < 13


def resolve(path: str, facts: Facts, workload: Workload) -> Value:
    """The value of a named fact, or unknown with the reason."""
    head, _, rest = path.partition(".")
    if head == "workload":
        value = getattr(workload, rest)
        if value is None and rest in WORKLOAD_UNKNOWN_WHEN_NONE:
            return Value(False, reason=f"{path}: not known (state it in the workload, or pass the model's config.json)")
        return Value(True, value)
    if head == "wheels":
        from doctor.rules.wheel_facts import resolve_wheel_fact

        known, value, why = resolve_wheel_fact(rest.rpartition(".")[2], facts)
        return Value(True, value) if known else _unknown(path, facts, why)
    if head == "env":
        if facts.env is None:
            return _unknown(path, facts, "environment variables were not probed")
        return Value(True, facts.env.get(rest))
    if head == "package":
        if facts.packages is None:
            return _unknown(path, facts, "installed packages were not probed")
        name = canonical_name(rest)
        if name == "transformer-engine":
            # TE for PyTorch installed as transformer-engine-torch / -cu12 / -cu13 without the meta
            # package: these are released in lockstep, so any of them gives TE's version
            return Value(True, installed_te(facts.packages))
        return Value(True, facts.packages.get(name))
    if head == "requires" and rest == "broken":
        broken = broken_requirements(facts)
        if broken is None:
            return _unknown(path, facts, "the installed packages' requirements were not probed")
        return Value(True, "; ".join(broken) or None)
    if head == "startup":
        # whether the probe read this start-up check from the installed framework (then STARTUP-*
        # judges its window from the code, and a version table of the same window stays silent)
        return Value(True, startup_read(facts, rest))
    if head == "imports":
        name, _, attr = rest.rpartition(".")
        st = facts.imports.get(name)
        if attr == "tried":  # known either way: lets a rule read an import only where it was tried
            return Value(True, st is not None)
        if st is None:
            return _unknown(path, facts, f"import of {name} was not tried")
        return Value(True, getattr(st, attr))
    if head == "gpu":
        if facts.gpus == () and rest == "count":
            return Value(True, 0)  # probed, and there is no GPU
        if not facts.gpus:
            why = "no GPU found" if facts.gpus == () else "GPUs were not probed"
            return _unknown(path, facts, why)
        if rest == "count":
            return Value(True, len(facts.gpus))
        if rest == "sm":
            return Value(True, min(g.sm for g in facts.gpus))
        if rest == "sm_max":
            return Value(True, max(g.sm for g in facts.gpus))
        if rest == "name":
            return Value(True, facts.gpus[0].name)
        if rest == "memory_mib":
            mems = [g.memory_mib for g in facts.gpus if g.memory_mib is not None]
            return Value(True, min(mems)) if mems else _unknown(path, facts, "GPU memory unknown")
    if head == "torch" and facts.packages is not None and "torch" not in facts.packages and facts.torch.version is None:
        return Value(True, None)  # torch is not installed: every torch fact is known to be absent
    if path == "torch.arch_list_probed":
        # Whether torch.cuda.get_arch_list() was read (the child probe); false for a static probe
        # or an older snapshot, so a rule can state what a release build ships in that case. An
        # empty list is not a reading: get_arch_list() returns [] whenever is_available() is false
        # (a driver too old, no visible device), whatever the build carries.
        return Value(True, bool(facts.torch.arch_list))
    if path == "flash_attn.archs_probed":
        # the installed flash-attn's extension was read for its GPU code (cuda.flash_attn_archs)
        return Value(True, bool(facts.cuda.flash_attn_archs))
    if path == "flash_attn.arch_runs_gpu":
        if not facts.cuda.flash_attn_archs or not facts.gpus:
            return _unknown("gpu.sm" if facts.cuda.flash_attn_archs else "cuda.flash_attn_archs", facts, "not probed")
        return Value(True, all(arch_runs_on(facts.cuda.flash_attn_archs, g.sm, _tegra(facts, g.sm)) for g in facts.gpus))
    if path == "torch.arch_runs_gpu":
        if not facts.torch.arch_list or not facts.gpus:
            why = "not probed" if facts.torch.arch_list is None else "empty: torch.cuda.is_available() was false"
            return _unknown("gpu.sm" if facts.torch.arch_list and not facts.gpus else "torch.arch_list", facts, why)
        return Value(True, all(arch_runs_on(facts.torch.arch_list, g.sm, _tegra(facts, g.sm)) for g in facts.gpus))
    if path == "te.fp8_attention":
        # Whether TransformerEngine's attention runs in FP8: an FP8 workload, from TE 1.6 (the
        # recipe's fp8_dpa; v1.5 attention.py has no FP8 at all), unless TE >= 2.8 is told
        # NVTE_DPA_FP8_RECIPE=F16 (fp8_dpa off: attention in the high-precision dtype).
        if workload.dtype != "fp8":
            return Value(True, False)
        if facts.packages is None:
            return _unknown(path, facts, "installed packages were not probed")
        te = installed_te(facts.packages)
        rel = release(te) if te is not None else None
        if rel is not None and rel.release < (1, 6):
            return Value(True, False)  # no fp8_dpa before TE 1.6: attention stays in fp16/bf16
        if rel is None or rel.release < (2, 8):
            return Value(True, True)  # no TE, or a TE that does not read the switch
        if facts.env is None:
            return _unknown("env.NVTE_DPA_FP8_RECIPE", facts, "environment variables were not probed")
        return Value(True, not te_dpa_f16(rel.release, facts.env.get("NVTE_DPA_FP8_RECIPE")))
    if path in ("te.cudnn_first_2_4", "te.cudnn_first_2_11", "te.cudnn_file"):
        return _te_cudnn(path, facts)
    if path == "te.cudnn_runtime":
        return _te_cudnn_runtime(facts)
    if path == "te.pypi_placeholder":
        # TE distributions are installed, and every one is PyPI's empty 0.0.0 placeholder (no
        # transformer_engine package): `package.transformer-engine` reads none there (installed_te)
        if facts.packages is None:
            return _unknown(path, facts, "installed packages were not probed")
        present = te_dist_versions(facts.packages)
        return Value(True, bool(present) and all(v == TE_PLACEHOLDER_VERSION for v in present))
    if path == "te.placeholder_beside_real":
        # a 0.0.0 placeholder next to a real TransformerEngine distribution (TE 1.10+ then assert
        # at import that all of them have one version)
        if facts.packages is None:
            return _unknown(path, facts, "installed packages were not probed")
        return Value(True, TE_PLACEHOLDER_VERSION in te_dist_versions(facts.packages) and installed_te(facts.packages) is not None)
    if path == "te.fp8_recipe":
        if facts.packages is None:
            return _unknown(path, facts, "installed packages were not probed")
        te = installed_te(facts.packages)
        if te is None:
            return Value(True, None)
        sm = min(g.sm for g in facts.gpus) if facts.gpus else None
        switch = facts.env.get("NVTE_DPA_FP8_RECIPE") if facts.env is not None else None
        recipe = te_dpa_fp8_recipe(te, sm, workload.fp8_recipe, workload.framework, switch)
        return Value(True, recipe) if recipe is not None else _unknown("gpu.sm", facts, "no GPU found: TE's default FP8 recipe depends on it")
    if path == "flash_attn.build":
        return _flash_attn_build(facts)
    if path == "cuda.driver_behind":
        behind = driver_behind(facts.torch.cuda, facts.cuda.driver_cuda)
        if behind == "major" and facts.torch.cuda_available is True:
            # the CUDA runtime started although the kernel driver reports an older major: NVIDIA's
            # forward-compatibility package (cuda-compat, as NGC containers load it on data-center
            # GPUs) supplies a newer libcuda
            return Value(True, "forward_compat")
        if behind is not None:
            return Value(True, behind)
        return _unknown("cuda.driver_cuda" if facts.torch.cuda else "torch.cuda", facts, "not probed")
    if head == "platform":
        # linux | windows | darwin, x86_64 | aarch64, the glibc version (None: musl or not Linux)
        p = facts.platform
        val = {"os": p.system, "arch": p.machine, "libc": p.glibc}[rest]
        # libc: None is an answer (not glibc) only where the probe named another C library or
        # the OS has none; a Linux snapshot without a libc entry leaves it unknown
        libc_known = bool(p.libc and p.libc.strip()) or p.system in ("windows", "darwin")
        if val is not None or (rest == "libc" and libc_known):
            return Value(True, val)
        return _unknown(path, facts, "not probed")
    if head in ("torch", "cuda", "cudnn", "python"):
        section = getattr(facts, head)
        val = getattr(section, rest)
        if val is not None:
            return Value(True, val)
        # A torch whose build facts were read has a known `cuda: None` (a CPU or ROCm build).
        if (
            head == "torch"
            and rest in ("cuda", "hip")
            and facts.torch.version is not None
            and "torch" not in facts.unknown
            and f"torch.{rest}" not in facts.unknown
        ):
            return Value(True, None)
        if head == "torch" and rest == "version" and facts.packages is not None:
            return Value(True, None)  # torch is not installed
        return _unknown(path, facts, "not probed")
    raise KeyError(path)


# --------------------------------------------------------------------------- comparisons


def _ordered(a: Any, b: Any) -> Tuple[Any, Any]:
    if isinstance(a, str) or isinstance(b, str):
        va, vb = release(str(a)), release(str(b))
        if va is not None and vb is not None:
            return va, vb
    return a, b


def _cmp(op: str) -> Callable[[Any, Any], bool]:
    def run(a: Any, b: Any) -> bool:
        if a is None:
            return False
        x, y = _ordered(a, b)
        try:
            return {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[op]
        except TypeError:
            return False

    return run


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return str(a) == str(b)


OPERATORS: Dict[str, Callable[[Any, Any], bool]] = {
    "eq": _eq,
    "ne": lambda a, b: not _eq(a, b),
    "lt": _cmp("lt"),
    "le": _cmp("le"),
    "gt": _cmp("gt"),
    "ge": _cmp("ge"),
    "in": lambda a, b: any(_eq(a, x) for x in b),
    "not_in": lambda a, b: not any(_eq(a, x) for x in b),
    "version": lambda a, b: a is not None and version_matches(str(a), b),
    "matches": lambda a, b: a is not None and re.search(b, str(a)) is not None,
    "is_set": lambda a, b: (a is not None and a != "") == b,
    "multiple_of": lambda a, b: isinstance(a, int) and not isinstance(a, bool) and b != 0 and a % int(b) == 0,
}


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class Outcome:
    """Result of a condition: True, False or None (unknown) with the missing facts."""

    value: Optional[bool]
    missing: Tuple[str, ...] = ()


TRUE = Outcome(True)
FALSE = Outcome(False)


class Context:
    """Everything a condition can see: facts, workload, and backend availability so far."""

    def __init__(
        self,
        facts: Facts,
        workload: Workload,
        backends: Optional[Mapping[str, BackendStatus]] = None,
        selections: Optional[Mapping[str, Optional[str]]] = None,
        has_backend: Optional[Mapping[str, Optional[bool]]] = None,
        path: Optional[CallPath] = None,
    ) -> None:
        self.facts = facts
        self.workload = workload
        self.path = path
        self.backends: Mapping[str, BackendStatus] = backends or {}
        self.selections: Mapping[str, Optional[str]] = selections or {}
        self.has_backend: Mapping[str, Optional[bool]] = has_backend or {}
        self.findings: Dict[str, Outcome] = {}  # finding verdicts so far (the `finding:` leaf)
        self._cache: Dict[str, Value] = {}

    def value(self, path: str) -> Value:
        v = self._cache.get(path)
        if v is None:
            if path.startswith("path."):
                if self.path is None:  # backend rules run before the call path is complete
                    from doctor.rules.callpath import infer

                    self.path = infer(self.facts, self.workload)
                why = self.path.why_unknown(path[5:])
                v = Value(False, reason=f"{path}: {why}") if why else Value(True, getattr(self.path, path[5:]))
            else:
                v = resolve(path, self.facts, self.workload)
            self._cache[path] = v
        return v


Compiled = Callable[[Context], Outcome]
# Compiled trees by the identity of the condition dict. Each entry keeps its dict alive, so an id
# is never reused while its entry stands (a catalogue has a few hundred trees; a caller that
# builds conditions on the fly only recompiles).
COMPILED_MAX = 4096
_COMPILED: "Memo[int, Tuple[Mapping[str, Any], Compiled]]" = Memo(COMPILED_MAX)


def evaluate(cond: Mapping[str, Any], ctx: Context) -> Outcome:
    """Evaluate a condition tree; each tree is compiled to closures once and reused."""
    hit = _COMPILED.get(id(cond))
    if hit is None or hit[0] is not cond:
        hit = _COMPILED.put(id(cond), (cond, _compile(cond)))
    return hit[1](ctx)


def _compile(cond: Mapping[str, Any]) -> Compiled:
    if "all" in cond or "any" in cond:
        is_all = "all" in cond
        kids = [_compile(c) for c in cond["all" if is_all else "any"]]
        stop, done, rest = (False, FALSE, TRUE) if is_all else (True, TRUE, FALSE)

        def junction(ctx: Context) -> Outcome:
            missing: Tuple[str, ...] = ()
            for kid in kids:
                r = kid(ctx)
                if r.value is stop:
                    return done
                if r.value is None:
                    missing += r.missing
            return Outcome(None, missing) if missing else rest

        return junction
    if "not" in cond:
        kid = _compile(cond["not"])

        def negation(ctx: Context) -> Outcome:
            r = kid(ctx)
            return r if r.value is None else (FALSE if r.value else TRUE)

        return negation
    if "package" in cond:
        path = "package." + cond["package"]
        installed = cond.get("installed")
        spec = cond.get("version")
        plain = cond.get("compare") == "plain"

        def package(ctx: Context) -> Outcome:
            v = ctx.value(path)
            if not v.known:
                return Outcome(None, (v.reason,))
            if installed is not None and (v.value is not None) != installed:
                return FALSE
            if spec is not None:
                if v.value is None:
                    return FALSE
                verdict = version_plain(v.value, spec) if plain else version_verdict(v.value, spec)
                if verdict is None:
                    kind = "development snapshot" if "+" in v.value else "pre-release"
                    return Outcome(None, (f"{cond['package']} {v.value} is a {kind} of {release(v.value)}: "
                                          f"whether it has the change at {spec} is not known (compare with a release)",))
                return TRUE if verdict else FALSE
            return TRUE

        return package
    if "fact" in cond or "env" in cond:
        path = cond["fact"] if "fact" in cond else "env." + cond["env"]
        tests = [(OPERATORS[op], arg) for op, arg in cond.items() if op not in ("fact", "env", "if_unknown")]
        if_unknown = cond.get("if_unknown")

        def fact(ctx: Context) -> Outcome:
            v = ctx.value(path)
            if not v.known:
                if if_unknown is not None:
                    return TRUE if if_unknown else FALSE
                return Outcome(None, (v.reason,))
            for fn, arg in tests:
                if not fn(v.value, arg):
                    return FALSE
            return TRUE

        return fact
    if "finding" in cond:
        rid, want, if_unknown = cond["finding"], cond["fired"], cond.get("if_unknown")

        def finding(ctx: Context) -> Outcome:
            got = ctx.findings.get(rid)
            if got is None or got.value is None:
                if if_unknown is not None:
                    return TRUE if if_unknown else FALSE
                why = got.missing if got is not None else ()
                return Outcome(None, (f"whether {rid} stops the run first is not known",) + tuple(why))
            return TRUE if got.value == want else FALSE

        return finding
    return lambda ctx: _evaluate_leaf(cond, ctx)  # backend / framework: depend on the diagnosis


def _evaluate_leaf(cond: Mapping[str, Any], ctx: Context) -> Outcome:
    """The leaves that read the diagnosis so far: backend availability and selection."""
    if "backend" in cond:
        st = ctx.backends.get(cond["backend"])
        if st is None:  # a family member (findings only: the loader allows `available` alone)
            st = next((m for b in ctx.backends.values() for m in b.members if m.id == cond["backend"]), None)
        if st is None:
            return FALSE if cond.get("available", True) or cond.get("selected") else TRUE
        if "available" in cond:
            if st.available is None:
                return Outcome(None, (f"backend {st.id}: " + "; ".join(st.reasons),))
            if st.available != cond["available"]:
                return FALSE
        if "available_but_for" in cond:
            # out, and every rule that put it out is one of these (no other reason, such as the
            # library not being installed): without them it would be available
            if st.available is None:
                return Outcome(None, (f"backend {st.id}: " + "; ".join(st.reasons),))
            allowed = set(cond["available_but_for"])
            if (
                st.available
                or not st.rule_ids
                or not set(st.rule_ids) <= allowed
                or len(st.reasons) > len(st.rule_ids)
            ):
                return FALSE
            if st.undecided:  # another of its rules could not be decided: it may keep B out too
                return Outcome(None, tuple(f"backend {st.id}: {u}" for u in st.undecided))
        if "out_for" in cond:
            # out, and one of these rules is among those that put it out (other reasons may add to it)
            if not set(st.rule_ids) & set(cond["out_for"]):
                if st.available is not None and not st.undecided:
                    return FALSE
                why = st.undecided or st.reasons
                return Outcome(None, tuple(f"backend {st.id}: {u}" for u in why))
        if "selected" in cond:
            # a TE backend is "selected" only where TE's attention is on the stated path (path.te_attention);
            # a flash-attn one only where code may call flash-attn itself (path.flash_attn_direct):
            # transformers' flash_attention_2 is the transformers.* backend, not this one
            selected = (
                st.selected
                and (st.framework != "transformer-engine" or bool(ctx.value("path.te_attention").value))
                and (st.framework != "flash-attn" or bool(ctx.value("path.flash_attn_direct").value))
            )
            if selected != cond["selected"]:
                return FALSE
        return TRUE
    if "framework" in cond:
        fw = cond["framework"]
        if fw not in ctx.selections:
            return FALSE  # framework not installed: nothing to say about it
        sel = ctx.selections[fw]
        statuses = [b for b in ctx.backends.values() if b.framework == fw]
        undecided = any(b.available is None for b in statuses)
        if "has_backend" in cond:
            has = ctx.has_backend.get(fw)
            if has is None:
                reasons = tuple(r for b in statuses if b.available is None for r in b.reasons)
                return Outcome(None, reasons)
            if has != cond["has_backend"]:
                return FALSE
        if "selects" in cond:
            if sel is None and undecided:
                return Outcome(None, (f"{fw}: backend choice undecided",))
            if sel != cond["selects"]:
                return FALSE
        return TRUE
    raise KeyError(f"not a condition: {sorted(cond)}")


# --------------------------------------------------------------------------- for people

_OP_WORDS = {"eq": "=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "in": "in", "not_in": "not in",
             "version": "", "matches": "matches", "multiple_of": "a multiple of"}


def describe(cond: Any) -> str:
    """A condition in one line for a reader ("platform.os = linux and gpu.sm >= 80")."""
    if not isinstance(cond, Mapping):
        return str(cond)
    if "all" in cond:
        return " and ".join(_grouped(c) for c in cond["all"])
    if "any" in cond:
        return " or ".join(_grouped(c) for c in cond["any"])
    if "not" in cond:
        return f"not ({describe(cond['not'])})"
    subject = next((str(cond[k]) for k in ("fact", "env", "package", "backend", "framework", "finding") if k in cond), "?")
    if "finding" in cond:
        return f"{subject} {'fires' if cond['fired'] else 'does not fire'}"
    if "package" in cond and "installed" in cond:
        return f"{subject} {'installed' if cond['installed'] else 'not installed'}"
    if "is_set" in cond:
        return f"{subject} {'set' if cond['is_set'] else 'not set'}"
    if "out_for" in cond:
        return f"{subject} out for {' or '.join(cond['out_for'])}"
    if "available_but_for" in cond:
        return f"{subject} out only for {', '.join(cond['available_but_for'])}"
    for key in ("available", "selected", "has_backend"):
        if key in cond:
            return f"{subject} {key.replace('_', ' ')}" if cond[key] else f"{subject} not {key.replace('_', ' ')}"
    if "selects" in cond:
        return f"{subject} selects {cond['selects']}"
    parts = []
    for op, word in _OP_WORDS.items():
        if op in cond:
            val = cond[op]
            shown = ", ".join(str(v) for v in val) if isinstance(val, list) else str(val)
            parts.append(f"{subject}{shown}" if op == "version" else f"{subject} {word} {shown}")
    text = " and ".join(parts) or subject
    if "if_unknown" in cond:
        text += f" (taken as {'true' if cond['if_unknown'] else 'false'} where {subject} is unknown)"
    return text


def _grouped(cond: Any) -> str:
    text = describe(cond)
    return f"({text})" if isinstance(cond, Mapping) and ("all" in cond or "any" in cond) else text
