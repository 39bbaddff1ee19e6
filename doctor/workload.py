"""The user's workload: from a YAML/JSON file, from flags, or from a Hugging Face config.json.

Whatever the user does not say comes from the default profile (bf16, head_dim 128, GQA 32/8,
causal, training, seq 4096), and `Workload.defaulted` lists those fields so the report can
say so. Unknown keys are errors naming the key.
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

from doctor.errors import InputError
from doctor.model import (
    ATTN_IMPLEMENTATIONS,
    CP_COMM_TYPES,
    DTYPES,
    MASKS,
    QKV_FORMATS,
    ContextParallel,
    Workload,
)

DEFAULT = Workload()

# Keys accepted in a workload file (and as flags); aliases resolve onto Workload fields.
KEYS = (
    "dtype",
    "head_dim",
    "head_dim_qk",
    "head_dim_v",
    "num_heads",
    "num_kv_heads",
    "seq_len",
    "seq_len_q",
    "seq_len_kv",
    "batch_size",
    "mask",
    "window_size",
    "softcap",
    "alibi",
    "dropout",
    "qkv_format",
    "qkv_packed",
    "varlen",
    "training",
    "deterministic",
    "fp8",
    "context_parallel",
    "attn_implementation",
)

_DTYPE_ALIASES = {
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float": "fp32",
    "float8": "fp8",
}


def _bad(key: str, value: Any, why: str, path: Optional[str], line: Optional[int]) -> InputError:
    return InputError(f"workload: {key}={value!r}: {why}", path=path, line=line)


def _choice(key: str, value: Any, choices: Tuple[str, ...], path: Optional[str], line: Optional[int]) -> str:
    v = str(value).strip().lower()
    v = _DTYPE_ALIASES.get(v, v) if key == "dtype" else v
    if v not in choices:
        raise _bad(key, value, "expected one of " + ", ".join(choices), path, line)
    return v


def _int(key: str, value: Any, path: Optional[str], line: Optional[int], minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _bad(key, value, "expected an integer", path, line)
    try:
        n = int(value)
    except ValueError:
        raise _bad(key, value, "expected an integer", path, line) from None
    if n < minimum:
        raise _bad(key, value, f"must be >= {minimum}", path, line)
    if n > LIMITS.get(key, 1 << 31):
        raise _bad(key, value, f"must be <= {LIMITS.get(key, 1 << 31)}", path, line)
    return n


LIMITS = {"head_dim": 4096, "head_dim_qk": 4096, "head_dim_v": 4096, "num_heads": 65536, "num_kv_heads": 65536}


def _bool(key: str, value: Any, path: Optional[str], line: Optional[int]) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
        return value.lower() in ("true", "yes", "1")
    raise _bad(key, value, "expected true or false", path, line)


def _float(key: str, value: Any, path: Optional[str], line: Optional[int]) -> float:
    import math

    if isinstance(value, bool):
        raise _bad(key, value, "expected a number", path, line)
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise _bad(key, value, "expected a number", path, line) from None
    if not math.isfinite(x) or x < 0:
        raise _bad(key, value, "expected a finite number >= 0", path, line)
    return x


def build(
    given: Mapping[str, Any],
    *,
    base: Workload = DEFAULT,
    source: str = "flags",
    path: Optional[str] = None,
    lines: Optional[Mapping[str, int]] = None,
) -> Workload:
    """Validate `given` (workload keys) and lay it over `base`."""
    lines = lines or {}
    out: Dict[str, Any] = {}
    for key, value in given.items():
        line = lines.get(key)
        if key not in KEYS:
            raise InputError(
                f"workload: unknown key {key!r}",
                path=path,
                line=line,
                hint="known keys: " + ", ".join(KEYS),
            )
        if value is None:
            continue
        if key == "dtype":
            out["dtype"] = _choice(key, value, DTYPES, path, line)
        elif key == "mask":
            out["mask"] = _choice(key, value, MASKS, path, line)
        elif key == "qkv_format":
            out["qkv_format"] = _choice(key, value, QKV_FORMATS, path, line)
        elif key == "attn_implementation":
            out["attn_implementation"] = _choice(key, value, ATTN_IMPLEMENTATIONS, path, line)
        elif key == "head_dim":
            out["head_dim_qk"] = out["head_dim_v"] = _int(key, value, path, line)
        elif key == "seq_len":
            out["seq_len_q"] = out["seq_len_kv"] = _int(key, value, path, line)
        elif key in ("head_dim_qk", "head_dim_v", "num_heads", "num_kv_heads", "seq_len_q", "seq_len_kv", "batch_size"):
            out[key] = _int(key, value, path, line)
        elif key in ("alibi", "qkv_packed", "varlen", "training", "deterministic", "fp8"):
            out[key] = _bool(key, value, path, line)
        elif key in ("softcap", "dropout"):
            out[key] = _float(key, value, path, line)
            if key == "dropout" and not 0.0 <= out[key] < 1.0:
                raise _bad(key, value, "must be in [0, 1)", path, line)
        elif key == "window_size":
            if not (isinstance(value, (list, tuple)) and len(value) == 2):
                raise _bad(key, value, "expected [left, right] (use -1 for unbounded)", path, line)
            out["window_size"] = (
                _int(key, value[0], path, line, minimum=-1),
                _int(key, value[1], path, line, minimum=-1),
            )
        elif key == "context_parallel":
            out["context_parallel"] = _cp(value, path, line)
    if "num_kv_heads" in out and "num_heads" not in out and out["num_kv_heads"] > base.num_heads:
        out["num_heads"] = out["num_kv_heads"]
    if "num_heads" in out and "num_kv_heads" not in out and base.num_kv_heads > out["num_heads"]:
        out["num_kv_heads"] = out["num_heads"]
    nh = out.get("num_heads", base.num_heads)
    nkv = out.get("num_kv_heads", base.num_kv_heads)
    if nkv > nh or nh % nkv:
        raise InputError(
            f"workload: num_kv_heads={nkv} must divide num_heads={nh}", path=path, line=lines.get("num_kv_heads")
        )
    defaulted = tuple(name for name in base.defaulted if name not in out)
    return replace(base, **out, source=source, defaulted=defaulted)


_ALL_FIELDS = tuple(f.name for f in fields(Workload) if f.name not in ("source", "defaulted"))


def _cp(value: Any, path: Optional[str], line: Optional[int]) -> ContextParallel:
    if isinstance(value, int) and not isinstance(value, bool):
        return ContextParallel(size=_int("context_parallel", value, path, line))
    if not isinstance(value, Mapping):
        raise _bad("context_parallel", value, "expected {size: N, comm_type: p2p|a2a|all_gather|a2a+p2p}", path, line)
    unknown = set(value) - {"size", "comm_type"}
    if unknown:
        raise InputError(f"workload: context_parallel: unknown key {sorted(unknown)[0]!r}", path=path, line=line)
    size = _int("context_parallel.size", value.get("size", 1), path, line)
    comm = _choice("context_parallel.comm_type", value.get("comm_type", "p2p"), CP_COMM_TYPES, path, line)
    return ContextParallel(size=size, comm_type=comm)


def default_workload() -> Workload:
    return replace(DEFAULT, source="default profile", defaulted=_ALL_FIELDS)


def load_workload_file(path: Path, base: Optional[Workload] = None) -> Workload:
    from doctor.rules.loader import _LineDict, read_yaml
    from doctor.errors import RuleError

    try:
        doc = read_yaml(path, what="workload file")
    except RuleError as exc:  # same reader, but a workload is user input: exit 2 either way
        raise InputError(exc.message, path=str(path), line=exc.line, hint=exc.hint) from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise InputError("a workload file must be a mapping of workload keys", path=str(path), line=1)
    if "workload" in doc and len(doc) == 1 and isinstance(doc["workload"], dict):
        doc = doc["workload"]
    lines = getattr(doc, "key_lines", {}) if isinstance(doc, _LineDict) else {}
    return build(doc, base=base or default_workload(), source=str(path), path=str(path), lines=lines)


# --------------------------------------------------------------------------- model config


def _model_config_path(path: Path) -> Path:
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise InputError("model config not found", path=str(path), hint="pass a config.json or a model folder holding one")
    return path


def workload_from_model(path: Path) -> Dict[str, Any]:
    """Workload keys derived from a Hugging Face config.json (no network, read as JSON)."""
    cfg_path = _model_config_path(path)
    from doctor.bounded import load_document

    try:
        cfg, _ = load_document(cfg_path, "json", what="model config")
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", path=str(cfg_path), line=exc.lineno) from None
    if not isinstance(cfg, dict):
        raise InputError("config.json must be a JSON object", path=str(cfg_path), line=1)
    text_cfg = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    c = {**cfg, **(text_cfg or {})}
    out: Dict[str, Any] = {}
    heads = c.get("num_attention_heads") or c.get("n_head") or c.get("n_heads") or c.get("num_heads")
    if heads is not None and (isinstance(heads, bool) or not isinstance(heads, int) or heads < 1):
        raise InputError(f"num_attention_heads={heads!r}: expected a positive integer", path=str(cfg_path))
    if isinstance(heads, int):
        out["num_heads"] = heads
        kv = c.get("num_key_value_heads") or c.get("num_kv_heads") or c.get("multi_query_group_num")
        if c.get("multi_query") is True:
            kv = 1
        out["num_kv_heads"] = kv if isinstance(kv, int) and kv > 0 else heads
    if isinstance(c.get("qk_nope_head_dim"), int) and isinstance(c.get("qk_rope_head_dim"), int):
        out["head_dim_qk"] = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
        out["head_dim_v"] = c.get("v_head_dim") or c["qk_nope_head_dim"]
    elif isinstance(c.get("head_dim"), int):
        out["head_dim"] = c["head_dim"]
    elif isinstance(heads, int):
        hidden = c.get("hidden_size") or c.get("n_embd") or c.get("d_model")  # d_model: MPT
        if isinstance(hidden, int) and hidden % heads == 0:
            out["head_dim"] = hidden // heads
    window = c.get("sliding_window")
    if isinstance(window, int) and window > 0 and c.get("use_sliding_window", True) is not False:
        out["window_size"] = [window - 1, 0]
    softcap = c.get("attn_logit_softcapping")
    if isinstance(softcap, (int, float)) and softcap:
        out["softcap"] = float(softcap)
    dtype = c.get("torch_dtype") or c.get("dtype")
    if isinstance(dtype, str) and dtype.replace("torch.", "") in ("bfloat16", "float16", "float32"):
        out["dtype"] = dtype.replace("torch.", "")
    impl = c.get("_attn_implementation") or c.get("attn_implementation")
    if isinstance(impl, str) and impl in ATTN_IMPLEMENTATIONS:
        out["attn_implementation"] = impl
    attn_cfg = c.get("attn_config") if isinstance(c.get("attn_config"), dict) else {}
    uses_alibi = (
        c.get("alibi") is True  # Falcon and others that make it a flag
        or c.get("position_embedding_type") == "alibi"
        or attn_cfg.get("alibi") is True  # MPT
        or (c.get("model_type") == "bloom" and c.get("alibi") is not False)  # BLOOM always uses ALiBi
    )
    if uses_alibi:
        out["alibi"] = True
    max_pos = c.get("max_position_embeddings")
    if isinstance(max_pos, int) and max_pos > 0:
        out["seq_len"] = min(max_pos, 4096)
    return out


def resolve_workload(
    workload_file: Optional[Path] = None,
    model: Optional[Path] = None,
    flags: Optional[Mapping[str, Any]] = None,
) -> Workload:
    """Default profile <- model config <- workload file <- flags (later wins)."""
    w = default_workload()
    sources = []
    if model is not None:
        w = build(workload_from_model(model), base=w, source=f"model {model}", path=str(model))
        sources.append(f"model {model}")
    if workload_file is not None:
        w = load_workload_file(workload_file, base=w)
        sources.append(str(workload_file))
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    if given:
        w = build(given, base=w, source="flags")
        sources.append("flags")
    if sources:
        w = replace(w, source=" + ".join(sources))
    return w
