"""The user's workload: from a YAML/JSON file, from flags, or from a Hugging Face config.json.

Whatever the user does not say comes from the default profile (bf16, head_dim 128, GQA 32/8,
causal, training, seq 4096), and `Workload.defaulted` lists those fields so the report can
say so. Unknown keys are errors naming the key.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from doctor.errors import InputError
from doctor.model import (
    ATTN_IMPLEMENTATIONS,
    CP_COMM_TYPES,
    CP_IMPLS,
    ATTENTION_BACKENDS,
    FINETUNES,
    METHODS,
    SOFTMAX_TYPES,
    DISTRIBUTED,
    DTYPES,
    FP8_RECIPES,
    FRAMEWORKS,
    MASKS,
    PACKINGS,
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
    "alibi_custom_slopes",
    "dropout",
    "qkv_format",
    "qkv_packed",
    "varlen",
    "training",
    "deterministic",
    "fp8",
    "kv_cache",
    "paged_kv_cache",
    "sdpa_fa3",
    "pad_between_seqs",
    "xformers",
    "fp8_recipe",
    "distributed",
    "grad_accum_steps",
    "context_parallel",
    "attn_implementation",
    "framework",
    "model_type",
    "text_model_type",
    "unused_sliding_window",
    "vision_tower",
    "remote_code",
    "qkv_weight_interleaved",
    "packing",
    "tensor_parallel",
    "attention_backend",
    "flash_attention_version",
    "legacy_models",
    "use_cache",
    "deterministic_flash_attn",
    "gradient_checkpointing",
    "model_compile",
    "static_cache",
    "finetune",
    "method",
    "softmax_type",
    "axolotl_attn",
    "axolotl_flash_flag",
    "axolotl_glm_dsa",
    "axolotl_flags",
    "axolotl_unsloth",
)

# axolotl's attention name as its config gives it (a canonical name, a Hub-kernel path such as
# kernels-community/flash-attn2@v2:flash_attn, "none" or "conflict"; see Workload.axolotl_attn)
_AXOLOTL_ATTN = re.compile(r"[A-Za-z0-9_./@:+-]{1,200}")

# axolotl's legacy attention keys set true, comma-joined (see Workload.axolotl_flags), or "none"
_AXOLOTL_FLAGS = re.compile(r"none|[a-z0-9]{1,16}_attention(,[a-z0-9]{1,16}_attention){0,15}")

# axolotl's unsloth_* options set true, comma-joined (see Workload.axolotl_unsloth), or "none"
_AXOLOTL_UNSLOTH = re.compile(r"none|unsloth_[a-z_]{1,32}(,unsloth_[a-z_]{1,32}){0,15}")

# the workload keys that hold a comma-joined list of axolotl config keys: (shape, what is expected)
_AXOLOTL_KEY_LISTS = {
    "axolotl_flags": (_AXOLOTL_FLAGS, "axolotl's legacy attention keys set true (e.g. flash_attention,flex_attention)"),
    "axolotl_unsloth": (_AXOLOTL_UNSLOTH, "axolotl's unsloth_* options set true (e.g. unsloth_lora_mlp,unsloth_rope)"),
}

# a config.json model_type (the outer model's, or its text_config's)
_MODEL_TYPE = re.compile(r"[A-Za-z0-9_.-]{1,64}")

# The boolean keys: in a workload file as true/false, on the command line as --KEY / --no-KEY.
# A workload key whose command-line flag has another name: `--distributed` is check's own option
# (run on every rank), so the parallelism strategy (fsdp, deepspeed, megatron, ...) is `--strategy`
FLAG_NAMES = {"distributed": "strategy"}
BOOL_KEYS = ("alibi", "alibi_custom_slopes", "qkv_packed", "varlen", "training", "deterministic", "fp8", "kv_cache", "paged_kv_cache", "sdpa_fa3", "pad_between_seqs", "xformers", "vision_tower", "remote_code", "qkv_weight_interleaved", "use_cache", "deterministic_flash_attn", "gradient_checkpointing", "model_compile", "static_cache", "axolotl_flash_flag", "axolotl_glm_dsa", "legacy_models")

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
        elif key == "framework":
            out["framework"] = _choice(key, str(value).replace("_", "-").replace("llama-factory", "llamafactory"), FRAMEWORKS, path, line)
        elif key == "packing":
            out["packing"] = _choice(key, str(value).replace("-", "_"), PACKINGS, path, line)
        elif key == "fp8_recipe":
            out["fp8_recipe"] = _choice(key, value, FP8_RECIPES, path, line)
        elif key == "distributed":
            out["distributed"] = _choice(key, value, DISTRIBUTED, path, line)
        elif key == "finetune":
            out["finetune"] = _choice(key, str(value).replace("-", "_"), FINETUNES, path, line)
        elif key == "method":
            out["method"] = _choice(key, str(value).replace("-", "_"), METHODS, path, line)
        elif key == "axolotl_attn":
            text = str(value).strip()
            if not _AXOLOTL_ATTN.fullmatch(text):
                raise _bad(key, value, "expected an axolotl attention name (flash_attention_2, sdpa, xformers, a Hub kernel path, none, conflict)", path, line)
            out[key] = text
        elif key in _AXOLOTL_KEY_LISTS:
            pattern, expected = _AXOLOTL_KEY_LISTS[key]
            text = str(value).strip().replace(" ", "")
            if not pattern.fullmatch(text):
                raise _bad(key, value, f"expected {expected}, comma-separated, or none", path, line)
            out[key] = text
        elif key == "softmax_type":
            out["softmax_type"] = _choice(key, str(value).replace("_", "-"), SOFTMAX_TYPES, path, line)
        elif key == "attention_backend":
            out["attention_backend"] = _choice(key, str(value).split(".")[-1].lower(), ATTENTION_BACKENDS, path, line)
        elif key == "flash_attention_version":
            n = _int(key, value, path, line)
            if n not in (2, 3, 4):
                raise _bad(key, value, "expected 2, 3 or 4 (Megatron-Core's --flash-attention-version)", path, line)
            out[key] = n
        elif key in ("model_type", "text_model_type"):
            text = str(value).strip()
            if not _MODEL_TYPE.fullmatch(text):
                raise _bad(key, value, "expected a config.json model_type such as qwen2 or llama", path, line)
            out[key] = text.lower()
        elif key == "head_dim":
            out["head_dim_qk"] = out["head_dim_v"] = _int(key, value, path, line)
        elif key == "seq_len":
            out["seq_len_q"] = out["seq_len_kv"] = _int(key, value, path, line)
        elif key in ("head_dim_qk", "head_dim_v", "num_heads", "num_kv_heads", "seq_len_q", "seq_len_kv", "batch_size", "grad_accum_steps", "unused_sliding_window", "tensor_parallel"):
            out[key] = _int(key, value, path, line)
        elif key in BOOL_KEYS:
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
            out["context_parallel"] = _cp(value, path, line, base.context_parallel)
    # `varlen: true` and `packing: varlen` say the same thing; either sets the other.
    if out.get("packing") == "varlen":
        out["varlen"] = True
    elif "packing" in out and "varlen" not in out:
        out["varlen"] = False
    elif out.get("varlen") is True and "packing" not in out:
        out["packing"] = "varlen"
    elif out.get("varlen") is False and "packing" not in out and base.packing == "varlen":
        out["packing"] = "padded"
    if out.get("varlen") is True and out.get("packing", "varlen") != "varlen":
        raise _bad("packing", out["packing"], "contradicts varlen: true", path, lines.get("packing"))
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
    if (out.get("framework", base.framework) == "nemo" and out.get("model_type", base.model_type) == "gpt_oss"
            and "softmax_type" not in out and base.softmax_type is None):
        # NeMo's GPT-OSS config gives TransformerEngine a learnable attention sink unless told
        # otherwise (GPTOSSConfig.softmax_type = "learnable": nemo/collections/llm/gpt/model/
        # gpt_oss.py:82 in the nemo-toolkit 2.6.0 and 2.7.3 wheels; 2.5 has no GPT-OSS): a default,
        # listed as one (check-R7 of sample 28)
        out["softmax_type"] = "learnable"
        defaulted = tuple(dict.fromkeys(defaulted + ("softmax_type",)))
    return replace(base, **out, source=source, defaulted=defaulted)


_ALL_FIELDS = tuple(f.name for f in fields(Workload) if f.name not in ("source", "defaulted"))


def _cp(value: Any, path: Optional[str], line: Optional[int], base: ContextParallel = ContextParallel()) -> ContextParallel:
    """`{size, comm_type, impl, attn_implementation}` laid over `base` (a key not given keeps base's value)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return replace(base, size=_int("context_parallel", value, path, line))
    if not isinstance(value, Mapping):
        raise _bad("context_parallel", value, "expected {size: N, comm_type: p2p|a2a|all_gather|a2a+p2p, impl: te|torch_ring|ulysses|ring_flash_attn, attn_implementation: sdpa|...}", path, line)
    unknown = set(value) - {"size", "comm_type", "impl", "attn_implementation"}
    if unknown:
        raise InputError(f"workload: context_parallel: unknown key {sorted(unknown)[0]!r}", path=path, line=line)
    size = _int("context_parallel.size", value.get("size", base.size), path, line)
    comm = _choice("context_parallel.comm_type", value.get("comm_type", base.comm_type), CP_COMM_TYPES, path, line)
    impl = value.get("impl", base.impl)
    if impl is not None:
        impl = _choice("context_parallel.impl", str(impl).replace("-", "_"), CP_IMPLS, path, line)
    attn = value.get("attn_implementation", base.attn_implementation)
    if attn is not None:
        attn = _choice("context_parallel.attn_implementation", attn, ATTN_IMPLEMENTATIONS, path, line)
    return ContextParallel(size=size, comm_type=comm, impl=impl, attn_implementation=attn)


def default_workload() -> Workload:
    return replace(DEFAULT, source="default profile", defaulted=_ALL_FIELDS)


def load_workload_file(path: Path, base: Optional[Workload] = None) -> Workload:
    from doctor.yamlio import LineDict, read_yaml

    doc = read_yaml(path, what="workload file")
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise InputError("a workload file must be a mapping of workload keys", path=str(path), line=1)
    if "workload" in doc and len(doc) == 1 and isinstance(doc["workload"], dict):
        doc = doc["workload"]
    lines = getattr(doc, "key_lines", {}) if isinstance(doc, LineDict) else {}
    return build(doc, base=base or default_workload(), source=str(path), path=str(path), lines=lines)


# --------------------------------------------------------------------------- model config


def _model_config_path(path: Path) -> Path:
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise InputError("model config not found", path=str(path), hint="pass a config.json or a model folder holding one")
    return path


def workload_from_model(path: Path, overridden: Tuple[str, ...] = ()) -> Dict[str, Any]:
    """Workload keys derived from a Hugging Face config.json (no network, read as JSON)."""
    cfg_path = _model_config_path(path)
    from doctor.bounded import load_document

    try:
        cfg, _ = load_document(cfg_path, "json", what="model config")
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", path=str(cfg_path), line=exc.lineno) from None
    if not isinstance(cfg, dict):
        raise InputError("config.json must be a JSON object", path=str(cfg_path), line=1)
    return _model_keys(cfg, str(cfg_path), overridden)


_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads")
_KV_KEYS = ("num_key_value_heads", "num_kv_heads", "multi_query_group_num")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")  # d_model: MPT
_WINDOW_SWITCH_OFF_BY_DEFAULT = frozenset({
    "qwen2", "qwen2_moe", "qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2_5_omni",
    "qwen2_5_omni_text", "qwen2_5_omni_thinker", "qwen3", "qwen3_moe", "got_ocr2", "smollm3",
})
_MODEL_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16", "float32": "float32", "float": "float32"}


def _first(c: Mapping[str, Any], keys: Tuple[str, ...]) -> Tuple[Optional[str], Any]:
    for k in keys:
        if c.get(k) is not None:
            return k, c[k]
    return None, None


def _model_keys(cfg: Mapping[str, Any], where: str, overridden: Tuple[str, ...] = ()) -> Dict[str, Any]:
    """Workload keys from a config.json. A value that is there but cannot be used is an input
    error naming the key: a model's workload is never silently replaced by the default profile."""

    def bad(key: str, value: Any, why: str) -> InputError:
        return InputError(f"{key}={value!r}: {why}", path=where, hint="fix the config, or pass the workload as flags / -w")

    def pos_int(key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise bad(key, value, "expected a positive integer")
        return value

    text_cfg = cfg.get("text_config")
    if text_cfg is not None and not isinstance(text_cfg, dict):
        raise bad("text_config", text_cfg, "expected a JSON object (the language model's config)")
    c = {**cfg, **(text_cfg or {})}
    out: Dict[str, Any] = {}
    head_key, heads = _first(c, _HEAD_KEYS)
    if head_key is None:
        raise InputError(
            "not a model config: no num_attention_heads (or n_head)",
            path=where,
            hint="pass the model's config.json (not generation_config.json or tokenizer_config.json), or the workload as flags / -w",
        )
    heads = pos_int(head_key, heads)
    out["num_heads"] = heads
    kv_key, kv = _first(c, _KV_KEYS)
    if c.get("multi_query") is True:
        kv_key, kv = "multi_query", 1
    if kv_key is not None:
        kv = pos_int(kv_key, kv)
        if kv > heads or heads % kv:
            raise bad(kv_key, kv, f"must divide {head_key}={heads}")
    out["num_kv_heads"] = kv if kv_key is not None else heads
    mla_keys = [k for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if c.get(k) is not None]
    if mla_keys:
        dims = {k: pos_int(k, c[k]) if not (k == "qk_rope_head_dim" and c[k] == 0) else 0 for k in mla_keys}
        if "qk_nope_head_dim" not in dims or "qk_rope_head_dim" not in dims:
            missing = "qk_nope_head_dim" if "qk_nope_head_dim" not in dims else "qk_rope_head_dim"
            raise InputError(f"{missing} is missing next to {', '.join(mla_keys)} (an MLA config needs both)", path=where)
        out["head_dim_qk"] = dims["qk_nope_head_dim"] + dims["qk_rope_head_dim"]
        out["head_dim_v"] = dims.get("v_head_dim", dims["qk_nope_head_dim"])
    elif c.get("head_dim") is not None:
        out["head_dim"] = pos_int("head_dim", c["head_dim"])
    else:
        hidden_key, hidden = _first(c, _HIDDEN_KEYS)
        if hidden_key is None:
            raise InputError(
                f"no head_dim and no hidden_size to derive it from ({head_key}={heads})",
                path=where,
                hint="add head_dim to the config, or pass --head-dim",
            )
        hidden = pos_int(hidden_key, hidden)
        if hidden % heads:
            raise bad(hidden_key, hidden, f"is not a multiple of {head_key}={heads}, so the head dim is unknown")
        out["head_dim"] = hidden // heads
    window = c.get("sliding_window")
    # where the config class has a use_sliding_window switch it defaults to False (transformers
    # 4.41-4.57 configuration_qwen2/qwen2_moe/qwen3/qwen3_moe/qwen2_vl/qwen2_5_vl/qwen2_5_omni/
    # got_ocr2/smollm3.py), and save_pretrained leaves default values out: a missing key is off
    # there; other families (Mistral, ...) have no switch, their window always applies
    switch_default = str(c.get("model_type", "")) not in _WINDOW_SWITCH_OFF_BY_DEFAULT
    if window is not None and c.get("use_sliding_window", switch_default) is not False:
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise bad("sliding_window", window, "expected a window length (integer >= 0) or null")
        if window > 0:
            out["window_size"] = [window - 1, 0]
    elif isinstance(window, int) and not isinstance(window, bool) and window > 0:
        out["unused_sliding_window"] = window  # kept in the config but switched off
    softcap = c.get("attn_logit_softcapping")
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or softcap < 0:
            raise bad("attn_logit_softcapping", softcap, "expected a number >= 0 or null")
        if softcap:
            out["softcap"] = float(softcap)
    dtype_key, dtype = _first(c, ("torch_dtype", "dtype"))
    if dtype_key is not None and "dtype" not in overridden:
        name = str(dtype).replace("torch.", "")
        if name.startswith("float8"):
            out["dtype"] = "fp8"
        elif name in _MODEL_DTYPES:
            out["dtype"] = _MODEL_DTYPES[name]
        elif name != "auto":
            raise bad(dtype_key, dtype, "not a dtype attention runs in (bfloat16, float16, float32, float8_*); pass --dtype")
    if isinstance(cfg.get("model_type"), str) and _MODEL_TYPE.fullmatch(cfg["model_type"]):
        out["model_type"] = cfg["model_type"]  # the outer model's family, not its text_config's
    # a wrapper's language model (LLaVA, Qwen2-Audio, ...) is built from its text_config, whose own
    # model_type says which family's attention and mask code runs (qwen2 inside llava)
    text_type = text_cfg.get("model_type") if isinstance(text_cfg, dict) else None
    if isinstance(text_type, str) and _MODEL_TYPE.fullmatch(text_type):
        out["text_model_type"] = text_type.lower()
    # a vision tower (Qwen-VL's `visual`, the `vision_config` of InternVL, LLaVA, ...): Qwen-VL
    # shares model_type qwen with Qwen-1 text and Qwen-Audio, whose remote code differs
    out["vision_tower"] = any(isinstance(cfg.get(k), dict) for k in ("visual", "vision_config"))
    # the checkpoint's own modeling code for AutoModelForCausalLM (auto_map, as microsoft's Phi-3
    # checkpoints ship): built instead of transformers' classes where the loader passes trust_remote_code
    auto_map = cfg.get("auto_map")
    out["remote_code"] = isinstance(auto_map, dict) and isinstance(auto_map.get("AutoModelForCausalLM"), str)
    # ModernBERT's switch for the deterministic flash-attention backward (saved in its config.json)
    if isinstance(c.get("deterministic_flash_attn"), bool):
        out["deterministic_flash_attn"] = c["deterministic_flash_attn"]
    impl = c.get("_attn_implementation") or c.get("attn_implementation")
    if isinstance(impl, str) and impl in ATTN_IMPLEMENTATIONS:
        out["attn_implementation"] = impl
    attn_cfg: Dict[str, Any] = c["attn_config"] if isinstance(c.get("attn_config"), dict) else {}
    uses_alibi = (
        c.get("alibi") is True  # Falcon and others that make it a flag
        or c.get("position_embedding_type") == "alibi"
        or attn_cfg.get("alibi") is True  # MPT
        or (c.get("model_type") == "bloom" and c.get("alibi") is not False)  # BLOOM always uses ALiBi
    )
    if uses_alibi:
        out["alibi"] = True
    max_pos = c.get("max_position_embeddings")
    if max_pos is not None:
        max_pos = pos_int("max_position_embeddings", max_pos)
        out["seq_len"] = min(max_pos, 4096)
    return out


def resolve_workload(
    workload_file: Optional[Path] = None,
    model: Optional[Path] = None,
    flags: Optional[Mapping[str, Any]] = None,
    configs: Sequence[Tuple[str, Mapping[str, Any]]] = (),
) -> Workload:
    """Default profile <- model config <- --config files <- workload file <- flags (later wins)."""
    w = default_workload()
    sources = []
    if model is not None:
        given_flags = tuple(k for k, v in (flags or {}).items() if v is not None)
        w = build(workload_from_model(model, given_flags), base=w, source=f"model {model}", path=str(model))
        sources.append(f"model {model}")
    for name, keys in configs:
        if keys:
            w = build(keys, base=w, source=name, path=name)
            sources.append(name)
    if workload_file is not None:
        w = load_workload_file(workload_file, base=w)
        sources.append(str(workload_file))
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    if given:
        w = build(given, base=w, source="flags")
        sources.append("flags")
        cp_flags = given.get("context_parallel") or {}
        if isinstance(cp_flags, Mapping) and w.cp_size <= 1 and ("comm_type" in cp_flags or "impl" in cp_flags):
            # a comm type with no CP size anywhere (flags, workload file, config) would be dropped silently
            what = f"--cp-comm-type {cp_flags['comm_type']}" if "comm_type" in cp_flags else f"--cp-impl {cp_flags['impl']}"
            raise InputError(f"{what} needs a context-parallel size >= 2: without it there is no context parallelism", hint="add --cp-size, e.g. --cp-size 2")
    if sources:
        w = replace(w, source=" + ".join(sources))
    return w
