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

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@:]*:[^/\s@]*@")
_URL_USER = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@:]{16,}@")
_QUERY_SECRET = re.compile(
    r"(?i)([?&;](?:[a-z0-9_.-]*(?:token|key|secret|password|passwd|auth|signature|sig|credential)[a-z0-9_.-]*)=)[^&;\s#]+"
)
_TOKENS = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|glpat-[A-Za-z0-9_-]{16,}|sk-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16})\b"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def scrub(text: str) -> str:
    """`text` with credentials in URLs, query strings and well-known token formats replaced."""
    text = _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _URL_USER.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _QUERY_SECRET.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + " " + REDACTED, text)
    return _TOKENS.sub(REDACTED, text)


def is_relevant(name: str) -> bool:
    return name in NAMES or name.startswith(PREFIXES)


def relevant(environ: Mapping[str, str]) -> Dict[str, str]:
    """The attention/CUDA-relevant variables of `environ`, sorted by name, secrets redacted."""
    out: Dict[str, str] = {}
    for name in sorted(environ):
        if not is_relevant(name):
            continue
        value = str(environ[name])
        out[name] = REDACTED if is_secret_name(name) else scrub(value)
    return out
