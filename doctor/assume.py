"""What-if: the facts as they would be after applying pins, environment settings and
workload changes (`check --assume flash-attn==2.5.8 --assume-env NVTE_FLASH_ATTN=1`).

An assumed pin updates every fact it implies: a torch pin moves torch's CUDA version and the
cuDNN it bundles (and so the cuDNN it loads); an nvidia-cudnn-cuXX pin moves the cuDNN torch
loads. Pure functions: nothing here touches the machine.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Iterable, Mapping, Optional, Tuple

from doctor.errors import InputError
from doctor.model import Facts, ImportStatus, Pin, Workload, frozen_map

def parse_env_assignment(text: str) -> Tuple[str, Optional[str]]:
    """NAME=VALUE sets, NAME= sets empty, NAME (no '=') unsets."""
    name, eq, value = text.partition("=")
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
        raise InputError(f"--assume-env {text!r}: expected NAME=VALUE", hint="e.g. --assume-env NVTE_FLASH_ATTN=1")
    return name, (value if eq else None)


def _short(version: str) -> str:
    parts = version.split(".")
    return ".".join(parts[:3])


# The modules a distribution provides, whose import status a fresh install of it replaces.
MODULES = {
    "flash-attn": ("flash_attn", "flash_attn_2_cuda"),
    "flash-attn-3": ("flash_attn_interface",),
    "flash-attn-4": ("flash_attn.cute",),
    "transformer-engine": ("transformer_engine",),
    "transformer-engine-torch": ("transformer_engine",),
    "xformers": ("xformers",),
}
# Compiled extensions whose binary must match torch: a torch move reinstalls them too.
TORCH_EXTENSIONS = ("flash-attn", "flash-attn-3", "transformer-engine", "transformer-engine-torch", "xformers")


def apply_pins(facts: Facts, pins: Iterable[Pin]) -> Facts:
    """Facts as they would be after `pip install PIN ...`. A pinned package is assumed to be
    installed from the prebuilt wheel that matches this torch (the fix planner names it), so
    its import status becomes ok; a torch move assumes the same of torch's compiled extensions."""
    from doctor.releases.catalogue import torch_bundle

    packages = dict(facts.packages or {})
    torch, cudnn, cuda = facts.torch, facts.cudnn, facts.cuda
    imports = dict(facts.imports)
    unknown = dict(facts.unknown)
    assumed_ok = ImportStatus(status="ok", cause="assumed: installed from the wheel matching this torch")
    for pin in pins:
        name, version = pin.name, pin.version
        packages[name] = version
        reinstalled = [name] + ([d for d in TORCH_EXTENSIONS if d in packages] if name == "torch" else [])
        for dist in reinstalled:
            for module in MODULES.get(dist, ()):
                if module in imports:
                    imports[module] = assumed_ok
        if "flash-attn" in reinstalled and facts.cuda.flash_attn_archs is not None:
            # the extension read for its GPU code (cuda.flash_attn_archs) is replaced by the wheel
            cuda = replace(cuda, flash_attn_archs=None)
        if "xformers" in reinstalled and facts.cuda.xformers_fa3 is not None:
            # the build read for its FlashAttention-3 extension is replaced by the release wheel
            cuda = replace(cuda, xformers_fa3=None)
        if name == "torch":
            bundle = torch_bundle(version)
            # the new build's compiled architectures were never read: rules fall back on what
            # the release build is known to carry
            torch = replace(torch, version=version, arch_list=None)
            if bundle is None:
                # Not in the release catalogue: what it bundles is unknown, never guessed.
                unknown.update({"torch.cuda": f"torch {version} is not in the release catalogue", "cudnn": f"torch {version} is not in the release catalogue"})
                torch = replace(torch, cuda=None, cudnn_version=None, cxx11_abi=None)
                cudnn = replace(cudnn, version=None, loaded=None, bundled=None)
            else:
                torch = replace(torch, cuda=bundle.cuda, cudnn_version=_short(bundle.cudnn) if bundle.cudnn else None)
                if getattr(bundle, "cxx11_abi", None) is not None:
                    torch = replace(torch, cxx11_abi=bundle.cxx11_abi)
                if bundle.cudnn:
                    # pip resolves torch's exact cuDNN pin: the wheel is replaced with it.
                    for dist in list(packages):
                        if dist.startswith("nvidia-cudnn-cu"):
                            del packages[dist]
                    if bundle.cudnn_dist:
                        packages[bundle.cudnn_dist] = bundle.cudnn
                    short = _short(bundle.cudnn)
                    cudnn = replace(cudnn, version=short, loaded=short, installed=short, bundled=short)
        elif name.startswith("nvidia-cudnn-cu"):
            # torch loads the cuDNN wheel of its own CUDA major: a cu11 wheel under a cu12 torch
            # is installed but never loaded.
            wheel_major = name[len("nvidia-cudnn-cu"):]
            torch_major = (torch.cuda or "").split(".")[0]
            short = _short(version)
            if torch_major and wheel_major != torch_major:
                cudnn = replace(cudnn, installed=short)
                continue
            cudnn = replace(cudnn, version=short, loaded=short, installed=short)
            torch = replace(torch, cudnn_version=short)
    # a moved package's installed Requires-Dist is not the new release's
    requires = {k: v for k, v in (facts.requires or {}).items() if (facts.packages or {}).get(k) == packages.get(k)}
    return replace(
        facts,
        packages=frozen_map(packages) if facts.packages is not None or packages else None,
        requires=frozen_map(requires) if facts.requires is not None else None,
        torch=torch,
        cudnn=cudnn,
        cuda=cuda,
        imports=frozen_map(imports) or {},
        unknown=frozen_map(unknown) or {},
    )


def apply_env(facts: Facts, assignments: Mapping[str, Optional[str]]) -> Facts:
    env = dict(facts.env or {})
    for name, value in assignments.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return replace(facts, env=frozen_map(env))


def apply_workload(workload: Workload, changes: Mapping[str, Any]) -> Workload:
    """The workload with `changes` (workload keys, as in a workload file) laid over it."""
    if not changes:
        return workload
    from doctor.workload import build

    return build(changes, base=workload, source=workload.source)
