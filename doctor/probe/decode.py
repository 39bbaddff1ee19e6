"""Turn a failed import into a cause and a fix a person can act on.

The classic failures of compiled attention extensions are an `undefined symbol` (built
against another torch, the other C++ ABI, or another CUDA), a missing shared library (built
for another CUDA major or for a CUDA torch) and a too-old libstdc++. The C++ ABI is read from
the mangled symbol: `__cxx11` means the extension wants the new std::string ABI, a bare `Ss`
means it wants the old one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from doctor.probe.cuda_libs import version_key

_UNDEFINED = re.compile(r"(?:(\S+?\.so[^\s:]*):\s*)?undefined symbol:\s*(\S+)")
_CANNOT_OPEN = re.compile(r"(\S+\.so[^\s:]*): cannot open shared object file")
_GLIBCXX = re.compile(r"version `((?:GLIBCXX|CXXABI|GLIBC)_[\d.]+)' not found")
_OLD_ABI_STRING = re.compile(r"(?<=[EKRPI])Ss")
_TORCH_NS = ("_ZN3c10", "_ZNK3c10", "_ZN2at", "_ZNK2at", "_ZN5torch", "_ZNK5torch", "_ZN6caffe2")
_CUDA_PREFIXES = ("cuda", "__cuda", "cublas", "cudnn", "nccl", "cusparse", "cufft", "curand", "cusolver", "nvrtc", "nvJitLink", "cuGet", "cuLaunch")

PACKAGE = {
    "flash_attn": "flash-attn",
    "flash_attn_2_cuda": "flash-attn",
    "flash_attn_interface": "flash-attn 3 (hopper)",
    "flash_attn.cute": "flash-attn-4",
    "transformer_engine": "transformer-engine",
    "transformer_engine.pytorch": "transformer-engine",
    "xformers": "xformers",
    "torch": "torch",
}


@dataclass(frozen=True)
class TorchContext:
    """What the decoder needs to know about the torch that was (or would be) loaded."""

    version: Optional[str] = None  # 2.4.0+cu121
    cuda: Optional[str] = None  # 12.1
    cxx11_abi: Optional[bool] = None
    python_tag: Optional[str] = None  # cp311
    package_version: Optional[str] = None  # version of the failing package, e.g. flash-attn 2.6.3


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    fix: str


def _abi(value: Optional[bool]) -> str:
    return "unknown" if value is None else str(value).upper()


def _torch_xy(version: Optional[str]) -> str:
    parts = version_key((version or "").split("+", 1)[0])
    return f"{parts[0]}.{parts[1]}" if len(parts) >= 2 else "<this torch>"


def _cuda_tag(ctx: TorchContext) -> str:
    """The CUDA tag in flash-attn wheel names, which setup.py derives from torch.version.cuda.

    2.7.0 and later use the major only (cu12); 2.6.1-2.6.x map CUDA 12 to cu123 and 2.3.6-2.6.0
    to cu122 (CUDA 11 to cu118); older releases use major+minor (cu121), except that 2.3.0-2.3.5
    built torch 2.1 wheels with CUDA 12.2 only.
    """
    parts = version_key(ctx.cuda)
    if not parts:
        return "cu<none: CPU torch>"
    fa = version_key(ctx.package_version)[:3] if ctx.package_version else ()
    if not fa or fa >= (2, 7, 0):
        return f"cu{parts[0]}"
    if fa >= (2, 3, 6):
        if parts[0] == 11:
            return "cu118"
        return "cu123" if fa >= (2, 6, 1) else "cu122"
    if fa >= (2, 3, 0) and parts[0] == 12 and _torch_xy(ctx.version) == "2.1":
        return "cu122"
    return f"cu{parts[0]}{parts[1] if len(parts) > 1 else 0}"


def rebuild_fix(module: str, ctx: TorchContext, abi: Optional[bool] = None) -> str:
    """How to get `module` built for this torch (wheel name parts, or a build from source)."""
    xy = _torch_xy(ctx.version)
    want_abi = _abi(ctx.cxx11_abi if abi is None else abi)
    pkg = PACKAGE.get(module, module.split(".")[0])
    ver = ctx.package_version or "<version>"
    if module in ("flash_attn", "flash_attn_2_cuda"):
        py = ctx.python_tag or "cpXY"
        return (
            f"install the flash-attn wheel built for torch {xy}, {_cuda_tag(ctx)}, "
            f"cxx11abi{want_abi}, {py} (file name ends "
            f"+{_cuda_tag(ctx)}torch{xy}cxx11abi{want_abi}-{py}-{py}-linux_x86_64.whl), or build it "
            f"against this torch: FLASH_ATTENTION_FORCE_BUILD=TRUE pip install --no-build-isolation "
            f"--no-cache-dir --force-reinstall flash-attn=={ver} (without the variable its setup.py "
            f"downloads the release wheel again)"
        )
    if module == "flash_attn_interface":
        return (
            f"rebuild FlashAttention-3 against torch {xy}: in flash-attention/hopper run "
            "pip install --no-build-isolation ."
        )
    if module.startswith("transformer_engine"):
        return (
            f"reinstall transformer-engine built against torch {xy}: pip install "
            "--no-build-isolation --force-reinstall 'transformer_engine[pytorch]' (in an NGC "
            "image, use the transformer-engine that ships with the image)"
        )
    if module == "xformers":
        return (
            f"install the xformers release made for torch {ctx.version or xy} (each xformers "
            "wheel requires one exact torch version; see `pip show xformers`), or pip install "
            "--no-build-isolation xformers to build it"
        )
    return f"reinstall {pkg}=={ver} built against torch {xy} (pip install --no-build-isolation)"


def _undefined(module: str, lib: Optional[str], symbol: str, ctx: TorchContext) -> Diagnosis:
    pkg = PACKAGE.get(module, module)
    what = f"{pkg} wheel" if module != "torch" else "torch"
    torch_abi = ctx.cxx11_abi
    torch_lib = bool(lib) and re.search(r"/?lib(torch|c10|caffe2)[^/]*\.so", lib or "") is not None
    if symbol.startswith(_CUDA_PREFIXES) or "cudart" in symbol:
        if module == "torch" or torch_lib:
            return Diagnosis(
                f"a different CUDA/cuDNN/NCCL library than torch was built with is loaded "
                f"({symbol} missing)",
                "remove the folder holding the older library from LD_LIBRARY_PATH / LD_PRELOAD "
                "(torch brings its own in the nvidia-* wheels), or reinstall torch",
            )
        return Diagnosis(
            f"CUDA runtime mismatch: {what} was built against another CUDA version than torch "
            f"(CUDA {ctx.cuda or 'unknown'})",
            rebuild_fix(module, ctx),
        )
    if module == "torch":
        return Diagnosis(
            "torch's own libraries do not match each other (a second torch or libc10 earlier on "
            "LD_LIBRARY_PATH, or a partly overwritten install)",
            "pip install --force-reinstall --no-deps torch==" + (ctx.version or "<version>")
            + " and check LD_LIBRARY_PATH / LD_PRELOAD for other libtorch/libc10 folders",
        )
    wants_new = "__cxx11" in symbol
    wants_old = not wants_new and _OLD_ABI_STRING.search(symbol) is not None
    if wants_new and torch_abi is False:
        return Diagnosis(
            "C++ ABI mismatch (wheel built with cxx11abi=TRUE, torch uses FALSE)",
            rebuild_fix(module, ctx, abi=False),
        )
    if wants_old and torch_abi is True:
        return Diagnosis(
            "C++ ABI mismatch (wheel built with cxx11abi=FALSE, torch uses TRUE)",
            rebuild_fix(module, ctx, abi=True),
        )
    if (wants_new or wants_old) and torch_abi is None:
        built = "TRUE" if wants_new else "FALSE"
        return Diagnosis(
            f"C++ ABI mismatch (wheel built with cxx11abi={built}; torch's ABI unknown) or "
            f"{pkg} built for a different torch version",
            rebuild_fix(module, ctx),
        )
    if symbol.startswith(_TORCH_NS) or wants_new or wants_old:
        return Diagnosis(
            f"{pkg} wheel built for a different torch version (torch {ctx.version or 'unknown'} "
            f"has no {symbol})",
            rebuild_fix(module, ctx),
        )
    return Diagnosis(
        f"{pkg} was built against other versions of the libraries it links ({symbol} missing)",
        rebuild_fix(module, ctx),
    )


def _cannot_open(module: str, lib: str, ctx: TorchContext) -> Diagnosis:
    pkg = PACKAGE.get(module, module)
    base = lib.rsplit("/", 1)[-1]
    m = re.match(r"lib(cudart|cublas|cublasLt|cusparse|cufft|curand|nvrtc|cudnn)\.so\.(\d+)", base)
    if m:
        kind = "cuDNN" if m.group(1) == "cudnn" else "CUDA"
        have = ctx.cuda if kind == "CUDA" else None
        have_text = f", torch uses CUDA {have}" if have else ""
        return Diagnosis(
            f"{kind} runtime mismatch: {pkg} was built for {kind} {m.group(2)} ({base} not "
            f"found{have_text})",
            rebuild_fix(module, ctx),
        )
    if re.match(r"lib(torch_cuda|c10_cuda)\.so", base):
        return Diagnosis(
            f"{pkg} needs a CUDA build of torch, but torch {ctx.version or ''} is a CPU-only build".replace("  ", " "),
            "install a CUDA build of torch (pip install torch --index-url "
            "https://download.pytorch.org/whl/cuXYZ), then the matching " + pkg,
        )
    if re.match(r"lib(torch|c10)[^/]*\.so", base):
        return Diagnosis(
            f"torch's libraries were not found when loading {pkg} (torch missing or moved)",
            "import torch before the extension, or reinstall torch and then " + pkg,
        )
    return Diagnosis(
        f"a shared library {pkg} needs is missing: {base}",
        f"install the package that provides {base}, or add its folder to LD_LIBRARY_PATH",
    )


def diagnose(module: str, error: str, ctx: TorchContext) -> Optional[Diagnosis]:
    """Cause and fix for `import module` failing with `error`; None when not recognised."""
    m = _UNDEFINED.search(error)
    if m:
        return _undefined(module, m.group(1), m.group(2), ctx)
    m = _CANNOT_OPEN.search(error)
    if m:
        return _cannot_open(module, m.group(1), ctx)
    m = _GLIBCXX.search(error)
    if m:
        return Diagnosis(
            f"the C++ runtime is older than the one {PACKAGE.get(module, module)} was built "
            f"with ({m.group(1)} not found)",
            "use a newer base image, or put a newer libstdc++ first (conda install -c "
            "conda-forge libstdcxx-ng)",
        )
    if re.search(r"No module named '?torch'?", error) and module != "torch":
        return Diagnosis(
            f"{PACKAGE.get(module, module)} is installed but torch is not",
            "install torch first, then reinstall " + PACKAGE.get(module, module),
        )
    return None
