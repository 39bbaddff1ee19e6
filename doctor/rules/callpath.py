"""Who runs attention: the call path from the training framework to the kernel library.

    framework   who dispatches attention (transformers, megatron, torchtitan, xtuner, ...)
    attention   the framework's own choice (transformers' attn_implementation: sdpa,
                flash_attention_2, ...), when it has one: the one the model is loaded with,
                which is not the stated one where the framework replaces it (framework_attention)
    library     the kernel library that runs: torch-sdpa, flash-attn, flash-attn-3, flash-attn-4,
                transformer-engine, flex, eager
    cp_impl     whose context/sequence parallelism splits the sequence: none, te, torch_ring,
                ulysses, ring_flash_attn
    packing     padded (with a mask), varlen (cu_seqlens kernels), padding_free
    packed_mask whether transformers' SDPA path turns a padding-free batch into a mask tensor
    model_mask  whether transformers' model code hands SDPA a mask tensor on every forward
    static_cache_mask  whether transformers' SDPA call gets a mask tensor because the KV cache is
                a static (compilable) one
    no_packed_search  whether the model's code never lets transformers search position_ids
                for packed samples in this release (any attention)
    te_attention  whether TE's DotProductAttention may run attention (false only where the
                workload states another attention, a framework that never calls TE's, or a
                trainer off its Megatron route: verl/ms-swift with another `distributed`,
                LLaMA-Factory without USE_MCA)
    flash_attn_direct  whether code may call flash-attn's functions itself (false where the
                workload states an attn_implementation or a framework that picks attention)
    megatron_core  whether Megatron-Core's layers run attention (Megatron-LM, NeMo, any trainer
                with `distributed: megatron`, LLaMA-Factory's USE_MCA route)
    mcore_adapter  whether a `mcore_adapter` module is importable (LLaMA-Factory's USE_MCA route
                needs it; PyPI's mcore-adapter 0.0.1 is an unrelated project and does not count)

A field the workload states (`framework:`, `context_parallel.impl`, `packing:`,
`attn_implementation:`) is taken as given; the others are inferred from what is installed and
listed in `inferred`, so every output can say which parts are a guess. Rule conditions read
them as `path.<field>` (e.g. a TransformerEngine context-parallel rule needs `path.cp_impl: te`).
"""

from __future__ import annotations

import re
from typing import Mapping, Optional, Tuple

from doctor.model import CALL_PATH_FIELDS as FIELDS
from doctor.model import CallPath, Facts, ImportStatus, Workload, installed_te
from doctor.releases.model_support import model_in_release, model_supports

# Installed distributions that dispatch attention themselves, most specific first: when
# LLaMA-Factory is installed, its trainer (on top of transformers) is what runs.
FRAMEWORK_DISTS: Tuple[Tuple[str, str], ...] = (
    ("llamafactory", "llamafactory"),
    ("llmtuner", "llamafactory"),  # LLaMA-Factory's PyPI name up to 0.7.1
    ("axolotl", "axolotl"),
    ("xtuner", "xtuner"),
    ("verl", "verl"),
    ("ms-swift", "ms-swift"),
    ("unsloth", "unsloth"),
    ("torchtitan", "torchtitan"),
    ("nemo-toolkit", "nemo"),
    ("megatron-core", "megatron"),
    ("transformers", "transformers"),
)
# Frameworks whose attention is a transformers model's (they pass attn_implementation on).
HF_BASED = ("transformers", "trl", "peft", "accelerate", "deepspeed", "axolotl", "llamafactory", "xtuner", "verl", "ms-swift", "unsloth", "diffusers")
# Stated frameworks that, with no attn_implementation stated, load the model with transformers'
# own default (sdpa for a model with an SDPA class; default_attention lists where not) and run its sdpa_attention_forward: the
# backend rules, decided before the transformers backend is chosen, read the GQA form of that
# call (verl and XTuner set flash_attention_2 themselves, which default_attention says for verl;
# unsloth and diffusers call SDPA from their own code, unsloth 2026.4.1+ FastModel picks
# flash_attention_2 itself: unsloth_default_attention)
HF_DEFAULT_SDPA = ("transformers", "trl", "peft", "accelerate", "deepspeed", "axolotl", "llamafactory", "ms-swift")
# Whose sequence parallelism each framework uses when it shards the sequence.
# (Megatron-LM, NeMo and every trainer's Megatron route hand CP to TE: megatron_core decides that first.)
CP_BY_FRAMEWORK = {
    "torchtitan": "torch_ring",
    "accelerate": "torch_ring",
    "deepspeed": "ulysses",
    "ms-swift": "ulysses",
    "verl": "ulysses",
    "xtuner": "ulysses",
    "llamafactory": "ulysses",
    "axolotl": "ring_flash_attn",
}
LIBRARY_OF_IMPL = {
    "sdpa": "torch-sdpa",
    "flash_attention_2": "flash-attn",
    "flash_attention_3": "flash-attn-3",
    "flash_attention_4": "flash-attn-4",
    "flex_attention": "flex",
    "eager": "eager",
}
# What the user states that puts another library than TE's DotProductAttention on the path: an
# HF attn_implementation, or a framework that never calls TE's attention.
TE_ELSEWHERE_ATTN = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flash_attention_4", "flex_attention")
# XTuner loads through transformers and imports no TE (no transformer_engine in xtuner v0.1.23 or
# v0.2.0; check-R6 of sample 30)
TE_ELSEWHERE_FRAMEWORKS = ("transformers", "trl", "peft", "accelerate", "axolotl", "unsloth", "diffusers", "torchtitan", "xtuner")
# Models built on TE's layers and loaded through transformers (NVIDIA's bionemo-recipes checkpoints,
# trust_remote_code: model_type nv_esm, nv_esmc, ...; their modules are te.pytorch.TransformerLayer
# whatever attn_implementation says) keep TE's attention on the path under any framework.
TE_MODEL_TYPE = re.compile(r"^nv_")
# Frameworks whose attention is chosen by the framework (an attn_implementation, TE, SDPA), so a
# flash-attn the user has installed runs only through that choice. Not deepspeed (Megatron-DeepSpeed
# calls flash-attn itself) or xtuner (its dispatch does), nor verl: its FSDP workers load the model
# with attn_implementation="flash_attention_2" when none is configured (v0.2 .. v0.7.0
# fsdp_workers.py) and its qwen2_vl/glm4v patches call flash_attn_varlen_func themselves.
# unsloth calls flash_attn_func/varlen itself too, with causal=True on square training blocks and
# dropout_p=0.0 except Granite (head_dim <= 128) (v0.1.801-beta attention_dispatch.py, models/llama.py,
# granite.py), so no flash_attn.* finding has reached it so far. Left in although they have direct paths (legacy models only):
# megatron (Megatron-LM's legacy FlashSelfAttention, --use-legacy-models --use-flash-attn, up to
# core_r0.1x) and nemo (nlp/modules/common/megatron/attention.py, use_flash_attention, through v2.4.0).
FA_ELSEWHERE_FRAMEWORKS = ("transformers", "trl", "peft", "accelerate", "axolotl", "unsloth", "llamafactory", "diffusers",
                           "ms-swift", "torchtitan", "nemo", "megatron")
__all__ = ["FIELDS", "CallPath", "default_attention", "flash_attn_direct", "framework_attention", "infer", "lf_megatron_route", "mcore_adapter_importable", "megatron_core", "te_attention", "unsloth_own_family", "verl_megatron_workers_mcore"]


def te_attention(workload: Workload, packages: Optional[Mapping[str, str]] = None, env: Optional[Mapping[str, str]] = None,
                 imports: Optional[Mapping[str, ImportStatus]] = None) -> bool:
    """May TE's DotProductAttention run attention for this workload (stated facts only; the
    packages and environment only to tell a trainer's Megatron route)?"""
    if workload.model_type and TE_MODEL_TYPE.match(workload.model_type):
        return True
    # Megatron-LM's --attention-backend local runs Megatron-Core's own DotProductAttention: it
    # asserts --spec local (core_v0.11.0 training/arguments.py:227-228, core_v0.14.0 :366), a
    # spec without TE layers, and sets NVTE_FLASH/FUSED/UNFUSED_ATTN to 0 besides (core_v0.11.0
    # language_module.py:45-48) (sample 26 row 28). NeMo's own specs are not read here.
    if workload.framework == "megatron" and workload.attention_backend == "local":
        return False
    # verl's FSDP workers load the model through transformers (attn_implementation
    # flash_attention_2 unless configured: v0.2 .. v0.7.0 fsdp_workers.py); only its Megatron
    # workers (distributed: megatron) build Megatron-Core layers with TE's attention (check-R3 of
    # sample 30). ms-swift imports TE only under swift/megatron/ (v3.7.0), its Megatron route
    # (check-R6). An unstated strategy may be either.
    if workload.framework in ("verl", "ms-swift") and workload.distributed not in (None, "megatron"):
        return False
    # verl before 0.4.0 never calls TE's attention: its FSDP workers load through transformers and
    # its Megatron workers run verl's own models, which call flash-attn (megatron_core), whatever
    # the strategy (review of sample 31: TE-FA2-VERSION-ASSERT fired for 0.3.0.post1, unstated)
    if workload.framework == "verl" and not verl_megatron_workers_mcore(packages):
        return False
    # LLaMA-Factory loads through transformers and imports no TE (no transformer_engine in any
    # llamafactory wheel 0.7.1-0.9.5); 0.9.4+ with USE_MCA=1 and mcore_adapter installed takes
    # Megatron-Core (0.9.4 hparams/parser.py:56-57), whose layers are TE's (check-R6 of sample 30;
    # the same route as te_pytorch_imported)
    if workload.framework == "llamafactory":
        return lf_megatron_route(packages, env, imports, workload.training, workload.method)
    return workload.attn_implementation not in TE_ELSEWHERE_ATTN and workload.framework not in TE_ELSEWHERE_FRAMEWORKS


def lf_megatron_route(packages: Optional[Mapping[str, str]], env: Optional[Mapping[str, str]],
                      imports: Optional[Mapping[str, ImportStatus]] = None, training: bool = True,
                      method: Optional[str] = None) -> bool:
    """Does LLaMA-Factory take its Megatron-Core route: 0.9.4+ with USE_MCA=1 (true/y/1, any case;
    0.9.4 hparams/parser.py:56-57, 0.9.5 :63-64) and mcore_adapter installed (without it
    LLaMA-Factory stops on its own ImportError first; 0.9.3 has no USE_MCA)? A probe that found no
    `mcore_adapter` module on the path (imports, looked for only) overrules the distribution: PyPI's
    `mcore-adapter` 0.0.1 is an unrelated project that installs a folder named `mcore-adapter`, which
    no import can reach (ROLL's mcore_adapter is installed from its repository). Training only:
    `llamafactory-cli chat`/eval/export load the model through transformers whatever USE_MCA says
    (0.9.5 chat/hf_engine.py:59), and so do the training stages other than pt/sft/dpo (0.9.4
    train/tuner.py:69, 0.9.5 :98): a stated `method` of kto, rm or ppo (LLaMA-Factory's other
    stages) leaves the route; orpo and simpo are stage dpo's pref_loss there. Unstated, pt/sft/dpo
    is assumed."""
    from doctor.versions import version_matches

    lf = (packages or {}).get("llamafactory")
    mca = re.match(r"^(?i:true|y|1)\Z", (env or {}).get("USE_MCA") or "") is not None
    if not training or method in ("kto", "rm", "ppo"):
        return False
    return bool(mca and lf and version_matches(lf, ">=0.9.4") and mcore_adapter_importable(packages, imports))


def mcore_adapter_importable(packages: Optional[Mapping[str, str]], imports: Optional[Mapping[str, ImportStatus]] = None) -> bool:
    """Is a `mcore_adapter` module importable? Where the probe looked for the module (imports:
    present/missing), its finding: a ROLL checkout on PYTHONPATH needs no distribution, and PyPI's
    `mcore-adapter` 0.0.1 (an unrelated project) installs a folder named `mcore-adapter` no import
    reaches. Not probed: an installed distribution other than 0.0.1 (ROLL's releases are 0.5-0.7).
    Rules read it as path.mcore_adapter (LF-USE-MCA-MCORE-ADAPTER-MISSING)."""
    module = (imports or {}).get("mcore_adapter")
    if module is not None and module.status in ("missing", "present"):
        return module.status == "present"
    from doctor.versions import version_matches

    dist = (packages or {}).get("mcore-adapter")
    return dist is not None and not version_matches(dist, "==0.0.1")  # 0.0.1+local too (review-1)


def megatron_core(workload: Workload, packages: Optional[Mapping[str, str]], env: Optional[Mapping[str, str]], framework: Optional[str],
                  imports: Optional[Mapping[str, ImportStatus]] = None) -> bool:
    """Do Megatron-Core's layers run attention here (`framework`: stated or inferred)? Megatron-LM
    and NeMo; any trainer on Megatron-Core parallelism (`distributed: megatron`: verl's Megatron
    workers build megatron.core GPTModel layers from v0.4.0, verl/models/mcore; ms-swift's
    swift/megatron route); LLaMA-Factory's USE_MCA route (mcore_adapter builds Megatron-Core models)."""
    if framework in ("megatron", "nemo"):
        return True
    if workload.distributed == "megatron":
        # verl 0.2.x-0.3.x Megatron workers build verl's own Megatron models, whose attention calls
        # flash_attn_varlen_func itself (v0.3.0.post1 models/llama/megatron/layers/
        # parallel_attention.py:436, context parallelism fixed at 1); Megatron-Core layers with
        # TE's attention from v0.4.0 (megatron_workers.py:154 init_mcore_model; check-R3 of sample 31)
        return framework != "verl" or verl_megatron_workers_mcore(packages)
    return framework == "llamafactory" and lf_megatron_route(packages, env, imports, workload.training, workload.method)


def verl_megatron_workers_mcore(packages: Optional[Mapping[str, str]]) -> bool:
    """Are verl's Megatron workers Megatron-Core's (verl 0.4.0+, or verl's release unknown)? verl
    0.2.x-0.3.x build verl's own Megatron models instead, whose attention calls flash-attn itself."""
    from doctor.versions import version_matches

    verl = (packages or {}).get("verl")
    return verl is None or version_matches(verl, ">=0.4.0")


def flash_attn_direct(workload: Workload) -> bool:
    """May code call flash-attn's functions itself for this workload (stated facts only)?"""
    return workload.attn_implementation is None and workload.framework not in FA_ELSEWHERE_FRAMEWORKS


def infer(facts: Facts, workload: Workload, selections: Optional[Mapping[str, Optional[str]]] = None) -> CallPath:
    """The call path for these facts and this workload (`selections`: each framework's
    selected backend, when the engine has decided them)."""
    packages = facts.packages or {}
    inferred = []
    framework = workload.framework
    if framework is None:
        framework = next((f for dist, f in FRAMEWORK_DISTS if dist in packages), None)
        if framework is not None:
            inferred.append("framework")
    attention: Optional[str] = None
    library: Optional[str] = None
    mcore = megatron_core(workload, packages, facts.env, framework, facts.imports)
    if framework in HF_BASED and not mcore:
        attention = framework_attention(workload, packages, framework) or workload.attn_implementation
        if attention is None:
            chosen = (selections or {}).get("transformers")
            attention = chosen.split(".", 1)[1] if chosen else None
            if attention is not None:
                inferred.append("attention")
        library = LIBRARY_OF_IMPL.get(attention or "")
    elif mcore:
        # Megatron-LM, NeMo, or a trainer's Megatron route (verl's and ms-swift's Megatron workers,
        # LLaMA-Factory's USE_MCA): Megatron-Core's layers, not transformers' modeling code.
        # Without TE, Megatron-Core's local DotProductAttention is a matmul and its own fused
        # softmax (megatron-core 0.9.0 and 0.16.1 never call scaled_dot_product_attention;
        # flash_attn only for inference decoding): eager attention, not torch SDPA
        te = installed_te(packages) is not None
        library = "transformer-engine" if te else "eager"
        inferred.append("library")
    elif framework is None and installed_te(packages) is not None:
        library = "transformer-engine"  # TE installed and no framework that would call anything else
        inferred.append("library")
    elif framework == "torchtitan":
        library = "flex" if workload.attn_implementation == "flex_attention" else "torch-sdpa"
        if workload.attn_implementation is None:
            inferred.append("library")
    if workload.cp_size <= 1:
        cp_impl = "none"
    elif workload.context_parallel.impl is not None:
        cp_impl = workload.context_parallel.impl
    else:
        # Megatron-Core's context_parallel_size hands the CP group to TE's DotProductAttention
        # on every Megatron route (verl's Megatron workers: megatron.context_parallel_size; their
        # Ulysses is the FSDP workers' ulysses_sequence_parallel_size)
        guess = "te" if mcore else CP_BY_FRAMEWORK.get(framework or "")
        if guess is None and framework in HF_BASED:
            # transformers/TRL/PEFT shard the sequence through accelerate's ParallelismConfig
            # (cp_backend "torch", accelerate 1.10.0-1.15.0 parallelism_config.py); a transformers
            # model never calls TE's context parallelism, installed or not
            guess = "torch_ring"
        if guess is None:
            guess = "te" if installed_te(packages) is not None else "torch_ring"
        cp_impl = guess
        inferred.append("cp_impl")
    needs_mask = workload.mask == "arbitrary" or (workload.padding and workload.packing == "padded")
    # before the transformers backend is chosen, a stated HF framework with no attn_implementation
    # stated runs transformers' default SDPA path where default_attention says so (else eager or fa2,
    # or nothing): its mask and GQA form hold there
    has_sdpa = model_supports(packages.get("transformers"), workload.model_type, "sdpa")
    t = facts.torch
    gpu_torch = None if t.version is None else bool((t.cuda or t.hip) and t.cuda_available is not False)
    default_attn = default_attention(workload, packages, framework, has_sdpa, gpu_torch, unsloth_flash_usable(facts), flash_attn_imports(facts))
    # the backend pass (no library decided yet) reads the default call only for a stated framework
    stated_default = default_attn if workload.framework is not None else None
    default_library = LIBRARY_OF_IMPL.get(stated_default or "") if library is None else None
    default_sdpa = default_library == "torch-sdpa"
    sdpa_library = library or default_library
    packed_mask = hf_padding_free_mask(workload, framework, sdpa_library, packages)
    static_cache_mask = hf_static_cache_mask(workload, framework, sdpa_library, packages)
    model_mask = hf_model_mask(workload, framework, sdpa_library, packages)
    no_packed_search = hf_model_skips_packed_search(workload.model_type, packages.get("transformers"))
    supports = model_supports(packages.get("transformers"), workload.model_type, attention) if framework in HF_BASED else None
    has_fa2 = model_supports(packages.get("transformers"), workload.model_type, "flash_attention_2")
    why_model = "no model_type given" if not workload.model_type else "this model family or transformers release is not in the support table"
    in_release = model_in_release(packages.get("transformers"), workload.model_type)
    unknown = [(name, why_model) for name, got in (("model_supports", supports), ("model_has_fa2", has_fa2), ("model_has_sdpa", has_sdpa), ("model_in_transformers", in_release)) if got is None]
    if framework is None and facts.packages is None:
        unknown.append(("framework", "no framework stated and installed packages were not probed"))
    return CallPath(
        needs_mask=needs_mask,
        packed_mask=packed_mask,
        model_mask=model_mask,
        no_packed_search=no_packed_search,
        gqa_form=_gqa_form(workload, framework, sdpa_library, needs_mask or packed_mask or static_cache_mask, packages, facts.env),
        static_cache_mask=static_cache_mask,
        model_supports=supports,
        model_has_fa2=has_fa2,
        model_has_sdpa=has_sdpa,
        model_in_transformers=in_release,
        default_sdpa=default_sdpa,
        default_attention=default_attn,
        framework=framework,
        attention=attention,
        library=library,
        cp_impl=cp_impl,
        packing=workload.packing,
        model_type=workload.model_type,
        te_attention=te_attention(workload, packages, facts.env, facts.imports),
        flash_attn_direct=flash_attn_direct(workload),
        megatron_core=mcore,
        mcore_adapter=mcore_adapter_importable(packages, facts.imports),
        unsloth_own_family=unsloth_own_family(workload.model_type, packages),
        inferred=tuple(inferred),
        unknown=tuple(unknown),
    )


# the families unsloth's FastLanguageModel sends to its own loaders (FastLlamaModel and the classes
# built on it; 2024.8-2026.10.9 models/loader.py); Qwen3 joins them from 2025.4.2 (FastQwen3Model).
# The one list: rules read it as path.unsloth_own_family (rules/conditions.yaml unsloth_own_attention).
UNSLOTH_OWN_FAMILIES = ("llama", "mistral", "gemma", "gemma2", "qwen2")


def unsloth_own_family(model_type: Optional[str], packages: Mapping[str, str]) -> Optional[bool]:
    """Is `model_type` a family unsloth's own loaders patch (None: no model_type, or qwen3 with
    unsloth's release unknown)?"""
    from doctor.versions import version_matches

    if not model_type:
        return None
    if model_type in UNSLOTH_OWN_FAMILIES:
        return True
    if model_type != "qwen3":
        return False
    uns = packages.get("unsloth")
    return None if uns is None else version_matches(uns, ">=2025.4.2")


def framework_attention(workload: Workload, packages: Mapping[str, str], framework: Optional[str]) -> Optional[str]:
    """The attn_implementation a framework loads the transformers model with whatever the
    workload asks for, or None where the request (or transformers' default) stands.

    - sdpa: unsloth 2025.3.10-2025.3.19 on a stated full fine-tuning (finetune: full, which also
      stands for load_in_8bit=True) or a stated family its own loaders do not patch (not llama,
      mistral, gemma, gemma2, qwen2): FastLanguageModel hands such a load to FastModel (2025.3.10
      loader.py:96-116 and the else-branch :295-314; 2025.3.19 :102-107 and :307-326), whose
      FastBaseModel.from_pretrained drops the
      attn_implementation asked for and loads with sdpa (2025.3.10 vision.py:240 and :252;
      2025.3.11-2025.3.18 pop the request and pass sdpa, eager only for Pixtral; 2025.3.19
      vision.py:307 sets sdpa unconditionally). 2025.4.1 keeps a stated one (vision.py:309-310).
      Not for a family that declares no sdpa (path.model_has_sdpa false), which those releases
      either refuse at load (transformers raises on sdpa) or load with eager (2025.3.19, Pixtral):
      not modelled, the request is left as stated."""
    from doctor.versions import version_matches

    if framework != "unsloth":
        return None
    if workload.finetune != "full" and unsloth_own_family(workload.model_type, packages) is not False:
        return None
    uns = packages.get("unsloth")
    if uns is None or not version_matches(uns, ">=2025.3.10,<2025.4.1"):
        return None
    if model_supports(packages.get("transformers"), workload.model_type, "sdpa") is False:
        return None
    return "sdpa"


def unsloth_flash_usable(facts: Facts) -> Optional[bool]:
    """unsloth's HAS_FLASH_ATTENTION (2026.4.1 models/_utils.py:922-1022, 2026.10.9 :4324-4410):
    a flash_attn module whose flash_attn_interface imports, on a CUDA torch whose current device
    is sm 8.0 or newer, or on any ROCm torch. None: the torch build or the GPU was not probed."""
    from doctor.versions import version_matches

    v = (facts.packages or {}).get("flash-attn")
    if v is None or version_matches(v, FLASH_ATTN_FA3_HOPPER):
        return False  # no flash_attn module (a hopper/ build names its modules otherwise)
    if flash_attn_imports(facts) is False:
        return False
    t = facts.torch
    if t.hip:
        return True
    if t.version is not None and not t.cuda:
        return False
    if not facts.gpus:
        return None
    return facts.gpus[0].sm >= 80


# The `flash-attn` distributions that are FlashAttention-3: hopper/ built from flash-attention
# 2.7.3-2.7.4.post1 names itself flash_attn 3.0.0b1 (hopper/setup.py PACKAGE_NAME, hopper/__init__.py
# "3.0.0.b1"), with no flash_attn module. ROCm's fork (ROCm/flash-attention tag v3.0.0.r1-cktile)
# installs flash_attn 3.0.0.r1, i.e. 3.0.0.post1: the FlashAttention-2 API (flash_attn_2_cuda), so
# it lies above this range. Also the fact flash_attn.build (doctor.rules.conditions).
FLASH_ATTN_FA3_HOPPER = ">=3.0.0a0,<=3.0.0"
# families unsloth 2026.4.1+ keeps off flash_attention_2 in some of its releases (eager-only
# gemma3n and deepseek_v4, flash-excluded gpt_oss/deepseek_v4/mllama, flex-preferred gemma3,
# gemma3_text, shieldgemma2: 2026.4.1 _utils.py:233-234, 2026.6.1 :239-243, 2026.8.1 :394-412,
# 2026.10.9 :520-531); their per-release choice is not modelled: left to transformers' default
UNSLOTH_FA2_UNMODELLED = ("gemma3n", "deepseek_v4", "gpt_oss", "mllama", "gemma3", "gemma3_text", "shieldgemma2")


def unsloth_default_attention(workload: Workload, packages: Mapping[str, str], flash_usable: Optional[bool]) -> Optional[str]:
    """flash_attention_2 where unsloth's FastModel picks it with no attn_implementation asked for,
    else None (transformers' own default stands). From 2026.4.1 FastBaseModel.from_pretrained
    sets the attn_implementation itself when none is passed (2026.4.1 vision.py:621 and :632-633;
    2026.10.9 vision.py:3730-3739): flash_attention_2 first where unsloth's HAS_FLASH_ATTENTION
    holds (unsloth_flash_usable; None read as yes) and the model class declares FA2
    (path.model_has_fa2; unknown read as yes) (2026.4.1 _utils.py:254-269 determine_attention_implementation,
    2026.6.1 :495, 2026.10.9 :2964-3021 resolve_attention_implementation). 2026.3.18 and earlier
    pass no attn_implementation of their own there (vision.py:612-631: flex or sdpa). On the
    FastModel route only (a stated full fine-tuning or 8-bit load, or a family unsloth's own
    loaders do not patch: rules/conditions.yaml unsloth_transformers_route). Not modelled (None):
    the flex fallback without flash-attn (2026.2.1+), the families in UNSLOTH_FA2_UNMODELLED,
    a float32 load (2026.10.9 drops flash for it, :2997-3000) and a head dim above 256
    (2026.6.1+ _get_flash_attention_disable_reason)."""
    from doctor.versions import version_matches

    uns = packages.get("unsloth")
    if uns is None or not version_matches(uns, ">=2026.4.1"):
        return None
    if workload.finetune != "full" and unsloth_own_family(workload.model_type, packages) is not False:
        return None
    if flash_usable is False or workload.model_type in UNSLOTH_FA2_UNMODELLED or workload.dtype == "fp32":
        return None
    if workload.head_dim_max > 256:
        return None
    if model_supports(packages.get("transformers"), workload.model_type, "flash_attention_2") is False:
        return None
    return "flash_attention_2"


# XTuner's SupervisedFinetune._prepare_for_flash_attn (`xtuner train`): the model families it
# loads with flash_attention_2 where FlashAttention-2 imports, and with sdpa on a torch new enough,
# per release (read at the tags: v0.1.16 model/sft.py:176-190, v0.1.18 :178-194, v0.1.19 :178-202,
# v0.1.20 :176-201, v0.1.23 :186-211, v0.2.0 :204-251); the torch floor of its sdpa arm is
# dispatch/__init__.py's SUPPORT_FLASH1 (v0.1.16-v0.1.17 torch >= 2.0.0, v0.1.18 on >= 2.1.1).
_XTUNER_SDPA_BASE = ("llama", "gemma", "mistral", "mixtral", "qwen2", "starcoder2")
_XTUNER_FAMILIES = (
    # (xtuner releases, families with the sdpa arm, families with the flash_attention_2 arm)
    (">=0.1.16,<0.1.18", _XTUNER_SDPA_BASE, _XTUNER_SDPA_BASE + ("internlm2",)),
    (">=0.1.18,<0.1.19", _XTUNER_SDPA_BASE + ("qwen2_moe",), _XTUNER_SDPA_BASE + ("internlm2", "qwen2_moe")),
    (">=0.1.19,<0.1.20", _XTUNER_SDPA_BASE + ("qwen2_moe", "phi3"), _XTUNER_SDPA_BASE + ("internlm2", "qwen2_moe", "phi3")),
    (">=0.1.20,<0.2.0", _XTUNER_SDPA_BASE + ("qwen2_moe", "phi3"), _XTUNER_SDPA_BASE + ("internlm2", "qwen2_moe", "phi3", "deepseek_v2")),
    (">=0.2.0,<0.3", _XTUNER_SDPA_BASE + ("qwen2_moe", "phi3", "internlm3"),
     _XTUNER_SDPA_BASE + ("internlm2", "qwen2_moe", "phi3", "deepseek_v2", "internlm3")),
)


def xtuner_default_attention(workload: Workload, packages: Mapping[str, str], flash_imports: Optional[bool], gpu_torch: Optional[bool]) -> Optional[str]:
    """The attn_implementation `xtuner train` sets where the config names none: flash_attention_2
    for its FA2 families where FlashAttention-2 imports (v0.1.16-v0.1.19: `from flash_attn import
    flash_attn_func` succeeds, whatever the GPU; from v0.1.20 transformers' is_flash_attn_2_available,
    flash-attn >= 2.1.0 on a CUDA or ROCm torch: v0.1.20 dispatch/__init__.py:9,16), else sdpa for its SDPA families on a torch new enough,
    else None (transformers' own default; XTuner's dispatch patches some forwards itself). Not
    modelled: v0.1.16-v0.1.18 overwrite an attn_implementation the config does name (v0.1.19
    keeps it); XTuner < 0.1.16 and the 1.x rewrite (None)."""
    from doctor.versions import version_matches

    xt = packages.get("xtuner")
    if xt is None or workload.model_type is None:
        return None
    row = next((r for r in _XTUNER_FAMILIES if version_matches(xt, r[0])), None)
    if row is None:
        return None
    fa = packages.get("flash-attn")
    flash2 = flash_imports is not False and fa is not None and version_matches(fa, ">=2.0") and not version_matches(fa, FLASH_ATTN_FA3_HOPPER)
    if flash2 and version_matches(xt, ">=0.1.20"):
        flash2 = gpu_torch is not False and version_matches(fa, ">=2.1.0")
    if flash2 and workload.model_type in row[2]:
        return "flash_attention_2"
    torch = packages.get("torch")
    floor = ">=2.0.0" if version_matches(xt, "<0.1.18") else ">=2.1.1"
    if workload.model_type in row[1] and (torch is None or version_matches(torch, floor)):
        return "sdpa"
    return None


def flash_attn_imports(facts: Facts) -> Optional[bool]:
    """Whether a flash_attn module imports: False where the probe saw its import fail, None
    otherwise (not probed, or probed fine; the installed version is read by the caller)."""
    st = facts.imports.get("flash_attn") or facts.imports.get("flash_attn_2_cuda")
    if st is not None and st.status in ("error", "missing", "timeout"):
        return False
    return None


def default_attention(workload: Workload, packages: Mapping[str, str], framework: Optional[str] = None, has_sdpa: Optional[bool] = None, gpu_torch: Optional[bool] = None,
                      unsloth_flash: Optional[bool] = None, flash_imports: Optional[bool] = None) -> Optional[str]:
    """The attn_implementation a transformers model is loaded with when the workload states none,
    for a transformers-based framework (`framework`: the stated or inferred one; None reads the
    stated one; `has_sdpa`: path.model_has_sdpa, when the caller has it). The one place this knowledge lives: the transformers backend table orders by it
    (`path.default_attention`) and the backend rules read `path.default_sdpa` from it.

    - sdpa: transformers' own default (4.36+, a model whose classes declare sdpa);
    - eager: transformers before 4.36; a model whose classes declare no sdpa in this release
      (path.model_has_sdpa false: gpt_oss, gptj, ...; transformers silently keeps eager, 4.46.3
      modeling_utils.py _check_and_enable_sdpa `not cls._supports_sdpa`, 4.57.1
      _check_and_adjust_attn_implementation); Gemma-2 on 4.45-4.47 (its _check_and_enable_sdpa
      swaps the default sdpa for eager, 4.45.0-4.47.1 modeling_gemma2.py; gone in 4.48.0);
    - flash_attention_2 or eager: LLaMA-Factory's Gemma-2 (its `auto` becomes fa2 with flash-attn
      installed, else eager: model_utils/attention.py configure_attn_implementation, 0.8.3-0.9.2
      when training, 0.9.3+ always);
    - flash_attention_2: ModernBERT on transformers 4.48-5.1, which asks for it first and keeps it
      wherever is_flash_attn_2_available() holds: a flash_attn module of 2.1.0 or newer and a torch
      that reaches a CUDA (or ROCm) device; the GPU's architecture is not checked there, so an
      sm75 card gets flash_attention_2 and fails in it (4.48.0 modeling_modernbert.py:654-683
      _autoset_attn_implementation with modeling_utils.py:1654-1679; 4.57.1 :624-645 and 5.0.0
      :690-711 _flash_attn_2_can_dispatch; 5.1.0 :422-438; gone in 5.2.0). `gpu_torch`: torch has
      CUDA or ROCm and a device (None: not probed, read as yes). On an Ascend NPU torch (torch-npu
      installed, no CUDA or ROCm) the FA2 check itself lets flash_attention_2 through, so
      ModernBERT keeps it there: 4.51-4.53 with no flash_attn installed (the NPU shortcut,
      4.51.0 modeling_utils.py:2243-2249, 4.53.3 :2448-2454), 4.54.1-4.55.2 with a flash_attn
      distribution installed (its version is read, nothing raises without CUDA/ROCm and the
      parameter-device check finds no parameters yet: 4.54.1 :2449-2472, :2486-2504), and
      4.55.3-5.1 whatever is installed (the NPU return comes first: 4.55.3 :2488-2490, 4.57.1
      :2417-2419, 5.0.0 :1583-1585, 5.1.0 :1548-1550). 4.54.0 keeps sdpa everywhere (its ModernBERT
      override is never called). 4.48-4.50, 4.51-4.53 with flash_attn
      installed (raises for want of a device_map in from_pretrained; a device_map or from_config
      would keep flash_attention_2, not modelled) and 4.54-4.55.2 without it fall back to sdpa;
      4.56-4.57 with `kernels` installed first try a Hub kernel (not modelled);
    - flash_attention_2: verl's FSDP workers (not `distributed: megatron`), which load it when
      none is configured in every release (v0.2-v0.6.0 fsdp_workers.py hard-code it: v0.3.0.post1
      :202, v0.4.1 :221, v0.5.0 :254; v0.6.1 :318 and v0.7.0 :331 read
      override_config.attn_implementation with flash_attention_2 as its default, as 0.8.0 and 0.9.1
      workers/config/model.py:185 do); unsloth 2026.4.1+ FastModel (unsloth_default_attention);
    - flash_attention_2 or sdpa: `xtuner train` 0.1.16-0.2.0 for the families it names
      (xtuner_default_attention);
    - None: an attn_implementation is stated, the framework is not transformers-based or picks
      attention itself (XTuner when training, off the families xtuner_default_attention names, unsloth off the case above,
      diffusers), or nothing runs (ms-swift 3.4.1+ with
      padding_free/packing refuses them without a flash attn_impl before the model is built:
      3.4.1 train_args.py:139-141 (--packing, the only flag then), 3.5.0 :135-143, 3.7.0 :136-144;
      SWIFT-PACKING-NEEDS-FLASH-ATTN; an unknown ms-swift is read the same)."""
    from doctor.versions import version_matches

    framework = workload.framework if framework is None else framework
    # XTuner chooses flash_attention_2 only on its training path (SupervisedFinetune); `xtuner
    # chat`/mmbench load the plain transformers model with no attn_implementation (v0.1.23
    # tools/chat.py:235, v0.2.0 :264): transformers' own default (check-R3 of sample 30)
    xtuner_inference = framework == "xtuner" and workload.training is False
    if workload.attn_implementation is None and framework == "verl" and workload.distributed != "megatron":
        return "flash_attention_2"
    if workload.attn_implementation is None and framework == "unsloth":
        return unsloth_default_attention(workload, packages, unsloth_flash)
    if workload.attn_implementation is None and framework == "xtuner" and not xtuner_inference:
        return xtuner_default_attention(workload, packages, flash_imports, gpu_torch)
    if workload.attn_implementation is not None or (framework not in HF_DEFAULT_SDPA and not xtuner_inference):
        return None
    tf, model = packages.get("transformers"), workload.model_type
    swift = packages.get("ms-swift")
    if framework == "ms-swift" and workload.packing in ("padding_free", "varlen") and (swift is None or version_matches(swift, ">=3.4.1")):
        return None
    lf = packages.get("llamafactory") or packages.get("llmtuner")
    if framework == "llamafactory" and model == "gemma2" and (lf is None or version_matches(lf, ">=0.8.3")) and (workload.training or lf is None or version_matches(lf, ">=0.9.3")):
        return "flash_attention_2" if packages.get("flash-attn") else "eager"
    if tf is not None and not version_matches(tf, ">=4.36"):
        return "eager"
    if (has_sdpa if has_sdpa is not None else model_supports(tf, model, "sdpa")) is False:
        return "eager"
    if model == "gemma2" and tf is not None and version_matches(tf, ">=4.45,<4.48"):
        return "eager"
    fa = packages.get("flash-attn")
    # 4.54.0 only: ModernBERT overrides set_attention_implementation, which nothing in that
    # release calls (4.54.0 modeling_modernbert.py:614-632; modeling_utils.py has no such method),
    # so its flash-first choice never runs and the default sdpa stays (check-R8 of sample 28);
    # 4.54.1 overrides _check_and_adjust_attn_implementation, the hook that is called (:616)
    if model == "modernbert" and tf is not None and version_matches(tf, "==4.54.0"):
        return "sdpa"
    if (model == "modernbert" and tf is not None and version_matches(tf, ">=4.48,<5.2") and gpu_torch is not False
            and fa is not None and version_matches(fa, ">=2.1.0,<3")):
        return "flash_attention_2"
    if model == "modernbert" and tf is not None and gpu_torch is not True and packages.get("torch-npu") is not None and (
            version_matches(tf, ">=4.55.3,<5.2")
            or (fa is None and version_matches(tf, ">=4.51,<4.54"))
            or (fa is not None and version_matches(tf, ">=4.54.1,<4.55.3"))):
        return "flash_attention_2"
    return "sdpa"


def _gqa_form(workload: Workload, framework: Optional[str], library: Optional[str], needs_mask: bool, packages: Mapping[str, str], env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """transformers' SDPA path copies kv heads up (repeat_kv) unless it can pass enable_gqa
    (integrations/sdpa_attention.py use_gqa_in_sdpa, CUDA branch): from 4.54 with torch >= 2.5 and
    no mask tensor (a padded or arbitrary mask, a reached window, q_len != kv_len, or a
    padding-free packed batch turned into a per-sample mask: hf_padding_free_mask); from 5.13 also
    only when q/k and v head dims are equal and at most 256; from 5.23 always when
    TRANSFORMERS_SDPA_FORCE_GQA=1. TE and flash-attn take fewer kv heads natively."""
    from doctor.versions import version_matches

    if not workload.gqa:
        return "none"
    if library in ("transformer-engine", "flash-attn", "flash-attn-3", "flash-attn-4"):
        return "native"
    if library == "eager" and framework in HF_BASED:
        return "repeat_kv"  # transformers' eager_attention_forward copies kv heads up (repeat_kv)
    if library == "torch-sdpa" and framework in HF_BASED:
        tf, torch = packages.get("transformers"), packages.get("torch")
        if tf is None or torch is None:
            return None
        if version_matches(tf, ">=5.23") and (env or {}).get("TRANSFORMERS_SDPA_FORCE_GQA") == "1":
            return "enable_gqa"
        if not version_matches(tf, ">=4.54") or not version_matches(torch, ">=2.5"):
            return "repeat_kv"
        if _hf_sdpa_mask_tensor(workload, needs_mask):
            return "repeat_kv"
        if version_matches(tf, ">=5.13") and not (workload.head_dim_qk == workload.head_dim_v <= 256):
            return "repeat_kv"
        return "enable_gqa"
    return None


# Models whose code never searches position_ids for packed sequences (they keep their own causal
# mask or fill a missing attention_mask with ones), per transformers release (read in the wheels;
# docs/audit/catalogue7/part-C.md, part-W2.md).
_NO_SEARCH_4X = frozenset((
    "bamba", "codegen", "dbrx", "falcon_h1", "gpt_neo", "gpt_neox_japanese", "gptj",
    "granitemoe", "granitemoehybrid", "granitemoeshared", "jamba", "jetmoe",
    "kyutai_speech_to_text", "mllama", "moshi", "nemotron", "olmoe",
    "paligemma", "persimmon", "phimoe", "qwen2_moe", "recurrent_gemma", "stablelm", "zamba", "zamba2"))
_NO_SEARCH_5_0_TO_5_2 = frozenset((
    "bamba", "codegen", "falcon_h1", "gpt_neo", "gpt_neox_japanese", "gptj",
    "kyutai_speech_to_text", "mllama", "moshi", "nemotron",
    "persimmon", "recurrent_gemma", "stablelm", "zamba", "zamba2"))
# BERT-style decoders (BertLMHeadModel, RobertaForCausalLM and their copies): their own mask in
# 4.53.1-4.57.x, and from 5.0.0 (through 5.24.0) a create_causal_mask call that is not given the
# position_ids, or a ones-filled mask (big_bird, megatron-bert, rembert): sample 27 row 12
_BERT_STYLE_DECODERS = (
    "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie", "megatron-bert",
    "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "xlm-roberta", "xlm-roberta-xl", "xmod")
# Their own causal mask in 4.x and 5.0-5.1; from 5.2.0 (read in 5.2.0, 5.17.0, 5.18.0, 5.20.0,
# 5.21.0, 5.23.0) a create_causal_mask call without position_ids, so the search (which needs them:
# 5.23.0 masking_utils.py:876) never runs: 5.2.0 modeling_xglm.py:472, modeling_opt.py:450,
# modeling_bloom.py:513, modeling_falcon.py:780, modeling_mpt.py:328; 5.23.0 xglm :437, opt :359,
# bloom :520, falcon :755 (5.24.0 passes them again: _NO_SEARCH_RANGES), mpt :319, trocr :551, musicgen :508, musicgen_melody :501,
# kosmos2_5 :982 (sample 32 row 12)
_NO_POSITION_IDS_5X = (
    "bloom", "kosmos-2.5", "kosmos2_5", "mpt", "musicgen", "musicgen_melody", "opt", "trocr", "xglm")
# ModernBERT (4.48 on) never hands its attention the position_ids: 4.48-4.57 fill a missing
# attention_mask with ones and build the bidirectional mask, or with flash_attention_2 the
# unpadding (cu_seqlens), from it (4.57.1 models/modernbert/modeling_modernbert.py:839-852); 5.x
# builds create_bidirectional_mask from the attention_mask and keeps position_ids for the rotary
# embedding only (5.5.0 :460-485), so packed samples are never separated (pass 16 check-8 D2)
_MODERNBERT = ("modernbert",)
_NO_SEARCH_EVER = frozenset(("kosmos-2", "kosmos2", "idefics", "biogpt") + _BERT_STYLE_DECODERS + _NO_POSITION_IDS_5X + _MODERNBERT)
# Decoders of encoder-decoder families run as causal LMs (BartForCausalLM and its copies): from
# 5.0.0 their decoder calls create_causal_mask without position_ids (5.0.0 modeling_bart.py:808,
# marian :761, pegasus :813, blenderbot :759, blenderbot_small :749, mbart :811, plbart :740,
# bigbird_pegasus :1984; 5.2.0 mvp :799, which in 5.0.0 still builds its own with
# _prepare_4d_causal_attention_mask :794; through 5.24.0: bart :631, marian :580, pegasus :657,
# blenderbot :596, blenderbot_small :562, mbart :709, plbart :564, bigbird_pegasus :1765, mvp :790).
# In 4.53.1-4.57.x they keep their own mask (4.57.1 modeling_bart.py:1077 _update_causal_mask), but
# their *ForCausalLM.forward takes no position_ids and no **kwargs (4.57.1 modeling_bart.py:1850),
# so a padding-free batch raises a TypeError there before any mask: left out below 5.0.0, so the
# rules do not report a silent mix. Whisper passes the position_ids (5.24.0 modeling_whisper.py:791)
# and searches (sample 32 follow-up, fixer I)
_ENC_DEC_CAUSAL_LM_5X = (
    "bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "blenderbot_small", "marian", "mbart",
    "mvp", "pegasus", "plbart")
# (model_type, transformers range) where the model skips the search in these releases only
_NO_SEARCH_RANGES = (
    ("gpt2", ">=4.53.1,<4.54.1"), ("chameleon", ">=4.53.1,<4.54.0"), ("recurrent_gemma", ">=5.0.0,<5.4.0"),
    # Falcon: its own mask in 4.x and 5.0-5.1, no position_ids to create_causal_mask in 5.2-5.23;
    # 5.24.0 modeling_falcon.py:753-760 passes them again (check-R5 of sample 32)
    ("falcon", ">=4.53.1,<5.24.0")) + tuple((m, ">=5.0.0") for m in _ENC_DEC_CAUSAL_LM_5X)


def hf_padding_free_mask(workload: Workload, framework: Optional[str], library: Optional[str], packages: Mapping[str, str]) -> bool:
    """Whether transformers' SDPA path turns a padding-free packed batch into a per-sample mask
    tensor: from 4.53.1 _preprocess_mask_arguments searches position_ids for packed sequences
    when the forward has position_ids, no attention_mask and no KV cache (4.53.1/4.57.1/5.0.0/
    5.23.0 masking_utils.py), and create_causal_mask then ANDs the per-sample mask and sets
    allow_is_causal_skip False (4.53.1-4.57.x only with torch >= 2.6; 5.x always). Not where the
    loop keeps the model's default cache (transformers' own 4.x Trainer, accelerate/PEFT/DeepSpeed
    loops and trl < 0.19 on 4.x; an accelerate loop on 5.x) unless the workload says the cache is off
    (use_cache false or gradient checkpointing on), nor where it says the cache is on; not where
    trl 0.19.0-0.23.0 drop the position_ids, nor for models that never search."""
    from doctor.versions import version_matches

    if workload.packing != "padding_free" or not workload.training or workload.kv_cache:
        return False
    if framework not in HF_BASED or library != "torch-sdpa":
        return False
    tf, torch, trl = packages.get("transformers"), packages.get("torch"), packages.get("trl")
    if tf is None or not version_matches(tf, ">=4.53.1"):
        return False
    v5 = version_matches(tf, ">=5.0.0")
    if not v5 and (torch is None or not version_matches(torch, ">=2.6")):
        return False
    if framework == "trl" and trl is not None and version_matches(trl, ">=0.19.0,<0.23.1"):
        return False
    # a stated cache setting decides; else each loop's default (above). Gradient checkpointing
    # turns the cache off in a training forward (4.53.1 LlamaModel.forward, 4.57.1/5.x
    # check_model_inputs in utils/generic.py)
    cache = False if workload.gradient_checkpointing or workload.use_cache is False else workload.use_cache
    if cache:
        return False
    # a DeepSpeed run (its JSON: the 4.x Trainer or a deepspeed.initialize loop) keeps it too: the
    # engine hands the batch on untouched (sample 45 row 21)
    if cache is None and not v5 and (framework in ("transformers", "accelerate", "peft", "deepspeed") or (framework == "trl" and trl is not None and version_matches(trl, "<0.19.0"))):
        return False
    if cache is None and v5 and framework == "accelerate":
        return False
    return not hf_model_skips_packed_search(workload.model_type, tf)


def hf_model_skips_packed_search(model: Optional[str], tf: Optional[str]) -> bool:
    """Whether this model family's code, in this transformers release (4.53.1 or later), never
    lets masking_utils search position_ids for packed samples, whatever the attention (eager,
    sdpa, flex): its own causal mask, a ones-filled attention_mask, or a create_causal_mask call
    without position_ids (the lists above). False where either is unknown or before 4.53.1."""
    from doctor.versions import version_matches

    if model is None or tf is None or not version_matches(tf, ">=4.53.1"):
        return False
    if model in _NO_SEARCH_EVER or (not version_matches(tf, ">=5.0.0") and model in _NO_SEARCH_4X):
        return True
    if version_matches(tf, ">=5.0.0,<5.2.0") and model in _NO_SEARCH_5_0_TO_5_2:
        return True
    return any(model == m and version_matches(tf, r) for m, r in _NO_SEARCH_RANGES)


# (model_type, transformers range) whose _update_causal_mask builds a 4-D mask for SDPA on every
# forward (no _ignore_causal_mask_sdpa call): 4.42.0 modeling_gemma2.py:930-972, 4.48.0
# modeling_gemma2.py:660-690 / modeling_cohere2.py:652-682, 4.52.4 modeling_gemma2.py:557-593,
# modeling_cohere2.py:535-571, modeling_gemma3.py:685-721; the SDPA call then sets is_causal only
# without a mask (4.42.0 Gemma2SdpaAttention :575, 4.48.0/4.52.4 integrations/sdpa_attention.py
# :45-47). 4.53.0 moves them to masking_utils (create_causal_mask, is_causal skip). Falcon from
# 5.2.0 asks create_causal_mask for a materialised mask (5.2.0 modeling_falcon.py:780-787
# and_mask_function, which turns allow_is_causal_skip off: masking_utils.py:920-924; 5.17.0-5.23.0
# allow_is_causal_skip=False, 5.23.0 :761) and its SDPA call sets is_causal only without one
# (5.23.0 :367); before 5.2 it asks _ignore_causal_mask_sdpa (sample 32 row 12)
_MODEL_MASK_RANGES = (
    ("gemma2", ">=4.42.0,<4.53.0"), ("cohere2", ">=4.48.0,<4.53.0"), ("gemma3", ">=4.50.0,<4.53.0"),
    ("gemma3_text", ">=4.50.0,<4.53.0"), ("falcon", ">=5.2.0"))


def hf_model_mask(workload: Workload, framework: Optional[str], library: Optional[str], packages: Mapping[str, str]) -> bool:
    """Whether transformers' SDPA path gets a mask tensor from the model's own mask code on every
    forward, whatever the padding (_MODEL_MASK_RANGES), so SDPA never gets is_causal there."""
    from doctor.versions import version_matches

    if framework not in HF_BASED or library != "torch-sdpa":
        return False
    # unsloth's own loaders patch these families' forward (path.unsloth_own_family)
    if framework == "unsloth" and unsloth_own_family(workload.model_type, packages) is not False:
        return False
    tf = packages.get("transformers")
    if tf is None:
        return False
    return any(workload.model_type == m and version_matches(tf, r) for m, r in _MODEL_MASK_RANGES)


def hf_static_cache_mask(workload: Workload, framework: Optional[str], library: Optional[str], packages: Mapping[str, str]) -> bool:
    """Whether transformers' own SDPA call gets a mask tensor because the KV cache is a compilable
    (static) one (workload.static_cache: StaticCache, or generate's cache_implementation="static"
    as compiled generate uses), so SDPA sees no is_causal shortcut:
      4.38-4.39  Llama/Gemma's _update_causal_mask returns the mask whatever the cache (4.39.3
                 modeling_llama.py);
      4.40       only under compilation (4.40.0 modeling_attn_mask_utils.py:255-259, :270, :282:
                 _ignore_causal_mask_sdpa has no cache test; compiling is how a static cache was used);
      4.41-5.13  every forward (4.41.0/4.42.4 `not using_static_cache`, 4.52.4 modeling_llama.py:504-507
                 `using_compilable_cache`, 4.53.1 masking_utils.py:765 `allow_is_causal_skip = not
                 past_key_values.is_compileable`, 5.13.1 masking_utils.py:978);
      5.14+      decode steps (one query) only (5.14.0 masking_utils.py:953 `and q_length == 1`).
    Only transformers' own SDPA call: custom code passes its own mask. SDPA-FLASH-ATTN-MASK and
    path.gqa_form read this (path.static_cache_mask)."""
    from doctor.versions import version_matches

    tf = packages.get("transformers")
    if workload.static_cache is not True or tf is None or framework not in HF_BASED or library != "torch-sdpa":
        return False
    if version_matches(tf, ">=5.14"):
        return workload.seq_len_q == 1
    if version_matches(tf, ">=4.41") or version_matches(tf, ">=4.38,<4.40"):
        return True
    return version_matches(tf, ">=4.40,<4.41") and workload.model_compile is True


def _hf_sdpa_mask_tensor(workload: Workload, needs_mask: bool) -> bool:
    """Whether transformers' SDPA path builds a mask tensor instead of passing is_causal
    (masking_utils._ignore_causal_mask_sdpa, 4.54.0-5.23.0): a padding or arbitrary mask, a
    sliding window the keys reach (kv_length >= sliding_window, kv_length being one rank's
    shard under torch context parallelism), or more than one query row
    against a different number of keys."""
    if needs_mask:
        return True
    # kv_length is what one rank's forward sees: under torch context parallelism input_ids are
    # sharded before the forward (workload.seq_len_kv_rank)
    if workload.sliding_window and not workload.window_longer_than_rank_seq:
        return True
    return workload.seq_len_q != 1 and workload.seq_len_q != workload.seq_len_kv
