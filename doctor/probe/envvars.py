"""Environment variables that change how the attention stack loads or behaves, with secrets removed.

Values of secret-like names (HF_TOKEN, *_API_KEY, ...) become "<redacted>"; credentials inside
other values (https://user:pass@host, ?token=..., hf_... tokens) are scrubbed as well, so a
snapshot can be attached to a bug report as it is.
"""

from __future__ import annotations

import re
from typing import Dict, Mapping

REDACTED = "<redacted>"

PREFIXES = (
    "NVTE_",
    "CUDA_",
    "CUDNN_",
    "CUBLAS",
    "NVIDIA_",
    "NCCL_",
    "TORCH",  # TORCH_*, TORCHINDUCTOR_*, TORCHDYNAMO_*, TORCHELASTIC_*
    "PYTORCH_",
    "FLASH_ATTN",
    "FLASH_ATTENTION",
    "XFORMERS",
    "HF_",
    "HUGGING_FACE_",
    "TRANSFORMERS_",
    "ACCELERATE_",
    "PARALLELISM_CONFIG_",  # accelerate 1.10+ reads ParallelismConfig from these (ACCEL-SP-ATTN-IMPLEMENTATION-REFUSED)
    "TRITON_",
    "CUTE_DSL_",
    "XTUNER_",
    "NEMO_",
)
NAMES = frozenset(
    {
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "PYTHONPATH",
        "CONDA_PREFIX",
        "VIRTUAL_ENV",
        "MAX_JOBS",
        "OMP_NUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "DISABLE_VERSION_CHECK",  # LLaMA-Factory skips its dependency check (LF-*-DEPENDENCY-WINDOW)
        "USE_V1",  # LLaMA-Factory 0.9.4+ runs its v1 launcher, which has no dependency check
        "SEQUENCE_PARALLEL_IMPL",  # ms-swift 3.4.1-3.8.x pick their sequence-parallel code (SWIFT-ULYSSES-HEADS)
        "DS_CEPH_DIR",  # XTuner 0.1.x's __init__ imports xtuner.utils (and so deepspeed) when set (XTUNER-11)
        "HSA_XNACK",  # ROCm: with 1, HIP names the GPU ...:xnack+, which torch 2.3-2.5's AOTriton does not map (SDPA-*-ROCM-XNACK-*)
        "FA_DISABLE_2CTA",  # flash-attn-4 4.0.0b36+: with it the generic hd256 backward refuses (FA4-SOFTCAP-HEAD-DIM-256, FA4-HD256-LOCAL)
        "USE_MCA",  # LLaMA-Factory 0.9.4+ takes its Megatron-Core route (mcore_adapter), which imports TE (te_pytorch_imported)
    }
)
SECRET_WORDS = (
    "TOKEN",
    "KEY",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "PRIVATE",
    "SESSION",
    "SIGNATURE",
)

# Any user part of a URL: https://user:pass@host and https://TOKEN@host (user-only credentials).
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_QUERY_SECRET = re.compile(
    r"(?i)([?&;](?:[a-z0-9_.-]*(?:token|key|secret|password|passwd|auth|signature|sig|credential)[a-z0-9_.-]*)=)[^&;\s#]+"
)
# --password X, --token=X, api_key: X inside a value (a command line kept in a variable)
_OPTION_SECRET = re.compile(
    r"(?i)(\b-{0,2}(?:password|passwd|pwd|token|secret|api[-_]?key|access[-_]?key)[-_a-z]*(?:\s*[=:]\s*|\s+))[^\s\"',;]+"
)
# Known token shapes. The prefixes are distinctive enough that any length counts (truncated and
# test tokens leak as much as real ones).
_TOKENS = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"hf_[A-Za-z0-9]{6,}"  # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{6,}|github_pat_[A-Za-z0-9_]{6,}"  # GitHub
    r"|glpat-[A-Za-z0-9_-]{6,}"  # GitLab
    r"|sk-[A-Za-z0-9_-]{16,}"  # OpenAI-style
    r"|xox[abposre]-[A-Za-z0-9-]{6,}|xapp-[A-Za-z0-9-]{6,}"  # Slack
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{12,}"  # AWS access key ids
    r"|eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"  # JWT
    r"|wandb_v1_[A-Za-z0-9_]{6,}|npm_[A-Za-z0-9]{16,}|pypi-[A-Za-z0-9_-]{16,}"
    r")"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}")
# Generic: a long run of key-like characters with high entropy and letters mixed with digits
# (AWS secret keys, W&B keys, random API keys). Paths are split at "/" first, so ordinary
# directory names stay readable.
_CANDIDATE = re.compile(r"[A-Za-z0-9+/=_-]{20,}")


def _entropy(text: str) -> float:
    import math

    counts: Dict[str, int] = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _looks_random(chunk: str) -> bool:
    if len(chunk) < 20:
        return False
    has_digit = any(c.isdigit() for c in chunk)
    has_lower = any(c.islower() for c in chunk)
    has_upper = any(c.isupper() for c in chunk)
    if not has_digit or not (has_lower or has_upper):
        return False
    digits = sum(c.isdigit() for c in chunk)
    if digits / len(chunk) > 0.9:
        return False
    return _entropy(chunk) >= (3.0 if len(chunk) >= 32 else 3.5)


def _generic(match: "re.Match[str]") -> str:
    run = match.group(0)
    if _looks_random(run) and "/" not in run.strip("/"):
        return REDACTED
    if "/" in run:  # a path or base64 with slashes: judge the whole, then each segment
        if _looks_random(run.replace("/", "")) and not run.startswith("/") and run.count("/") <= 2 and len(run) >= 30:
            return REDACTED
        return "/".join(REDACTED if _looks_random(seg) else seg for seg in run.split("/"))
    return run


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def scrub(text: str, *, random_strings: bool = False) -> str:
    """`text` with credentials in URLs, query strings, options and known token shapes replaced
    by "<redacted>". `random_strings`: also long random-looking runs (for environment values,
    where nothing needs them; error messages keep them, a mangled C++ symbol looks random)."""
    text = _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _QUERY_SECRET.sub(lambda m: m.group(1) + REDACTED, text)
    text = _OPTION_SECRET.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + " " + REDACTED, text)
    text = _TOKENS.sub(REDACTED, text)
    return _CANDIDATE.sub(_generic, text) if random_strings else text


def is_relevant(name: str) -> bool:
    return name in NAMES or name.startswith(PREFIXES)


def relevant(environ: Mapping[str, str]) -> Dict[str, str]:
    """The attention/CUDA-relevant variables of `environ`, sorted by name, secrets redacted."""
    out: Dict[str, str] = {}
    for name in sorted(environ):
        if not is_relevant(name):
            continue
        value = str(environ[name])
        out[name] = REDACTED if is_secret_name(name) else scrub(value, random_strings=True)
    return out
