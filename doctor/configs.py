"""`--config FILE`: read the configs users already have, recognised by their content.

    read_config(path) -> ConfigRead(kind, workload keys, packages, facts, env, took, notes)

| kind | recognised by | what it gives |
|---|---|---|
| axolotl | YAML with base_model and axolotl's attention/packing keys (`attn_implementation:`, 0.17+, or the legacy flags) | attention, packing, seq, dtype, CP (ring-flash-attn), FSDP/DeepSpeed, gradient accumulation; the attention keys in axolotl's own terms for its config checks (axolotl_attn, axolotl_flash_flag, axolotl_glm_dsa) |
| llamafactory | YAML with model_name_or_path and stage/finetuning_type/template | attention, packing, seq, dtype |
| accelerate | YAML with compute_environment / distributed_type | dtype, CP (torch ring attention) |
| verl | YAML with `actor_rollout_ref:` (PPO/GRPO trainer) or verl's SFT keys (`ulysses_sequence_parallel_size`, `model.partial_pretrain`) | attention (verl's FSDP workers load flash_attention_2 unless told otherwise), strategy (FSDP / Megatron workers, also from Hydra defaults; torchtitan/VeOmni noted), Ulysses size (actor or its fsdp_config), remove-padding, seq |
| nemo | YAML with a `model:` section holding Megatron keys | heads, head dim, seq, dtype, attention dropout (when set), CP (TE) |
| deepspeed | JSON with zero_optimization / train_*batch* keys | dtype, Ulysses sequence parallel size |
| torchtitan | TOML with [parallelism] / [training] / [model] / [compile] | CP (torch ring), seq, dtype, model family, model compile ([compile] enable with "model" in components, or 0.1.0's [training] compile; off when neither is given) |
| megatron | a file of command-line arguments (--context-parallel-size ...) | heads, head dim, seq, dtype, attention dropout (Megatron default 0.1), CP (TE), NVTE switches, --deterministic-mode |
| te-log | TransformerEngine's NVTE_DEBUG=1 log (`Running with config={...}`) | versions, GPU, cuDNN and the call's shape |
| requirements | pip freeze / requirements.txt / uv.lock / poetry.lock | the installed packages (a partial snapshot) |

Nothing is executed: Python configs are refused, and the TE log's dict is read by a pattern,
never evaluated. Keys a reader does not know are ignored; a value it reads that is invalid is
an input error naming the file, the line and the key. `took` says what was taken, so every
output can show where the workload came from.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from doctor.errors import InputError
from doctor.model import ATTN_IMPLEMENTATIONS, SOFTMAX_TYPES
from doctor.versions import canonical_name, is_version

MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class ConfigRead:
    kind: str
    path: str
    workload: Mapping[str, Any] = field(default_factory=dict)  # workload-file keys
    packages: Optional[Mapping[str, str]] = None  # a package list (requirements, lock, TE log)
    facts: Mapping[str, Any] = field(default_factory=dict)  # other snapshot sections (te-log)
    env: Mapping[str, str] = field(default_factory=dict)  # variables the framework itself sets
    took: Tuple[str, ...] = ()  # "flash_attention: true -> attn_implementation=flash_attention_2"
    notes: Tuple[str, ...] = ()  # what it could not take, and why


class _Taker:
    """Collects workload keys with the config key each came from."""

    def __init__(self, path: str, lines: Mapping[str, int]) -> None:
        self.path, self.lines = path, lines
        self.workload: Dict[str, Any] = {}
        self.env: Dict[str, str] = {}
        self.took: List[str] = []
        self.notes: List[str] = []

    def put(self, src: str, key: str, value: Any) -> None:
        if key.startswith("context_parallel."):
            self.workload.setdefault("context_parallel", {})[key.split(".", 1)[1]] = value
        else:
            self.workload[key] = value
        self.took.append(f"{src} -> {key}={value}")

    def bad(self, key: str, value: Any, want: str, section: Optional[Mapping[str, Any]] = None) -> InputError:
        """`section`: the nested mapping that holds the key, when it is not a top-level one."""
        lines = getattr(section, "key_lines", None) or self.lines
        return InputError(f"{key}={value!r}: {want}", path=self.path, line=lines.get(key.split(".")[-1]))

    def int_(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit() or int(value) < 1:
            raise self.bad(key, value, "expected a positive integer")
        return int(value)

    def attention(self, src: str, key: str, value: Any) -> bool:
        """Take an attention name that is one of transformers' built-ins; note any other (a Hub
        kernel path, a framework's own backend) as not read. True when taken."""
        if str(value) in ATTN_IMPLEMENTATIONS:
            self.put(src, key, str(value))
            return True
        self.notes.append(f"{src.split(':')[0]} {str(value)!r}: not a transformers built-in attention, not read")
        return False

    def bool_(self, key: str, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise self.bad(key, value, "expected true or false")


# --------------------------------------------------------------------------- readers


def _section(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, Mapping) else {}


def _dtype(t: _Taker, src: str, doc: Mapping[str, Any]) -> None:
    for key, name in (("bf16", "bf16"), ("fp16", "fp16")):
        if key in doc and doc[key] not in (None, "auto") and t.bool_(key, doc[key]):
            t.put(f"{src}{key}: true", "dtype", name)
            return


# axolotl's legacy boolean attention flags in its own priority (0.17.0 utils/schemas/enums.py:116-123,
# unchanged to 0.21.0; 0.17+ config.py normalize_attn_implementation maps the first one set)
_AXOLOTL_FLAGS = (("xformers_attention", "xformers"), ("sage_attention", "sage"), ("flex_attention", "flex_attention"),
                  ("flash_attention", "flash_attention_2"), ("sdp_attention", "sdpa"), ("eager_attention", "eager"))


# every legacy boolean attention key some axolotl release knows, in the order Workload.axolotl_flags
# lists them: 0.8.1-0.14 refuse more than one of xformers/sdp/s2/flash/flex, 0.15-0.16.1 more than
# one of xformers/sdp/flash/flex/sage (0.8.1 schemas/config.py:363-376, 0.16.1 validation.py:164-177)
_AXOLOTL_FLAG_KEYS = ("xformers_attention", "sdp_attention", "s2_attention", "flash_attention", "flex_attention",
                      "sage_attention", "eager_attention")


# axolotl's unsloth_* options, each of which loads monkeypatch/unsloth_.py in 0.7.0-0.16.x (the first
# two only for Llama-derived models: 0.16.1 loaders/patch_manager.py _patch_loss_llama; lora_qkv/o
# there too and, with lora_mlp and rope, after the model loads for any model: _apply_unsloth_patches),
# in the order Workload.axolotl_unsloth lists them
_AXOLOTL_UNSLOTH_KEYS = ("unsloth_cross_entropy_loss", "unsloth_rms_norm", "unsloth_lora_qkv", "unsloth_lora_o",
                         "unsloth_lora_mlp", "unsloth_rope")


def _axolotl(t: _Taker, doc: Mapping[str, Any]) -> None:
    t.put("axolotl", "framework", "axolotl")
    impl = None
    set_keys = [k for k in _AXOLOTL_FLAG_KEYS if k in doc and doc[k] is not None and t.bool_(k, doc[k])]
    flags = [(key, value) for key, value in _AXOLOTL_FLAGS if key in set_keys]
    given = doc.get("attn_implementation")
    # axolotl's own config checks read different keys per release (its context-parallel check: the
    # flash_attention flag alone in 0.8-0.16, the resolved attn_implementation from 0.17): what the
    # config says is kept in axolotl's terms for them (Workload.axolotl_attn/_flash_flag/_glm_dsa)
    if given is not None and flags:
        axolotl_attn = "conflict"
    elif given is not None:
        axolotl_attn = str(given)
    elif flags:
        axolotl_attn = flags[0][1]
    elif doc.get("gemma4_hybrid_attn_impl") is not None and t.bool_("gemma4_hybrid_attn_impl", doc["gemma4_hybrid_attn_impl"]):
        # 0.17+ default it to flash_attention_2 when nothing else is named (0.17.0 config.py:1451-1458)
        axolotl_attn = "flash_attention_2"
    else:
        axolotl_attn = "none"
    keys = ([f"attn_implementation: {given}"] if given is not None else []) + [f"{k}: true" for k, _ in flags]
    t.put(", ".join(keys) or "no attention key", "axolotl_attn", axolotl_attn)
    t.put(", ".join(f"{k}: true" for k in set_keys) or "no legacy attention flag", "axolotl_flags", ",".join(set_keys) or "none")
    unsloth = [k for k in _AXOLOTL_UNSLOTH_KEYS if k in doc and doc[k] is not None and t.bool_(k, doc[k])]
    t.put(", ".join(f"{k}: true" for k in unsloth) or "no unsloth_* option", "axolotl_unsloth", ",".join(unsloth) or "none")
    flash_flag = "flash_attention" in set_keys
    t.put("flash_attention: true" if flash_flag else "flash_attention not set", "axolotl_flash_flag", flash_flag)
    # use_glm_dsa_kernels is a KernelsArgs field (0.18.0 integrations/kernels/args.py:54), part of
    # the config only with the kernels plugin listed
    raw_plugins = doc.get("plugins")
    plugins: List[Any] = raw_plugins if isinstance(raw_plugins, list) else []
    glm = ("use_glm_dsa_kernels" in doc and doc["use_glm_dsa_kernels"] is not None and t.bool_("use_glm_dsa_kernels", doc["use_glm_dsa_kernels"])
           and any(str(p).startswith("axolotl.integrations.kernels") for p in plugins))
    if glm:
        t.put("use_glm_dsa_kernels: true (kernels plugin)", "axolotl_glm_dsa", True)
    # `attn_implementation:` (0.12+; 0.17+ make it the canonical key, 0.19 lists flash_attention_4
    # among its names) is handed to from_pretrained as is (0.12.0 loaders/model.py:602-603, 0.16.1
    # :627-628, 0.17+ _set_attention_config) and wins over the legacy flags there. Hub-kernel paths
    # and axolotl's own backends (xformers, sage, fp8, flash_attention_torch) are not transformers
    # built-ins: noted, not read.
    if given is not None:
        attn = str(given)
        if t.attention(f"attn_implementation: {attn}", "attn_implementation", attn):
            impl = attn
    else:
        # the loaders take flex before flash (0.11.0 loaders/model.py:538-550, 0.16.1 :629-637; 0.17+
        # by the priority above); xformers and sage are axolotl's own, not read here
        for key, value in (("flex_attention", "flex_attention"), ("flash_attention", "flash_attention_2"), ("sdp_attention", "sdpa"), ("eager_attention", "eager")):
            if key in set_keys:
                impl = value
                t.put(f"{key}: true", "attn_implementation", value)
                break
    if "sample_packing" in doc and doc["sample_packing"] is not None and t.bool_("sample_packing", doc["sample_packing"]):
        # multipack with flash-attn passes cu_seqlens; without it sequences are only concatenated
        flash = ("flash_attention_2", "flash_attention_3", "flash_attention_4")
        t.put("sample_packing: true", "packing", "varlen" if impl in flash else "padding_free")
    if doc.get("sequence_len") is not None:
        t.put("sequence_len", "seq_len", t.int_("sequence_len", doc["sequence_len"]))
    if doc.get("fsdp"):  # a list of FSDP options (full_shard, auto_wrap, ...)
        t.put("fsdp", "distributed", "fsdp")
    elif doc.get("deepspeed"):  # the path of a DeepSpeed JSON config
        t.put("deepspeed", "distributed", "deepspeed")
    if doc.get("gradient_accumulation_steps") is not None:
        t.put("gradient_accumulation_steps", "grad_accum_steps", t.int_("gradient_accumulation_steps", doc["gradient_accumulation_steps"]))
    elif "gradient_accumulation_steps" in doc and doc.get("batch_size") is not None and doc.get("micro_batch_size") is not None:
        # written as null: axolotl's schema leaves it out (model_dump(exclude_none=True)) and
        # normalize_config derives batch_size // micro_batch_size (v0.6.0 utils/config/__init__.py
        # :61-63, v0.12.2 :99-100). Left out of the file, the schema's default 1 applies instead
        # (v0.6.0 config/models/input/v0_4_1/__init__.py:412), so nothing is derived (check-R2)
        micro = t.int_("micro_batch_size", doc["micro_batch_size"])
        if micro > 0:
            t.put("gradient_accumulation_steps: null -> batch_size // micro_batch_size", "grad_accum_steps", t.int_("batch_size", doc["batch_size"]) // micro)
    # a boolean, or "offload"/"offload_disk" (checkpointing with activation offload; schemas/config.py@0.12.2)
    gc = doc.get("gradient_checkpointing")
    if gc is not None:
        on = True if str(gc).lower() in ("offload", "offload_disk") else t.bool_("gradient_checkpointing", gc)
        t.put(f"gradient_checkpointing: {str(gc).lower()}", "gradient_checkpointing", on)
    for key in ("context_parallel_size", "sequence_parallel_degree"):
        if doc.get(key) is not None and t.int_(key, doc[key]) > 1:
            t.put(key, "context_parallel.size", t.int_(key, doc[key]))
            t.put(key, "context_parallel.impl", "ring_flash_attn")
            break
    _dtype(t, "", doc)


_LF_ATTN = {"fa2": "flash_attention_2", "sdpa": "sdpa", "disabled": "eager", "eager": "eager", "auto": None, "fa3": "flash_attention_3"}


def _llamafactory(t: _Taker, doc: Mapping[str, Any]) -> None:
    t.put("LLaMA-Factory", "framework", "llamafactory")
    if doc.get("flash_attn") is not None:
        v = str(doc["flash_attn"]).lower()
        if v not in _LF_ATTN:
            raise t.bad("flash_attn", doc["flash_attn"], "expected one of " + ", ".join(_LF_ATTN))
        if _LF_ATTN[v]:
            t.put(f"flash_attn: {v}", "attn_implementation", _LF_ATTN[v])
    if doc.get("neat_packing") is not None and t.bool_("neat_packing", doc["neat_packing"]):
        t.put("neat_packing: true", "packing", "varlen")
    elif doc.get("packing") is not None and t.bool_("packing", doc["packing"]):
        t.put("packing: true (sequences attend across boundaries)", "packing", "padding_free")
    if doc.get("cutoff_len") is not None:
        t.put("cutoff_len", "seq_len", t.int_("cutoff_len", doc["cutoff_len"]))
    if doc.get("sequence_parallel_size") is not None and t.int_("sequence_parallel_size", doc["sequence_parallel_size"]) > 1:
        t.put("sequence_parallel_size", "context_parallel.size", t.int_("sequence_parallel_size", doc["sequence_parallel_size"]))
        t.put("sequence_parallel_size", "context_parallel.impl", "ulysses")
    _dtype(t, "", doc)


def _accelerate(t: _Taker, doc: Mapping[str, Any]) -> None:
    t.put("accelerate", "framework", "accelerate")
    mp = doc.get("mixed_precision")
    if mp is not None:
        if str(mp) not in ("no", "fp16", "bf16", "fp8"):
            raise t.bad("mixed_precision", mp, "expected no, fp16, bf16 or fp8")
        if mp != "no":
            t.put(f"mixed_precision: {mp}", "dtype", "bf16" if mp == "fp8" else mp)
    pc = doc.get("parallelism_config")
    if isinstance(pc, Mapping) and pc.get("parallelism_config_cp_size") is not None:
        size = t.int_("parallelism_config_cp_size", pc["parallelism_config_cp_size"])
        if size > 1:
            t.put("parallelism_config_cp_size", "context_parallel.size", size)
            t.put("parallelism_config_cp_size", "context_parallel.impl", "torch_ring")
    # DeepSpeed's Hugging Face Ulysses (accelerate 1.12+: sp_backend deepspeed, the only backend
    # it accepts); `accelerate launch` hands the wrapper sp_attn_implementation, default sdpa
    # (commands/launch.py --parallelism_config_sp_attn_implementation, 1.12.0-1.15.0)
    if isinstance(pc, Mapping) and pc.get("parallelism_config_sp_size") is not None:
        size = t.int_("parallelism_config_sp_size", pc["parallelism_config_sp_size"])
        backend = pc.get("parallelism_config_sp_backend", "deepspeed")
        if size > 1 and backend != "deepspeed":
            raise t.bad("parallelism_config_sp_backend", backend, "expected deepspeed (the only sequence-parallel backend accelerate accepts)")
        if size > 1:
            attn = pc.get("parallelism_config_sp_attn_implementation") or "sdpa"
            t.put("parallelism_config_sp_size", "context_parallel.size", size)
            t.put("parallelism_config_sp_backend", "context_parallel.impl", "ulysses")
            # a Hub kernel (accelerate 1.14+) is not one of transformers' built-in names: noted
            t.attention("parallelism_config_sp_attn_implementation", "context_parallel.attn_implementation", attn)


_MEGATRON_CP = {"p2p": "p2p", "a2a": "a2a", "allgather": "all_gather", "all_gather": "all_gather", "a2a+p2p": "a2a+p2p"}
_ATTN_BACKEND_ENV = {
    "flash": {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"},
    "fused": {"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "1", "NVTE_UNFUSED_ATTN": "0"},
    "unfused": {"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "1"},
}


def _plain(t: _Taker, key: str, value: Any) -> Any:
    """A verl/Hydra value, or None for an interpolation (${...}), which is noted as not read."""
    if isinstance(value, str) and value.strip().startswith("${"):
        t.notes.append(f"{key} {value!r} is an interpolation: not read")
        return None
    return value


def _verl(t: _Taker, doc: Mapping[str, Any]) -> None:
    """verl's trainer YAML (ppo_trainer.yaml and its generated form, or sft_trainer.yaml).

    verl's FSDP workers load the model with attn_implementation="flash_attention_2" unless
    `model.override_config.attn_implementation` says otherwise, which they read from v0.6.1
    (fsdp_workers.py v0.2 .. v0.6.0 pass flash_attention_2 as such; v0.6.1 and 0.9.1's
    workers/config/model.py take the override first; fsdp_sft_trainer.py v0.4.0 .. v0.7.0 always
    flash_attention_2). Its Megatron workers run
    Megatron-Core models (TE), not transformers' attention."""
    t.put("verl", "framework", "verl")
    ppo = isinstance(doc.get("actor_rollout_ref"), Mapping)
    arr = _section(doc, "actor_rollout_ref")
    model = _section(arr, "model") if ppo else _section(doc, "model")
    actor = _section(arr, "actor") if ppo else {}
    where = actor if ppo else model
    strategy = _plain(t, "strategy", where.get("strategy"))
    if strategy is None:
        # a Hydra file that picks its workers through `defaults:` (ppo_megatron_trainer.yaml:
        # `actor@actor_rollout_ref.actor: megatron_actor` at v0.5-v0.7, `override model_engine:
        # megatron` in 0.9.1) states no actor.strategy of its own
        picked = " ".join(str(x) for e in (doc.get("defaults") or []) for x in ((*e.keys(), *e.values()) if isinstance(e, Mapping) else (e,)))
        strategy = next((s for s in ("megatron", "torchtitan", "veomni") if s in picked), None)
        if strategy is not None:
            t.notes.append(f"verl strategy {strategy}: taken from the file's Hydra defaults")
    if strategy is not None and str(strategy) == "megatron":
        t.put(f"strategy: {strategy}", "distributed", "megatron")
    elif strategy is not None and str(strategy) in ("torchtitan", "veomni"):
        # verl 0.9's other engines: torchtitan models, or VeOmni's own attention switch
        # (actor.veomni.attn_implementation); neither is the HF load that the FSDP workers do
        t.notes.append(f"verl strategy {strategy}: its attention is not read")
    else:
        if strategy is not None:
            if str(strategy) not in ("fsdp", "fsdp2"):
                raise t.bad("strategy", strategy, "expected fsdp, fsdp2, megatron, torchtitan or veomni", where)
            t.put(f"strategy: {strategy}", "distributed", "fsdp")
        override = _section(model, "override_config")
        attn = _plain(t, "attn_implementation", override.get("attn_implementation"))
        if attn is not None:
            if t.attention(f"override_config.attn_implementation: {attn}", "attn_implementation", str(attn)):
                t.notes.append("verl before 0.6.1 (and its SFT trainer up to 0.7.0) loads flash_attention_2 whatever override_config.attn_implementation says")
        else:
            t.put("verl's FSDP workers (no attn_implementation configured)", "attn_implementation", "flash_attention_2")
    sp_key, sp = ("actor_rollout_ref.actor.ulysses_sequence_parallel_size", actor.get("ulysses_sequence_parallel_size")) if ppo else (
        "ulysses_sequence_parallel_size", doc.get("ulysses_sequence_parallel_size"))
    sp = _plain(t, sp_key, sp)
    if ppo and (sp is None or t.int_("ulysses_sequence_parallel_size", sp) == 1):
        # from v0.7 the actor-level key is deprecated for fsdp_config's, which verl's engine
        # workers read (0.9.1 workers/config/actor.py copies an actor-level size > 1 into it)
        fsdp_sp = _plain(t, "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
                         _section(actor, "fsdp_config").get("ulysses_sequence_parallel_size"))
        if fsdp_sp is not None and t.int_("ulysses_sequence_parallel_size", fsdp_sp) > 1:
            sp_key, sp = "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size", fsdp_sp
            t.notes.append("verl's legacy fsdp_workers (to 0.7.0) read actor.ulysses_sequence_parallel_size only; the engine workers read fsdp_config's")
    if sp is not None and t.int_("ulysses_sequence_parallel_size", sp) > 1:
        t.put(sp_key, "context_parallel.size", t.int_("ulysses_sequence_parallel_size", sp))
        t.put(sp_key, "context_parallel.impl", "ulysses")
    rp = _plain(t, "use_remove_padding", model.get("use_remove_padding") if ppo else doc.get("use_remove_padding"))
    if ppo and "use_remove_padding" not in model and str(strategy) not in ("megatron", "torchtitan", "veomni"):
        # model/hf_model.yaml: False at v0.6.1, True from v0.7.0 (and in 0.9.1)
        t.notes.append("actor_rollout_ref.model.use_remove_padding is not set: verl's default is false to 0.6.x and true from 0.7.0 "
                       "(unpadded tokens, varlen with flash_attention_2); not read")
    if rp is not None and t.bool_("use_remove_padding", rp) and str(strategy) not in ("megatron", "torchtitan", "veomni"):
        flash = ("flash_attention_2", "flash_attention_3", "flash_attention_4")
        # unpadded tokens with position ids: transformers' flash path turns them into cu_seqlens
        t.put("use_remove_padding: true", "packing", "varlen" if t.workload.get("attn_implementation") in flash else "padding_free")
    data = _section(doc, "data")
    if ppo:
        lens = [_plain(t, k, data.get(k)) for k in ("max_prompt_length", "max_response_length")]
        if all(v is not None for v in lens):
            t.put("data.max_prompt_length + data.max_response_length", "seq_len",
                  t.int_("max_prompt_length", lens[0]) + t.int_("max_response_length", lens[1]))
    elif _plain(t, "max_length", data.get("max_length")) is not None:
        t.put("data.max_length", "seq_len", t.int_("max_length", data["max_length"]))


def _megatron_values(t: _Taker, get: Callable[[str], Any], framework: str, legacy: bool = False) -> None:
    t.put(framework, "framework", framework)
    heads = get("num_attention_heads")
    if heads is not None:
        t.put("num_attention_heads", "num_heads", t.int_("num_attention_heads", heads))
        groups = get("num_query_groups")
        if groups is not None and (get("group_query_attention") in (True, None) or framework == "nemo"):
            t.put("num_query_groups", "num_kv_heads", t.int_("num_query_groups", groups))
        else:
            t.put("num_attention_heads (no GQA)", "num_kv_heads", t.int_("num_attention_heads", heads))
    if get("kv_channels") is not None:
        t.put("kv_channels", "head_dim", t.int_("kv_channels", get("kv_channels")))
    seq = get("seq_length") if get("seq_length") is not None else get("encoder_seq_length")
    if seq is not None:
        t.put("seq_length", "seq_len", t.int_("seq_length", seq))
    drop = get("attention_dropout")
    if drop is not None and not isinstance(drop, bool):
        try:
            value: Optional[float] = float(drop)
        except (TypeError, ValueError):
            value = None  # e.g. a NeMo interpolation (${...}): not read
        if value is not None and not 0.0 <= value < 1.0:
            raise t.bad("attention_dropout", drop, "expected a number in [0, 1)")
        if value is not None:
            t.put("attention_dropout", "dropout", value)
        else:
            t.notes.append(f"attention_dropout {drop!r} is not a number: attention dropout not read")
    elif framework == "megatron":
        # Megatron's --attention-dropout defaults to 0.1 (TransformerConfig.attention_dropout,
        # core_v0.9.0 and core_v0.19.0), and TEDotProductAttention hands it to TE, which then
        # drops FlashAttention 3 and 4 (dropout filter in every TE release with them)
        t.put("--attention-dropout unset (Megatron's default)", "dropout", 0.1)
    if get("bf16") is True:
        t.put("bf16", "dtype", "bf16")
    elif get("fp16") is True:
        t.put("fp16", "dtype", "fp16")
    # FP8 autocast: Megatron's --fp8-format e4m3|hybrid (dest `fp8` in TransformerConfig), NeMo's
    # model.fp8: true. TE's attention filters read the autocast (TE 2.5.0's CP MLA filter) apart
    # from the recipe's fp8_dpa, which puts attention itself in FP8 (--fp8-dot-product-attention)
    fp8_key = "fp8_format" if get("fp8_format") is not None else "fp8"
    fp8 = get(fp8_key)
    if isinstance(fp8, str) and fp8.startswith("${"):
        # a NeMo interpolation (${oc.env:FP8,false}): not read, as attention_dropout above
        t.notes.append(f"{fp8_key} {fp8!r} is an interpolation: FP8 autocast not read")
    elif fp8 is True or (isinstance(fp8, str) and fp8.lower() in ("e4m3", "hybrid", "true")):
        t.put(fp8_key, "fp8", True)
    elif fp8 not in (None, False) and not (isinstance(fp8, str) and fp8.lower() in ("none", "false")):
        raise t.bad(fp8_key, fp8, "expected e4m3 or hybrid")
    # Megatron-Core's TransformerConfig.softmax_type (--softmax-type, core 0.15+): a sink softmax
    # is handed to TE's DotProductAttention (extensions/transformer_engine.py@core_v0.15.0:968-973)
    softmax = get("softmax_type")
    if isinstance(softmax, str) and softmax.startswith("${"):
        t.notes.append(f"softmax_type {softmax!r} is an interpolation: not read")
    elif softmax is not None:
        if str(softmax).replace("_", "-") not in SOFTMAX_TYPES:
            raise t.bad("softmax_type", softmax, "expected vanilla, off-by-one or learnable")
        t.put("softmax_type", "softmax_type", str(softmax).replace("_", "-"))
    # --deterministic-mode (Megatron-LM; deterministic_mode in a NeMo model config): Megatron-Core's
    # TE attention layer then wants NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 (MCORE-DETERMINISTIC-NVTE-ENV),
    # which makes TE's backend filters deterministic; Megatron-LM's argument check also turns
    # torch.use_deterministic_algorithms on (megatron/training/arguments.py@core_v0.14.0:987-995)
    det = get("deterministic_mode")
    if det is not None and not (isinstance(det, str) and det.startswith("${")):
        if t.bool_("deterministic_mode", det):
            t.put("deterministic_mode", "deterministic", True)
    tp = get("tensor_model_parallel_size")
    if tp is not None and t.int_("tensor_model_parallel_size", tp) > 1:
        t.put("tensor_model_parallel_size", "tensor_parallel", t.int_("tensor_model_parallel_size", tp))
    cp = get("context_parallel_size")
    if cp is not None and t.int_("context_parallel_size", cp) > 1:
        t.put("context_parallel_size", "context_parallel.size", t.int_("context_parallel_size", cp))
        t.put("context_parallel_size", "context_parallel.impl", "te")
        comm = get("cp_comm_type")
        if comm is not None:
            if str(comm) not in _MEGATRON_CP:
                raise t.bad("cp_comm_type", comm, "expected p2p, a2a, allgather or a2a+p2p")
            t.put("cp_comm_type", "context_parallel.comm_type", _MEGATRON_CP[str(comm)])
    backend = get("attention_backend")
    if legacy:
        # --use-legacy-models (Megatron-LM, Megatron-Core 0.11-0.17): pretrain_gpt.py builds
        # megatron.legacy.model.GPTModel (core_v0.14.0 pretrain_gpt.py:146-147), a MegatronModule
        # that never runs LanguageModule's check and setting of NVTE_*_ATTN; the variables stay as
        # exported and --attention-backend / --flash-attention-version are not read
        t.put("--use-legacy-models", "legacy_models", True)
        if backend is not None or get("flash_attention_version") is not None:
            t.notes.append("--use-legacy-models: the legacy models do not read --attention-backend or --flash-attention-version; the NVTE_* variables are taken from the environment as exported")
    elif backend is not None:
        b = str(backend).split(".")[-1].lower()  # AttnBackend.flash in a NeMo YAML
        if b in _ATTN_BACKEND_ENV:
            t.env.update(_ATTN_BACKEND_ENV[b])
            t.took.append(f"attention_backend: {b} -> " + " ".join(f"{k}={v}" for k, v in _ATTN_BACKEND_ENV[b].items()))
        elif b not in ("auto", "local"):
            raise t.bad("attention_backend", backend, "expected flash, fused, unfused, local or auto")
        t.put("attention_backend", "attention_backend", b)
    elif framework == "megatron":
        # not on the command line: Megatron-Core's default (auto, 0.11 on); its check then wants
        # NVTE_FLASH_ATTN / NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN unset or "1"
        t.put("attention_backend (Megatron's default)", "attention_backend", "auto")
    elif framework == "nemo":
        # a NeMo YAML is a NeMo 1 model config (MegatronBaseModel), whose default is auto; NeMo 2's
        # per-family flash defaults (rules/conditions.yaml nemo_family_backend_flash) belong to its
        # Python model configs, which are not read (check-L1 of sample 40)
        t.put("attention_backend (NeMo 1's default)", "attention_backend", "auto")
    # --flash-attention-version N (Megatron-Core 0.19+, TransformerConfig.flash_attention_version,
    # 2/3/4): LanguageModule._set_attention_backend sets NVTE_FLASH_ATTN_V{other}=0 for the other
    # two generations when the model is built (core_v0.19.0 language_module.py:148-153), which TE
    # 2.18+ reads per generation (sample 26 row 26)
    fav = get("flash_attention_version")
    if fav is not None and not legacy:
        n = t.int_("flash_attention_version", fav)
        if n not in (2, 3, 4):
            raise t.bad("flash_attention_version", fav, "expected 2, 3 or 4")
        off = {f"NVTE_FLASH_ATTN_V{v}": "0" for v in (2, 3, 4) if v != n}
        t.env.update(off)
        t.took.append(f"flash_attention_version: {n} -> " + " ".join(f"{k}={v}" for k, v in off.items()))
        t.put("flash_attention_version", "flash_attention_version", n)


def _megatron_args(t: _Taker, text: str) -> None:
    try:
        tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise InputError(f"cannot split the arguments: {exc}", path=t.path) from None
    values: Dict[str, Any] = {}
    for i, tok in enumerate(tokens):
        if not tok.startswith("--"):
            continue
        name, eq, inline = tok[2:].partition("=")
        key = name.replace("-", "_")
        if eq:
            values[key] = inline
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            values[key] = tokens[i + 1]
        else:
            values[key] = True
    legacy = values.get("use_legacy_models") is True
    _megatron_values(t, values.get, "megatron", legacy=legacy)
    # pretrain_retro.py builds Megatron-Core's RetroModel for --retro-add-retriever unless
    # --use-legacy-models (core_v0.11.0 pretrain_retro.py:73-76)
    if values.get("retro_add_retriever") is True:
        if legacy:
            t.notes.append("--retro-add-retriever with --use-legacy-models: the legacy Retro model, whose attention is not Megatron-Core's; not read")
        else:
            t.put("--retro-add-retriever", "model_type", "retro")
            # RetroConfig (0.11-0.15) replaces --attention-backend with unfused after checking the
            # shell's NVTE_FLASH_ATTN / NVTE_FUSED_ATTN (models/retro/config.py): the backend's
            # values are not what the run sees, so the shell's are kept for the rules to judge
            if any(k in t.env for k in _ATTN_BACKEND_ENV["unfused"]):
                for k in _ATTN_BACKEND_ENV["unfused"]:
                    t.env.pop(k, None)
                t.took[:] = [x for x in t.took if not x.startswith("attention_backend: ")]
                t.notes.append("--retro-add-retriever: RetroConfig runs Retro as unfused whatever --attention-backend says; the NVTE_*_ATTN variables are taken from the environment as exported")


def _nemo(t: _Taker, doc: Mapping[str, Any]) -> None:
    model = _section(doc, "model")
    trainer = _section(doc, "trainer")
    precision = str(trainer.get("precision", ""))

    def get(key: str) -> Any:
        if key == "bf16":
            return precision.startswith("bf16") or None
        if key == "fp16":
            return precision.startswith("16") or None
        return model.get(key)

    _megatron_values(t, get, "nemo")


def _deepspeed(t: _Taker, doc: Mapping[str, Any]) -> None:
    t.put("DeepSpeed", "framework", "deepspeed")
    t.put("DeepSpeed", "distributed", "deepspeed")
    ga = doc.get("gradient_accumulation_steps")
    if ga is not None and ga != "auto":  # "auto": the trainer fills it in
        t.put("gradient_accumulation_steps", "grad_accum_steps", t.int_("gradient_accumulation_steps", ga))
    for key in ("bf16", "fp16"):
        sec = doc.get(key)
        if isinstance(sec, Mapping) and sec.get("enabled") is not None and t.bool_(f"{key}.enabled", sec["enabled"]):
            t.put(f"{key}.enabled: true", "dtype", key)
            break
    sp = doc.get("sequence_parallel_size")
    if sp is not None and t.int_("sequence_parallel_size", sp) > 1:
        t.put("sequence_parallel_size", "context_parallel.size", t.int_("sequence_parallel_size", sp))
        t.put("sequence_parallel_size", "context_parallel.impl", "ulysses")


_TITAN_ROTATE = {"allgather": "all_gather", "alltoall": "p2p"}
_TITAN_MODEL = {"llama3": "llama", "llama4": "llama4", "deepseek_v3": "deepseek_v3", "qwen3": "qwen3"}


def _torchtitan(t: _Taker, doc: Mapping[str, Any]) -> None:
    t.put("torchtitan", "framework", "torchtitan")
    par = _section(doc, "parallelism")
    cp = par.get("context_parallel_degree")
    if cp is not None and t.int_("context_parallel_degree", cp) > 1:
        t.put("context_parallel_degree", "context_parallel.size", t.int_("context_parallel_degree", cp))
        t.put("context_parallel_degree", "context_parallel.impl", "torch_ring")
        rot = par.get("context_parallel_rotate_method")
        if rot is not None:
            if str(rot) not in _TITAN_ROTATE:
                raise t.bad("context_parallel_rotate_method", rot, "expected allgather or alltoall")
            t.put("context_parallel_rotate_method", "context_parallel.comm_type", _TITAN_ROTATE[str(rot)])
    training = _section(doc, "training")
    if training.get("seq_len") is not None:
        t.put("training.seq_len", "seq_len", t.int_("seq_len", training["seq_len"]))
    mp = training.get("mixed_precision_param")
    if mp in ("bfloat16", "float16", "float32"):
        t.put("training.mixed_precision_param", "dtype", mp)
    # torchtitan's per-TransformerBlock torch.compile: [training] compile in 0.1.0
    # (config_manager.py:235, llama3/infra/parallelize.py:79-80); [compile] enable with "model"
    # in components (default ["model", "loss"]) from 0.2.0 (config/job_config.py Compile,
    # parallelize.py model_compile_enabled). Both default to off.
    comp = _section(doc, "compile")
    if comp.get("enable") is not None:
        parts = comp.get("components", ["model", "loss"])
        on = t.bool_("compile.enable", comp["enable"]) and isinstance(parts, (list, tuple)) and "model" in parts
        t.put("compile.enable", "model_compile", on)
    elif training.get("compile") is not None:
        t.put("training.compile", "model_compile", t.bool_("training.compile", training["compile"]))
    else:
        t.put("torchtitan (compile off by default)", "model_compile", False)
    model = _section(doc, "model")
    name = model.get("name")
    if isinstance(name, str) and name in _TITAN_MODEL:
        t.put("model.name", "model_type", _TITAN_MODEL[name])


_TE_PAIR = re.compile(r"'([A-Za-z0-9_]+)':\s*('(?:[^'\\]|\\.)*'|\([^()]*\)|\[[^\]]*\]|<[^>]*>|[^,}]+)")
_TE_MASKS = {"no_mask", "causal", "causal_bottom_right", "padding", "padding_causal", "padding_causal_bottom_right", "arbitrary"}


def _te_log(t: _Taker, text: str) -> Tuple[Dict[str, str], Dict[str, Any]]:
    line = next(ln for ln in text.splitlines() if "Running with config={" in ln)
    body = line.split("Running with config=", 1)[1]
    pairs = {k: v.strip() for k, v in _TE_PAIR.findall(body)}

    def s(key: str) -> Optional[str]:
        v = pairs.get(key)
        if v is None:
            return None
        # TE 1.9-1.11 log versions as packaging objects: <Version('2.2.5')>
        m = re.fullmatch(r"<Version\('([^']*)'\)>", v)
        return m.group(1) if m else v.strip("'")

    packages: Dict[str, str] = {}
    facts: Dict[str, Any] = {}
    if s("transformer_engine_version") and is_version(str(s("transformer_engine_version"))):
        packages["transformer-engine"] = str(s("transformer_engine_version"))
    fa = s("flash_attn_version")
    if fa and fa != "not installed" and is_version(fa):
        packages["flash-attn"] = fa
    cc = s("compute_capability")
    if cc and re.fullmatch(r"sm\d{2,3}", cc):
        sm = int(cc[2:])
        facts["gpus"] = [{"index": 0, "name": f"GPU from the TE log ({cc})", "compute_capability": f"{sm // 10}.{sm % 10}"}]
    cudnn = s("cudnn_version")
    if cudnn and is_version(cudnn):
        facts["cudnn"] = {"version": cudnn}
    dtype = s("qkv_dtype") or ""
    if pairs.get("fp8") == "True" and re.search(r"fp8_dpa\s*=\s*True", body):
        # FP8 with the recipe's fp8_dpa: TE casts the bf16/fp16 inputs and runs attention in FP8
        t.put("fp8_meta recipe fp8_dpa=True", "dtype", "fp8")
    else:
        for name, ours in (("bfloat16", "bf16"), ("float16", "fp16"), ("float32", "fp32")):
            if dtype.endswith("." + name) or dtype == name:
                t.put("qkv_dtype", "dtype", ours)
                break
    layout = s("qkv_layout") or ""
    fmt = layout.split("_")[0].replace("3", "").replace("2", "")
    if fmt in ("bshd", "sbhd", "thd"):
        t.put("qkv_layout", "qkv_format", fmt)
        t.put("qkv_layout", "qkv_packed", "3" in layout)
        first = layout.split("_")[0]
        if "3" in first:  # th3d/sbh3d/bsh3d: TE's interleaved split; t3hd/sb3hd/bs3hd: not
            t.put("qkv_layout", "qkv_weight_interleaved", "h3d" in first)
    for src, key in (("batch_size", "batch_size"), ("num_heads", "num_heads"), ("num_gqa_groups", "num_kv_heads"),
                     ("max_seqlen_q", "seq_len_q"), ("max_seqlen_kv", "seq_len_kv"), ("head_dim_qk", "head_dim_qk"), ("head_dim_v", "head_dim_v")):
        if s(src) is not None and str(s(src)).isdigit():
            t.put(src, key, int(str(s(src))))
    mask = s("attn_mask_type")
    if mask in _TE_MASKS:
        t.put("attn_mask_type", "mask", mask)
    win = re.fullmatch(r"\((-?\d+),\s*(-?\d+)\)", pairs.get("window_size", ""))
    if win:
        t.put("window_size", "window_size", [int(win.group(1)), int(win.group(2))])
    for src, key in (("deterministic", "deterministic"), ("is_training", "training"), ("fp8", "fp8")):
        if pairs.get(src) in ("True", "False"):
            t.put(src, key, pairs[src] == "True")
    drop = pairs.get("attention_dropout")
    if drop and re.fullmatch(r"\d+(\.\d+)?", drop):
        t.put("attention_dropout", "dropout", float(drop))
    if pairs.get("context_parallel") == "True":
        t.notes.append("the TE log says context parallelism is on but not its size or comm type: pass --cp-size and --cp-comm-type")
    return packages, facts


_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*===?\s*([0-9][^\s;#]*)")


def _requirements(t: _Taker, text: str, toml_doc: Optional[Mapping[str, Any]]) -> Dict[str, str]:
    packages: Dict[str, str] = {}
    if toml_doc is not None:  # uv.lock / poetry.lock: [[package]] name = ..., version = ...
        for pkg in toml_doc.get("package") or []:
            if isinstance(pkg, Mapping) and isinstance(pkg.get("name"), str) and is_version(str(pkg.get("version", ""))):
                packages[canonical_name(pkg["name"])] = str(pkg["version"])
    else:
        for line in text.splitlines():
            m = _REQ.match(line)
            if m and is_version(m.group(2)):
                packages[canonical_name(m.group(1))] = m.group(2)
    t.took.append(f"{len(packages)} pinned package(s) as the installed set (other facts unknown)")
    return packages


# --------------------------------------------------------------------------- recognising


def _load_structured(path: Path, text: str) -> Tuple[Optional[str], Any]:
    """('json'|'toml'|'yaml'|None, document)."""
    suffix = path.suffix.lower()
    if suffix == ".json" or text.lstrip().startswith("{"):
        try:
            return "json", json.loads(text)
        except json.JSONDecodeError as exc:
            if suffix == ".json":
                raise InputError(f"invalid JSON: {exc.msg}", path=str(path), line=exc.lineno) from None
    if suffix in (".toml", ".lock") or re.search(r"^\s*\[[A-Za-z_.\[\]]+\]\s*$", text, re.M):
        try:
            import tomllib  # type: ignore[import-not-found,unused-ignore]
        except ModuleNotFoundError:  # Python < 3.11
            import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
        try:
            return "toml", tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            if suffix == ".toml":
                raise InputError(f"invalid TOML: {exc}", path=str(path)) from None
    if suffix in (".yaml", ".yml") or re.search(r"^[A-Za-z_][\w.-]*\s*:", text, re.M):
        from doctor.yamlio import load_yaml

        try:
            return "yaml", load_yaml(text, str(path))
        except InputError:
            if suffix in (".yaml", ".yml"):
                raise
    return None, None


def _lines(doc: Any) -> Mapping[str, int]:
    return dict(getattr(doc, "key_lines", {}) or {})


def read_config(path: Path) -> ConfigRead:
    """Read one config file of any supported kind (see the module table)."""
    if path.suffix == ".py":
        raise InputError("a Python config is never executed", path=str(path), hint="pass the YAML/JSON/TOML it loads, or the arguments it builds")
    if not path.is_file():
        raise InputError("config file not found" if not path.exists() else "not a regular file", path=str(path))
    raw = path.read_bytes()[: MAX_BYTES + 1]
    if len(raw) > MAX_BYTES:
        raise InputError(f"config file larger than {MAX_BYTES // 1024 // 1024} MiB", path=str(path))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text (is this a config file?)", path=str(path)) from None
    name = str(path)
    if "Running with config={" in text:
        t = _Taker(name, {})
        packages, facts = _te_log(t, text)
        return ConfigRead("te-log", name, t.workload, packages or None, facts, t.env, tuple(t.took), tuple(t.notes))
    if re.search(r"(^|\s)--(context-parallel-size|num-attention-heads|tensor-model-parallel-size|seq-length)\b", text):
        t = _Taker(name, {})
        _megatron_args(t, text)
        return ConfigRead("megatron", name, t.workload, None, {}, t.env, tuple(t.took), tuple(t.notes))
    fmt, doc = _load_structured(path, text)
    t = _Taker(name, _lines(doc))
    if fmt == "toml" and isinstance(doc, Mapping) and isinstance(doc.get("package"), list):
        return ConfigRead("requirements", name, {}, _requirements(t, text, doc), {}, {}, tuple(t.took))
    if fmt == "toml" and isinstance(doc, Mapping) and any(k in doc for k in ("parallelism", "training", "job")):
        _torchtitan(t, doc)
        kind = "torchtitan"
    elif fmt == "json" and isinstance(doc, Mapping) and ("zero_optimization" in doc or any(k.startswith("train_") and "batch" in k for k in doc)):
        _deepspeed(t, doc)
        kind = "deepspeed"
    elif fmt == "json" and isinstance(doc, Mapping) and ("num_attention_heads" in doc or "model_type" in doc):
        raise InputError("this is a model config.json", path=name, hint="pass it with --model")
    elif fmt == "yaml" and isinstance(doc, Mapping) and "base_model" in doc:
        _axolotl(t, doc)
        kind = "axolotl"
    elif fmt == "yaml" and isinstance(doc, Mapping) and "model_name_or_path" in doc and any(k in doc for k in ("stage", "finetuning_type", "template", "flash_attn")):
        _llamafactory(t, doc)
        kind = "llamafactory"
    elif fmt == "yaml" and isinstance(doc, Mapping) and (
        isinstance(doc.get("actor_rollout_ref"), Mapping)
        or ("ulysses_sequence_parallel_size" in doc and isinstance(doc.get("model"), Mapping) and "partial_pretrain" in doc["model"])
    ):
        _verl(t, doc)
        kind = "verl"
    elif fmt == "yaml" and isinstance(doc, Mapping) and ("compute_environment" in doc or "distributed_type" in doc):
        _accelerate(t, doc)
        kind = "accelerate"
    elif fmt == "yaml" and isinstance(doc, Mapping) and isinstance(doc.get("model"), Mapping) and any(
        k in doc["model"] for k in ("num_attention_heads", "context_parallel_size", "encoder_seq_length")
    ):
        _nemo(t, doc)
        kind = "nemo"
    elif fmt is None and any(_REQ.match(line) for line in text.splitlines()):
        return ConfigRead("requirements", name, {}, _requirements(t, text, None), {}, {}, tuple(t.took))
    else:
        raise InputError(
            "not a config attn-doctor recognises",
            path=name,
            hint="supported: axolotl/LLaMA-Factory/accelerate/NeMo/verl YAML, DeepSpeed JSON, torchtitan TOML, Megatron arguments, "
            "a TransformerEngine NVTE_DEBUG log, pip freeze / requirements / uv.lock / poetry.lock",
        )
    return ConfigRead(kind, name, t.workload, None, {}, t.env, tuple(t.took), tuple(t.notes))
