"""Call-path decisions checked against released transformers/accelerate code (catalogue5 part H)."""

from __future__ import annotations

from typing import Any, Dict, Optional

import pytest

from doctor.rules.callpath import infer, te_attention
from doctor.rules.cases import case_inputs


def _path(packages: Dict[str, str], workload: Dict[str, Any], env: Optional[Dict[str, str]] = None):
    facts, wl = case_inputs({"packages": packages, "env": env or {}, "workload": workload})
    return infer(facts, wl)


HF = {"torch": "2.11.0", "transformers": "4.57.1"}
GQA = {"num_heads": 32, "num_kv_heads": 8, "attn_implementation": "sdpa", "mask": "causal", "seq_len_q": 4096, "seq_len_kv": 4096}


@pytest.mark.parametrize(
    "tf,workload,env,want",
    [
        ("4.53.3", {}, None, "repeat_kv"),  # no use_gqa_in_sdpa before 4.54
        ("4.54.0", {}, None, "enable_gqa"),
        ("4.57.1", {"mask": "padding_causal"}, None, "repeat_kv"),
        # a sliding window the keys reach: masking_utils builds a mask tensor (kv_length >= window)
        ("4.57.1", {"window_size": [1024, 0]}, None, "repeat_kv"),
        ("4.57.1", {"window_size": [8192, 0]}, None, "enable_gqa"),
        # under torch context parallelism the mask builder sees one rank's shard: a 4096-key
        # window over 4096 tokens on 2 ranks (2048 per rank) builds no mask; 8192 tokens do
        ("4.57.1", {"window_size": [4095, 0], "context_parallel": {"size": 2, "impl": "torch_ring"}}, None, "enable_gqa"),
        ("4.57.1", {"window_size": [4095, 0], "seq_len_q": 8192, "seq_len_kv": 8192, "context_parallel": {"size": 2, "impl": "torch_ring"}}, None, "repeat_kv"),
        ("4.57.1", {"window_size": [4095, 0], "context_parallel": {"size": 2, "impl": "te"}}, None, "repeat_kv"),
        # several query rows against another number of keys: a mask tensor
        ("4.57.1", {"seq_len_q": 1024, "seq_len_kv": 4096}, None, "repeat_kv"),
        ("4.57.1", {"seq_len_q": 1, "seq_len_kv": 4096}, None, "enable_gqa"),
        # a compilable (static) KV cache: masking_utils builds a mask tensor (4.53.1 :765), every
        # forward through 5.13.x, decode steps only from 5.14.0 (masking_utils.py:953)
        ("4.57.1", {"seq_len_q": 1, "seq_len_kv": 4096, "static_cache": True}, None, "repeat_kv"),
        ("4.57.1", {"seq_len_q": 1, "seq_len_kv": 4096, "static_cache": False}, None, "enable_gqa"),
        ("5.13.1", {"static_cache": True}, None, "repeat_kv"),
        ("5.14.0", {"static_cache": True}, None, "enable_gqa"),
        ("5.14.0", {"seq_len_q": 1, "seq_len_kv": 4096, "static_cache": True}, None, "repeat_kv"),
        # 5.13 adds the head-dim test (k and v equal, at most 256)
        ("5.12.1", {"head_dim": 512}, None, "enable_gqa"),
        ("5.13.0", {"head_dim": 512}, None, "repeat_kv"),
        ("5.13.0", {"head_dim_qk": 192, "head_dim_v": 128}, None, "repeat_kv"),
        ("5.13.0", {"head_dim": 256}, None, "enable_gqa"),
        # 5.23's TRANSFORMERS_SDPA_FORCE_GQA=1 passes enable_gqa whatever the mask
        ("5.22.2", {"mask": "padding_causal"}, {"TRANSFORMERS_SDPA_FORCE_GQA": "1"}, "repeat_kv"),
        ("5.23.0", {"mask": "padding_causal"}, {"TRANSFORMERS_SDPA_FORCE_GQA": "1"}, "enable_gqa"),
    ],
)
def test_transformers_sdpa_gqa_form(tf: str, workload: Dict[str, Any], env: Optional[Dict[str, str]], want: str) -> None:
    path = _path({**HF, "transformers": tf}, {**GQA, **workload}, env)
    assert path.gqa_form == want


@pytest.mark.parametrize(
    "framework,tf,workload,want",
    [
        # no attn_implementation stated: the backend rules (decided before transformers' backend
        # is chosen) still see the GQA form of transformers' default SDPA call (sample-22 row 7)
        ("transformers", "4.53.0", {}, "repeat_kv"),
        ("trl", "4.57.1", {"mask": "padding_causal"}, "repeat_kv"),
        ("transformers", "4.57.1", {}, "enable_gqa"),
        # verl's FSDP workers load flash_attention_2 when none is configured (v0.5.0
        # fsdp_workers.py:254; callpath.default_attention): flash-attn's native GQA. unsloth
        # 2025.6.1 calls SDPA from its own code: no guess; nor with no framework stated (code
        # may call SDPA itself)
        ("verl", "4.53.0", {}, "native"),
        ("unsloth", "4.53.0", {}, None),
        (None, "4.53.0", {}, None),
    ],
)
def test_default_sdpa_gqa_form_before_the_backend_is_chosen(framework: Optional[str], tf: str, workload: Dict[str, Any], want: Optional[str]) -> None:
    wl = {**GQA, "attn_implementation": None, **workload}
    if framework is not None:
        wl["framework"] = framework
    packages = {**HF, "transformers": tf}
    if framework in ("verl", "unsloth", "trl"):
        packages[framework] = {"verl": "0.5.0", "unsloth": "2025.6.1", "trl": "0.19.0"}[framework]
    assert _path(packages, wl).gqa_form == want


def test_default_sdpa_packed_mask_before_the_backend_is_chosen() -> None:
    """The packed-sequence mask of transformers' default SDPA path is read in the backend pass too."""
    wl = {**PF, "attn_implementation": None, "framework": "trl"}
    assert _path({**HF, "trl": "0.23.1"}, wl).packed_mask is True
    assert _path({**HF, "trl": "0.23.1"}, {**wl, "framework": "unsloth"}).packed_mask is False


def test_a_deepspeed_run_on_4x_keeps_the_cache() -> None:
    """Sample 45 row 21: a DeepSpeed run on transformers 4.x (the Trainer with a DeepSpeed JSON, or a
    deepspeed.initialize loop) keeps config.use_cache, so no packed mask is built unless the cache is
    stated off; on 5.x (the Trainer turns the cache off) the packed mask is built."""
    wl = {**PF, "attn_implementation": "sdpa", "framework": "deepspeed", "model_type": "llama"}
    assert _path(HF, wl).packed_mask is False
    assert _path(HF, {**wl, "use_cache": False}).packed_mask is True
    assert _path({**HF, "transformers": "5.23.0"}, wl).packed_mask is True


@pytest.mark.parametrize("tf", ["4.57.1", "5.0.0", "5.23.0"])
@pytest.mark.parametrize("model_type", ["bert", "xlm-roberta", "megatron-bert"])
def test_bert_style_decoders_never_build_a_packed_mask(tf: str, model_type: str) -> None:
    """Sample 27 row 12: BERT-style decoders never hand position_ids to the packed-sequence search
    (their own mask in 4.x; create_causal_mask without position_ids, or a ones-filled mask, in 5.x),
    so a padding-free batch reaches SDPA with no per-sample mask; Llama in the same run gets one."""
    wl = {**PF, "attn_implementation": "sdpa", "framework": "trl"}
    packages = {**HF, "transformers": tf, "trl": "0.23.1"}
    assert _path(packages, {**wl, "model_type": model_type}).packed_mask is False
    assert _path(packages, {**wl, "model_type": "llama"}).packed_mask is True


@pytest.mark.parametrize(
    "packages,workload,want",
    [
        ({"trl": "0.23.1"}, {"framework": "trl", "model_type": "llama"}, True),
        # gpt_oss declares no sdpa (4.57.1 _supports_sdpa False): eager, no SDPA call
        ({"trl": "0.23.1"}, {"framework": "trl", "model_type": "gpt_oss"}, False),
        # Gemma-2 on 4.45-4.47 swaps the default sdpa for eager; 4.48 does not
        ({"transformers": "4.46.3"}, {"framework": "transformers", "model_type": "gemma2"}, False),
        ({"transformers": "4.48.0"}, {"framework": "transformers", "model_type": "gemma2"}, True),
        # LLaMA-Factory training Gemma-2: fa2 or eager, never the default
        ({"llamafactory": "0.9.3", "flash-attn": "2.8.3"}, {"framework": "llamafactory", "model_type": "gemma2"}, False),
        # ms-swift 3.4.1+ refuses packing/padding_free without a flash attn_impl before the model
        # is built (3.4.1 train_args.py:139-141, 3.5.0 :135-143, 3.7.0 :136-144); 3.4.0 only warns
        ({"ms-swift": "3.9.0"}, {"framework": "ms-swift", "model_type": "qwen2"}, False),
        ({"ms-swift": "3.4.1"}, {"framework": "ms-swift", "model_type": "qwen2"}, False),
        ({"ms-swift": "3.6.4"}, {"framework": "ms-swift", "model_type": "qwen2"}, False),
        ({"ms-swift": "3.4.0"}, {"framework": "ms-swift", "model_type": "qwen2"}, True),
        ({"ms-swift": "3.9.0"}, {"framework": "ms-swift", "model_type": "qwen2", "packing": "padded"}, True),
        ({"transformers": "4.35.2"}, {"framework": "transformers", "model_type": "llama"}, False),
        ({"verl": "0.5.0"}, {"framework": "verl", "model_type": "llama"}, False),
    ],
)
def test_default_sdpa_follows_what_runs(packages: Dict[str, str], workload: Dict[str, Any], want: bool) -> None:
    """sample-22 check-Q4 item 1: the default is SDPA only where transformers' default call runs."""
    wl = {**PF, "attn_implementation": None, **workload}
    path = _path({**HF, **packages}, wl)
    assert path.default_sdpa is want
    if not want:
        assert path.packed_mask is False
        # eager (transformers' eager_attention_forward repeats kv heads), flash-attn (native), or
        # nothing runs (ms-swift's refusal: unknown)
        want_gqa = {"verl": "native", "ms-swift": None, "llamafactory": "native"}.get(workload["framework"], "repeat_kv")
        assert path.gqa_form == want_gqa


def test_transformers_cp_is_never_te_even_with_te_installed() -> None:
    packages = {**HF, "transformer-engine": "2.8.0", "transformer-engine-torch": "2.8.0"}
    path = _path(packages, {"context_parallel": {"size": 2}})
    assert path.framework == "transformers" and path.cp_impl == "torch_ring"
    # with no framework that dispatches attention, an installed TE still is the guess
    bare = _path({"torch": "2.11.0", "transformer-engine": "2.8.0", "transformer-engine-torch": "2.8.0"}, {"context_parallel": {"size": 2}})
    assert bare.cp_impl == "te"


PF = {**GQA, "packing": "padding_free", "training": True, "model_type": "llama"}


@pytest.mark.parametrize(
    "packages,workload,env,want",
    [
        # 4.53.1-4.57.x search position_ids for packed sequences (masking_utils
        # _preprocess_mask_arguments) and AND a per-sample mask with torch >= 2.6: a mask tensor
        ({**HF, "trl": "0.23.1"}, {"framework": "trl"}, None, "repeat_kv"),
        ({**HF, "transformers": "4.54.0", "trl": "0.23.1"}, {"framework": "trl"}, None, "repeat_kv"),
        # torch 2.5 on 4.x: the per-sample mask is not applied, is_causal stays, enable_gqa passed
        ({**HF, "torch": "2.5.1", "trl": "0.23.1"}, {"framework": "trl"}, None, "enable_gqa"),
        # 5.x applies it with any torch
        ({**HF, "torch": "2.5.1", "transformers": "5.0.0", "trl": "0.23.1"}, {"framework": "trl"}, None, "repeat_kv"),
        ({**HF, "transformers": "5.23.0"}, {"framework": "axolotl"}, None, "repeat_kv"),
        ({**HF, "transformers": "5.23.0"}, {"framework": "axolotl"}, {"TRANSFORMERS_SDPA_FORCE_GQA": "1"}, "enable_gqa"),
        # trl 0.19.0-0.23.0 drop the position_ids: no search
        ({**HF, "trl": "0.20.0"}, {"framework": "trl"}, None, "enable_gqa"),
        # the 4.x Trainer's default cache: past_key_values is not None, no search
        (HF, {"framework": "transformers"}, None, "enable_gqa"),
        # a KV cache, inference, or a model that never searches
        ({**HF, "trl": "0.23.1"}, {"framework": "trl", "kv_cache": True}, None, "enable_gqa"),
        ({**HF, "trl": "0.23.1"}, {"framework": "trl", "training": False}, None, "enable_gqa"),
        ({**HF, "trl": "0.23.1"}, {"framework": "trl", "model_type": "qwen2_moe"}, None, "enable_gqa"),
        ({**HF, "transformers": "5.23.0"}, {"framework": "axolotl", "model_type": "qwen2_moe"}, None, "repeat_kv"),
        # 4.53.0 has no search
        ({**HF, "transformers": "4.53.0", "trl": "0.23.1"}, {"framework": "trl"}, None, "repeat_kv"),  # < 4.54: no enable_gqa at all
    ],
)
def test_padding_free_gqa_form(packages: Dict[str, str], workload: Dict[str, Any], env: Optional[Dict[str, str]], want: str) -> None:
    assert _path(packages, {**PF, **workload}, env).gqa_form == want


def test_a_packed_mask_is_what_sdpa_flash_attn_mask_reads() -> None:
    """SDPA-FLASH-ATTN-MASK's padding-free arm is path.packed_mask (one statement, callpath.py)."""
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    cat = load_catalogue(use_cache=False)
    for trl, fires in (("0.23.1", True), ("0.19.0", False)):  # trl 0.19.0-0.23.0 drop the position_ids
        packages = {"torch": "2.11.0", "transformers": "4.57.1", "trl": trl}
        # a CUDA build stated: the SDPA backend rules hold for CUDA/ROCm builds only (torch.cuda read)
        case = {"packages": packages, "torch": {"version": "2.11.0+cu130", "cuda": "13.0"}, "gpu": "9.0"}
        facts, wl = case_inputs({**case, "workload": {**PF, "framework": "trl", "model_type": "llama"}})
        d = diagnose(cat, facts, wl)
        assert d.path.packed_mask is fires
        assert (d.result("SDPA-FLASH-ATTN-MASK").status == "fired") is fires


@pytest.mark.parametrize(
    "framework,packages,model,want",
    [
        # a family whose classes declare no sdpa keeps eager (path.model_has_sdpa false)
        ("transformers", {"transformers": "4.57.1"}, "gptj", "transformers.eager"),
        # Gemma-2 on 4.45-4.47 swaps the default sdpa for eager; 4.48 does not
        (None, {"transformers": "4.46.3"}, "gemma2", "transformers.eager"),
        ("trl", {"transformers": "4.48.0"}, "gemma2", "transformers.sdpa"),
        ("transformers", {"transformers": "4.57.1"}, "llama", "transformers.sdpa"),
        ("transformers", {"transformers": "4.35.2"}, "llama", "transformers.eager"),
    ],
)
def test_transformers_default_attention_is_what_loads(framework: Optional[str], packages: Dict[str, str], model: str, want: str) -> None:
    """The transformers backend table orders by path.default_attention, so the selected backend
    (and path.library, which the finding rules read) is what transformers really loads."""
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    workload: Dict[str, Any] = {"model_type": model, "training": True}
    if framework:
        workload["framework"] = framework
    facts, wl = case_inputs({"packages": {"torch": "2.8.0", **packages}, "workload": workload})
    d = diagnose(load_catalogue(), facts, wl)
    assert dict(d.selections)["transformers"] == want
    assert d.path.library == ("eager" if want.endswith("eager") else "torch-sdpa")


@pytest.mark.parametrize(
    "packages,want",
    [
        # the NPU shortcut of 4.51-4.53 needs flash_attn missing; 4.54-4.55.2 read its metadata
        # (ImportError without it, caught: sdpa); 4.55.3-5.1 return True on an NPU first
        ({"transformers": "4.50.3"}, "sdpa"),
        ({"transformers": "4.51.0"}, "flash_attention_2"),
        ({"transformers": "4.53.3"}, "flash_attention_2"),
        ({"transformers": "4.53.3", "flash-attn": "2.8.3"}, "sdpa"),
        ({"transformers": "4.55.2"}, "sdpa"),
        ({"transformers": "4.54.1", "flash-attn": "2.8.3"}, "flash_attention_2"),
        # 4.54.0's ModernBERT override is never called (check-R8 of sample 28)
        ({"transformers": "4.54.0", "flash-attn": "2.8.3"}, "sdpa"),
        ({"transformers": "4.55.3"}, "flash_attention_2"),
        ({"transformers": "5.1.0", "flash-attn": "2.8.3"}, "flash_attention_2"),
        ({"transformers": "5.2.0"}, "sdpa"),
    ],
)
def test_modernbert_default_on_an_ascend_npu(packages: Dict[str, str], want: str) -> None:
    """ModernBERT asks for flash_attention_2 first; on an Ascend NPU torch (torch-npu, no CUDA or
    ROCm) transformers' FA2 check lets it through in these releases (callpath.default_attention)."""
    npu = {"packages": {"torch": "2.5.1", "torch-npu": "2.5.1", **packages}, "torch": {"version": "2.5.1", "cuda": None, "hip": None}}
    facts, wl = case_inputs({**npu, "workload": {"framework": "transformers", "model_type": "modernbert"}})
    assert infer(facts, wl).default_attention == want
    # without torch-npu the same CPU-only torch gets sdpa
    facts, wl = case_inputs({**npu, "packages": {k: v for k, v in npu["packages"].items() if k != "torch-npu"}, "workload": {"framework": "transformers", "model_type": "modernbert"}})
    assert infer(facts, wl).default_attention == "sdpa"


def test_framework_not_probed_is_unknown_not_none() -> None:
    """With no framework stated and no packages probed, the call path says the framework is not
    known (a rule reading it is not evaluated) rather than that there is none."""
    from dataclasses import replace

    facts, wl = case_inputs({"workload": {}})
    path = infer(replace(facts, packages=None), wl)
    assert path.framework is None
    assert path.why_unknown("framework")
    stated = infer(*case_inputs({"packages": {"torch": "2.8.0"}, "workload": {}}))
    assert stated.why_unknown("framework") is None


def test_modernbert_on_4_54_0_keeps_sdpa_on_a_gpu_too() -> None:
    """4.54.0 overrides set_attention_implementation, which nothing in that release calls, so
    ModernBERT's flash-first choice does not run there; 4.54.1 overrides the hook that is called."""
    gpu = {"torch": {"version": "2.8.0", "cuda": "12.8", "cuda_available": True}, "gpu": "8.0"}
    for tf, want in (("4.54.0", "sdpa"), ("4.54.1", "flash_attention_2"), ("4.53.3", "flash_attention_2")):
        facts, wl = case_inputs({**gpu, "packages": {"torch": "2.8.0", "transformers": tf, "flash-attn": "2.8.3"},
                                 "workload": {"framework": "transformers", "model_type": "modernbert"}})
        assert infer(facts, wl).default_attention == want, tf


@pytest.mark.parametrize("training,flash,want", [(False, None, "sdpa"), (True, None, "sdpa"), (False, "2.6.3", "sdpa"), (True, "2.6.3", "flash_attention_2")])
def test_xtuner_picks_attention_only_when_it_trains(training: bool, flash: Optional[str], want: Optional[str]) -> None:
    """XTuner sets flash_attention_2 (or, without flash-attn, sdpa) on its training path only;
    `xtuner chat` loads the plain transformers model, so outside training transformers' own
    default runs (and with it repeat_kv, which lets SDPA's memory-efficient kernel take a GQA model)."""
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    packages = {"torch": "2.6.0", "transformers": "4.46.3", "xtuner": "0.1.23", **({"flash-attn": flash} if flash else {})}
    facts, wl = case_inputs({"packages": packages, "torch": {"version": "2.6.0", "cuda": "12.4"}, "gpu": "8.0",
                             "workload": {"framework": "xtuner", "model_type": "llama", "training": training}})
    d = diagnose(load_catalogue(), facts, wl)
    assert d.path.default_attention == want


@pytest.mark.parametrize("distributed,want", [("fsdp", False), ("megatron", True), (None, True)])
def test_verl_runs_te_attention_only_on_its_megatron_workers(distributed: Optional[str], want: bool) -> None:
    """verl's FSDP workers load the model through transformers; its Megatron workers build
    Megatron-Core layers with TE's DotProductAttention; an unstated strategy may be either."""
    workload: Dict[str, Any] = {"framework": "verl"}
    if distributed:
        workload["distributed"] = distributed
    facts, wl = case_inputs({"packages": {"torch": "2.9.0", "verl": "0.5.0", "transformer-engine": "2.19.0"}, "workload": workload})
    assert te_attention(wl) is want


# unsloth 2025.3.10-2025.3.19 FastModel drops the attn_implementation asked for and loads sdpa
# (2025.3.10 vision.py:240/:252, 2025.3.19 :307); 2025.4.1 keeps a stated one (:309-310). It takes
# a stated full fine-tuning (or 8-bit load) and a family unsloth's own loaders do not patch.
@pytest.mark.parametrize(
    "unsloth,workload,want",
    [
        ("2025.3.10", {"finetune": "full", "model_type": "gemma2", "attn_implementation": "flash_attention_2"}, ("sdpa", "torch-sdpa")),
        ("2025.3.19", {"finetune": "full", "model_type": "llama", "attn_implementation": "eager"}, ("sdpa", "torch-sdpa")),
        ("2025.3.19", {"finetune": "lora", "model_type": "gemma3", "attn_implementation": "flash_attention_2"}, ("sdpa", "torch-sdpa")),
        ("2025.4.1", {"finetune": "full", "model_type": "gemma2", "attn_implementation": "flash_attention_2"}, ("flash_attention_2", "flash-attn")),
        ("2025.3.9", {"finetune": "full", "model_type": "gemma2", "attn_implementation": "flash_attention_2"}, ("flash_attention_2", "flash-attn")),
        # unsloth's own loaders (QLoRA, 16-bit LoRA, or a load not stated) keep the stated value here
        ("2025.3.10", {"finetune": "qlora", "model_type": "gemma2", "attn_implementation": "flash_attention_2"}, ("flash_attention_2", "flash-attn")),
        ("2025.3.10", {"model_type": "gemma2", "attn_implementation": "flash_attention_2"}, ("flash_attention_2", "flash-attn")),
    ],
)
def test_unsloth_fastmodel_loads_sdpa_whatever_is_asked(unsloth: str, workload: Dict[str, Any], want: tuple) -> None:
    p = _path({"torch": "2.5.1", "transformers": "4.47.1", "unsloth": unsloth}, {"framework": "unsloth", **workload})
    assert (p.attention, p.library) == want


@pytest.mark.parametrize(
    "workload,packages,env,want",
    [
        # XTuner loads through transformers and imports no TE
        ({"framework": "xtuner"}, {"xtuner": "0.1.23"}, {}, False),
        # ms-swift off its Megatron route, and on it
        ({"framework": "ms-swift", "distributed": "deepspeed"}, {"ms-swift": "3.7.0"}, {}, False),
        ({"framework": "ms-swift", "distributed": "megatron"}, {"ms-swift": "3.7.0"}, {}, True),
        # verl's Megatron workers build Megatron-Core (TE) layers from 0.4.0; 0.3.x's call flash-attn
        ({"framework": "verl", "distributed": "megatron"}, {"verl": "0.4.0"}, {}, True),
        ({"framework": "verl", "distributed": "megatron"}, {"verl": "0.3.0.post1"}, {}, False),
        ({"framework": "verl"}, {"verl": "0.3.0.post1"}, {}, False),
        ({"framework": "verl"}, {"verl": "0.4.0"}, {}, True),
        # verl's release unknown (packages not probed): its Megatron workers may be Megatron-Core's
        ({"framework": "verl", "distributed": "megatron"}, {}, {}, True),
        # LLaMA-Factory only on 0.9.4+'s USE_MCA route with mcore_adapter installed
        ({"framework": "llamafactory"}, {"llamafactory": "0.9.4"}, {}, False),
        ({"framework": "llamafactory"}, {"llamafactory": "0.9.4", "mcore-adapter": "0.7.0"}, {"USE_MCA": "1"}, True),
        ({"framework": "llamafactory"}, {"llamafactory": "0.9.3", "mcore-adapter": "0.7.0"}, {"USE_MCA": "1"}, False),
        ({"framework": "llamafactory"}, {"llamafactory": "0.9.4"}, {"USE_MCA": "1"}, False),
    ],
)
def test_trainers_run_te_attention_only_on_their_megatron_routes(workload: Dict[str, Any], packages: Dict[str, str], env: Dict[str, str], want: bool) -> None:
    """A trainer that loads through transformers never builds TE's DotProductAttention, however
    common an installed transformer-engine is (NGC containers ship it); its Megatron route does."""
    facts, wl = case_inputs({"packages": {"torch": "2.9.0", "transformer-engine": "2.19.0", **packages}, "env": env, "workload": workload})
    assert te_attention(wl, facts.packages, facts.env) is want


@pytest.mark.parametrize(
    "workload,packages,env,want",
    [
        ({"framework": "megatron"}, {}, {}, True),
        ({"framework": "nemo"}, {}, {}, True),
        ({}, {"megatron-core": "0.14.0"}, {}, True),  # inferred from the installed megatron-core
        ({"framework": "verl", "distributed": "megatron"}, {"verl": "0.5.0"}, {}, True),
        ({"framework": "verl", "distributed": "fsdp"}, {"verl": "0.5.0"}, {}, False),
        # verl 0.3.x Megatron workers run verl's own Megatron models, which call flash-attn themselves
        ({"framework": "verl", "distributed": "megatron"}, {"verl": "0.3.0.post1"}, {}, False),
        ({"framework": "ms-swift", "distributed": "megatron"}, {"ms-swift": "3.7.0"}, {}, True),
        ({"framework": "llamafactory"}, {"llamafactory": "0.9.4", "mcore-adapter": "0.7.0"}, {"USE_MCA": "1"}, True),
        ({"framework": "llamafactory"}, {"llamafactory": "0.9.4", "mcore-adapter": "0.7.0"}, {}, False),
        # USE_MCA changes only training: llamafactory-cli chat/eval load through transformers (0.9.5 chat/hf_engine.py:59)
        ({"framework": "llamafactory", "training": False}, {"llamafactory": "0.9.5", "mcore-adapter": "0.7.0"}, {"USE_MCA": "1"}, False),
        ({"framework": "transformers"}, {}, {}, False),
        ({}, {}, {}, False),  # TE called by custom code
    ],
)
def test_megatron_core_layers_on_the_path(workload: Dict[str, Any], packages: Dict[str, str], env: Dict[str, str], want: bool) -> None:
    """Megatron-Core's layers run attention under Megatron-LM and NeMo and under any trainer's
    Megatron route, so what Megatron-Core does before TE holds on all of them."""
    p = _path({"torch": "2.9.0", "transformer-engine": "2.19.0", **packages}, workload, env)
    assert p.megatron_core is want


@pytest.mark.parametrize("workload,fires", [({"framework": "verl", "distributed": "megatron"}, False), ({}, True)])
def test_megatron_route_hands_te_a_padding_mask_for_thd(workload: Dict[str, Any], fires: bool) -> None:
    """verl's Megatron workers pack sequences as thd through Megatron-Core (v0.4.1
    verl/models/mcore/util.py:66-67), whose TEDotProductAttention turns a causal mask into
    padding_causal for thd: TE's "padding mask for thd" assert is not met there; a custom TE call
    with a causal thd mask meets it."""
    facts, wl = case_inputs({"packages": {"torch": "2.9.0", "transformer-engine": "2.8.0"}, "gpu": "9.0", "cudnn": {"version": "9.10.0"},
                             "workload": {"qkv_format": "thd", "mask": "causal", **workload}})
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    d = diagnose(load_catalogue(use_cache=False), facts, wl)
    assert ("TE-THD-NEEDS-PADDING-MASK" in {f.rule_id for f in d.findings}) is fires


@pytest.mark.parametrize(
    "dist,status,want",
    [("0.7.0", "present", True), ("0.0.1", "missing", False), ("0.7.0", None, True), ("0.0.1", None, False),
     (None, "present", True), (None, None, False)],
)
def test_lf_megatron_route_needs_the_mcore_adapter_module_not_just_a_distribution(dist: Optional[str], status: Optional[str], want: bool) -> None:
    """PyPI's `mcore-adapter` 0.0.1 is an unrelated project whose folder no import reaches: where the
    probe found no `mcore_adapter` module, LLaMA-Factory cannot take its USE_MCA route (its own
    ImportError), so neither Megatron-Core nor TE's attention is on the path. A module the probe found
    counts without a distribution (a ROLL checkout on PYTHONPATH). Not probed: the distribution is
    read, and 0.0.1 is the placeholder."""
    packages = {"torch": "2.9.0", "transformer-engine": "2.19.0", "llamafactory": "0.9.4", **({"mcore-adapter": dist} if dist else {})}
    case: Dict[str, Any] = {"packages": packages,
                            "env": {"USE_MCA": "1"}, "workload": {"framework": "llamafactory"}}
    if status is not None:
        case["imports"] = {"mcore_adapter": {"status": status}}
    facts, wl = case_inputs(case)
    assert infer(facts, wl).mcore_adapter is want  # the one reading rules see as path.mcore_adapter
    assert infer(facts, wl).megatron_core is want
    assert te_attention(wl, facts.packages, facts.env, facts.imports) is want


@pytest.mark.parametrize(
    "model,unsloth,want",
    [("llama", "2025.3.9", True), ("qwen2", "2026.10.9", True), ("qwen3", "2025.4.1", False), ("qwen3", "2025.4.2", True),
     ("qwen3", None, None), ("phi3", "2025.4.2", False), (None, "2025.4.2", None)],
)
def test_unsloth_own_family_is_the_families_its_loaders_patch(model: Optional[str], unsloth: Optional[str], want: Optional[bool]) -> None:
    """FastLanguageModel hands llama, mistral, gemma, gemma2, qwen2 (and qwen3 from 2025.4.2) to its own
    loaders; any other stated family goes to transformers' modeling code (or raises before 2025.3.10)."""
    packages = {"torch": "2.6.0", "transformers": "4.51.3", **({"unsloth": unsloth} if unsloth else {})}
    p = _path(packages, {"framework": "unsloth", **({"model_type": model} if model else {})})
    assert p.unsloth_own_family is want


@pytest.mark.parametrize(
    "model_type,tf,want",
    [
        # Sample 32 row 12: their own mask until 5.1, then create_causal_mask without position_ids
        # (5.2.0 modeling_xglm.py:472, 5.23.0 :437; 5.23.0 opt :359, bloom :520, falcon :755,
        # mpt :319), so the search (5.23.0 masking_utils.py:876 needs position_ids) never runs
        ("xglm", "5.1.0", False), ("xglm", "5.2.0", False), ("xglm", "5.23.0", False),
        ("falcon", "5.2.0", False), ("mpt", "5.17.0", False), ("trocr", "5.23.0", False),
        ("musicgen", "5.23.0", False), ("musicgen_melody", "5.23.0", False), ("kosmos2_5", "5.23.0", False),
        # OPT filled the mask with ones until 5.17; from 5.18 no ones but still no position_ids
        ("opt", "5.17.0", False), ("opt", "5.18.0", False), ("opt", "5.23.0", False),
        ("bloom", "5.20.0", False), ("bloom", "5.21.0", False), ("bloom", "5.23.0", False),
        # families that hand position_ids on from 5.2 keep searching; llama always
        ("gptj", "5.2.0", True), ("gpt_neo", "5.23.0", True), ("llama", "5.23.0", True),
        ("gptj", "5.1.0", False),
        # Falcon passes position_ids again from 5.24.0 (modeling_falcon.py:753-760; check-R5)
        ("falcon", "5.23.0", False), ("falcon", "5.24.0", True),
        # encoder-decoder families run as causal LMs: create_causal_mask without position_ids from
        # 5.0.0 (5.0.0 modeling_bart.py:808, marian :761, plbart :740; 5.24.0 bart :631, pegasus :657,
        # blenderbot :596, blenderbot_small :562, mbart :709, bigbird_pegasus :1765, mvp :790); MVP's
        # own _prepare_4d_causal_attention_mask in 5.0.0 (:794). Whisper hands them on (5.24.0 :791)
        ("bart", "5.0.0", False), ("bart", "5.24.0", False), ("marian", "5.0.0", False), ("marian", "5.23.0", False),
        ("pegasus", "5.2.0", False), ("pegasus", "5.24.0", False), ("blenderbot", "5.24.0", False),
        ("blenderbot-small", "5.24.0", False), ("mbart", "5.23.0", False), ("plbart", "5.0.0", False),
        ("bigbird_pegasus", "5.24.0", False), ("mvp", "5.0.0", False), ("mvp", "5.24.0", False),
        ("whisper", "5.24.0", True),
        # ModernBERT: 4.57.1 fills a missing mask with ones and builds its mask (or FA2's unpadding)
        # from it (modeling_modernbert.py:839-852); 5.5.0 keeps position_ids for the rotary
        # embedding only (:460-485) (pass 16 check-8 D2)
        ("modernbert", "4.57.1", False), ("modernbert", "5.5.0", False), ("modernbert", "5.23.0", False),
    ],
)
def test_models_without_position_ids_never_build_a_packed_mask(model_type: str, tf: str, want: bool) -> None:
    wl = {**PF, "attn_implementation": "sdpa", "framework": "trl", "model_type": model_type}
    path = _path({**HF, "transformers": tf, "trl": "0.23.1"}, wl)
    assert path.packed_mask is want
    # the same list, whatever the attention (HF-PADDING-FREE-NEEDS-FLASH-ATTENTION reads it)
    assert path.no_packed_search is (not want)
    assert _path({**HF, "transformers": tf, "trl": "0.23.1"}, {**wl, "attn_implementation": "eager"}).no_packed_search is (not want)


def test_encoder_decoder_causal_lms_not_listed_before_5() -> None:
    """In 4.53.1-4.57.x BartForCausalLM and its copies keep their own mask, but their forward takes no
    position_ids (no **kwargs: 4.57.1 modeling_bart.py:1850), so a padding-free batch raises a
    TypeError before any mask: the list starts at 5.0.0, where the forward takes **kwargs."""
    wl = {**PF, "attn_implementation": "sdpa", "framework": "trl", "model_type": "bart"}
    assert _path({**HF, "transformers": "4.57.1", "trl": "0.23.1"}, wl).no_packed_search is False
    assert _path({**HF, "transformers": "5.0.0", "trl": "0.23.1"}, wl).no_packed_search is True


def test_no_packed_search_starts_with_the_search() -> None:
    """Before 4.53.1 there is no search to skip: the fact stays false (the rule's own <4.53.1 arm)."""
    wl = {**PF, "attn_implementation": "sdpa", "framework": "trl", "model_type": "opt"}
    assert _path({**HF, "transformers": "4.53.0", "trl": "0.23.1"}, wl).no_packed_search is False
    assert _path({**HF, "transformers": "4.53.1", "trl": "0.23.1"}, wl).no_packed_search is True
    assert _path({**HF, "transformers": "5.23.0", "trl": "0.23.1"}, {**wl, "model_type": None}).no_packed_search is False


@pytest.mark.parametrize(
    "model_type,tf,want",
    [
        # Sample 32 row 12: _update_causal_mask builds a 4-D mask for SDPA on every forward
        # (4.42.0 modeling_gemma2.py:930-972; 4.52.4 gemma2 :557-593, cohere2 :535-571,
        # gemma3 :685-721); 4.53.0 moves them to masking_utils
        ("gemma2", "4.41.2", False), ("gemma2", "4.42.0", True), ("gemma2", "4.52.4", True), ("gemma2", "4.53.0", False),
        ("cohere2", "4.48.0", True), ("cohere2", "4.52.4", True), ("cohere2", "4.53.0", False),
        ("gemma3_text", "4.50.0", True), ("gemma3", "4.52.4", True), ("gemma3_text", "4.53.0", False),
        # Falcon from 5.2.0 asks create_causal_mask for a materialised mask
        ("falcon", "5.1.0", False), ("falcon", "5.2.0", True), ("falcon", "5.23.0", True),
        ("llama", "4.52.4", False),
    ],
)
def test_models_that_always_hand_sdpa_a_mask(model_type: str, tf: str, want: bool) -> None:
    wl = {"attn_implementation": "sdpa", "framework": "transformers", "model_type": model_type, "mask": "causal"}
    assert _path({**HF, "transformers": tf}, wl).model_mask is want
    # not on another attention, nor where unsloth's own loaders patch the family
    assert _path({**HF, "transformers": tf}, {**wl, "attn_implementation": "eager"}).model_mask is False


def test_model_mask_not_under_unsloths_own_gemma2() -> None:
    wl = {"attn_implementation": "sdpa", "framework": "unsloth", "model_type": "gemma2", "mask": "causal"}
    assert _path({**HF, "transformers": "4.52.4", "unsloth": "2025.6.1"}, wl).model_mask is False
    assert _path({**HF, "transformers": "4.52.4", "unsloth": "2025.6.1"}, {**wl, "model_type": "cohere2"}).model_mask is True


@pytest.mark.parametrize(
    "tf,workload,want",
    [
        # 4.38-4.39: Llama/Gemma build the mask for SDPA whatever the cache
        ("4.38.2", {}, True),
        # 4.40: only under compilation (no cache test in _ignore_causal_mask_sdpa)
        ("4.40.2", {}, False),
        ("4.40.2", {"model_compile": True}, True),
        ("4.41.0", {}, True),
        ("5.13.1", {}, True),
        # from 5.14.0 only a decode step keeps the mask
        ("5.14.0", {}, False),
        ("5.14.0", {"seq_len_q": 1, "seq_len_kv": 4096}, True),
        # the cache not stated static, or not transformers' own SDPA call
        ("4.57.1", {"static_cache": None}, False),
        ("4.57.1", {"attn_implementation": "flash_attention_2"}, False),
        ("4.57.1", {"framework": "megatron", "attn_implementation": None}, False),
    ],
)
def test_static_cache_mask_per_release(tf: str, workload: Dict[str, Any], want: bool) -> None:
    """A static (compilable) KV cache makes transformers hand its SDPA call a mask tensor: one fact
    (path.static_cache_mask) that SDPA-FLASH-ATTN-MASK and gqa_form both read."""
    wl = {**GQA, "kv_cache": True, "static_cache": True, "training": False, "framework": "transformers", "model_type": "llama", **workload}
    assert _path({**HF, "transformers": tf}, wl).static_cache_mask is want


def test_te_placeholder_is_no_transformer_engine() -> None:
    """PyPI's empty transformer-engine 0.0.0 (metadata only) installs no TransformerEngine: the call
    path does not take TE's attention for it, TE's backends are not installed, and only
    TE-PYPI-PLACEHOLDER-INSTALLED speaks (not TE-OLDER-THAN-COVERED's "older than 1.9")."""
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    facts, workload = case_inputs({"packages": {"transformer-engine": "0.0.0", "transformer-engine-cu12": "0.0.0", "torch": "2.5.1"}})
    d = diagnose(load_catalogue(), facts, workload)
    assert d.path.library != "transformer-engine"
    assert all(b.available is False for b in d.backends if b.framework == "transformer-engine")
    assert d.result("TE-PYPI-PLACEHOLDER-INSTALLED").status == "fired"
    assert d.result("TE-OLDER-THAN-COVERED").status == "passed"


UNSLOTH_FA2 = {"torch": {"version": "2.6.0", "cuda": "12.4"}, "gpu": "8.0"}


@pytest.mark.parametrize(
    "unsloth,workload,case,want",
    [
        # 2026.4.1 FastModel sets flash_attention_2 itself when none is asked (vision.py:621,
        # :632-633; _utils.py:254-269) where HAS_FLASH_ATTENTION holds (:922-1022)
        ("2026.4.1", {"finetune": "full", "model_type": "gemma2"}, {}, "transformers.flash_attention_2"),
        ("2026.10.9", {"finetune": "full", "model_type": "gemma2"}, {}, "transformers.flash_attention_2"),
        # a family unsloth's own loaders do not patch goes to FastModel whatever the load
        ("2026.4.1", {"model_type": "phi3"}, {}, "transformers.flash_attention_2"),
        # 2026.3.18 passes no attn_implementation of its own there: transformers' default stands
        ("2026.3.18", {"finetune": "full", "model_type": "gemma2"}, {}, "transformers.sdpa"),
        # unsloth's own route (QLoRA of a patched family) is not FastModel's
        ("2026.4.1", {"finetune": "qlora", "model_type": "gemma2"}, {}, "transformers.sdpa"),
        # no HAS_FLASH_ATTENTION: a Turing card, or no flash-attn installed
        ("2026.4.1", {"finetune": "full", "model_type": "gemma2"}, {"gpu": "7.5"}, "transformers.sdpa"),
        ("2026.4.1", {"finetune": "full", "model_type": "gemma2"}, {"drop": "flash-attn"}, "transformers.sdpa"),
        # ROCm: HAS_FLASH_ATTENTION whatever the GPU (2026.4.1 _utils.py:981-991)
        ("2026.4.1", {"finetune": "full", "model_type": "gemma2"}, {"torch": {"version": "2.6.0+rocm6.2", "cuda": None, "hip": "6.2"}, "gpu": "9.4"}, "transformers.flash_attention_2"),
        # a stated attn_implementation is kept (2026.4.1 vision.py:632)
        ("2026.4.1", {"finetune": "full", "model_type": "gemma2", "attn_implementation": "eager"}, {}, "transformers.eager"),
    ],
)
def test_unsloth_fastmodel_picks_flash_attention_2_from_2026_4_1(unsloth: str, workload: Dict[str, Any], case: Dict[str, Any], want: str) -> None:
    """unsloth 2026.4.1+ FastModel loads flash_attention_2 when none is asked and flash-attn
    imports on an sm80+ (or ROCm) GPU; the transformers selection follows path.default_attention."""
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    packages = {"torch": "2.6.0", "transformers": "4.57.1", "flash-attn": "2.8.3", "unsloth": unsloth}
    packages.pop(case.get("drop", ""), None)
    spec = {**UNSLOTH_FA2, **{k: v for k, v in case.items() if k != "drop"}}
    facts, wl = case_inputs({**spec, "packages": packages, "workload": {"framework": "unsloth", "training": True, **workload}})
    d = diagnose(load_catalogue(), facts, wl)
    assert dict(d.selections)["transformers"] == want
    assert d.path.attention == want.split(".", 1)[1]


@pytest.mark.parametrize(
    "verl,workload,want",
    [
        # verl's FSDP workers load flash_attention_2 when none is configured: v0.3.0.post1
        # fsdp_workers.py:202, v0.5.0 :254, v0.6.1 :318 (override_config first), 0.9.1
        # workers/config/model.py:185
        ("0.3.0.post1", {}, "flash_attention_2"),
        ("0.5.0", {"distributed": "fsdp"}, "flash_attention_2"),
        ("0.9.1", {}, "flash_attention_2"),
        # a stated one (override_config.attn_implementation from v0.6.1) stands
        ("0.9.1", {"attn_implementation": "sdpa"}, None),
        # the Megatron workers are not a transformers load
        ("0.5.0", {"distributed": "megatron"}, None),
    ],
)
def test_verl_fsdp_workers_default_to_flash_attention_2(verl: str, workload: Dict[str, Any], want: Optional[str]) -> None:
    packages = {"torch": "2.6.0", "transformers": "4.55.2", "flash-attn": "2.8.3", "verl": verl}
    facts, wl = case_inputs({"packages": packages, "torch": {"version": "2.6.0", "cuda": "12.4"}, "gpu": "8.0",
                             "workload": {"framework": "verl", "model_type": "llama", **workload}})
    assert infer(facts, wl).default_attention == want


@pytest.mark.parametrize(
    "xtuner,packages,workload,want",
    [
        # `xtuner train` sets flash_attention_2 for its FA2 families where flash_attn imports
        # (v0.1.23 model/sft.py:186-211), whatever the GPU: an sm75 card then fails in it
        ("0.1.23", {"flash-attn": "2.5.8"}, {"model_type": "qwen2"}, "flash_attention_2"),
        # without flash-attn, sdpa for its SDPA families on torch >= 2.1.1
        ("0.1.23", {}, {"model_type": "llama"}, "sdpa"),
        # a family outside both lists: nothing set, XTuner's dispatch and transformers' default
        ("0.1.23", {"flash-attn": "2.5.8"}, {"model_type": "qwen3"}, None),
        # qwen2_moe joins both lists in v0.1.18, phi3 in v0.1.19, deepseek_v2 (FA2 only) in v0.1.20
        ("0.1.17", {"flash-attn": "2.5.8"}, {"model_type": "qwen2_moe"}, None),
        ("0.1.18", {"flash-attn": "2.5.8"}, {"model_type": "qwen2_moe"}, "flash_attention_2"),
        ("0.1.18", {}, {"model_type": "phi3"}, None),
        ("0.1.19", {}, {"model_type": "phi3"}, "sdpa"),
        ("0.1.20", {}, {"model_type": "deepseek_v2"}, None),
        ("0.1.20", {"flash-attn": "2.5.8"}, {"model_type": "deepseek_v2"}, "flash_attention_2"),
        # a stated attn_implementation stands (v0.1.19+), and `xtuner chat` is transformers' load
        ("0.1.23", {"flash-attn": "2.5.8"}, {"model_type": "qwen2", "attn_implementation": "eager"}, None),
        ("0.1.23", {"flash-attn": "2.5.8"}, {"model_type": "qwen2", "training": False}, "sdpa"),
        # before v0.1.16 XTuner sets none
        ("0.1.15", {"flash-attn": "2.5.8"}, {"model_type": "qwen2"}, None),
        # v0.1.19 only imports flash_attn_func (2.0.x has it); from v0.1.20 transformers'
        # is_flash_attn_2_available asks for 2.1.0+, so a flash-attn 2.0.x leaves sdpa
        ("0.1.19", {"flash-attn": "2.0.9"}, {"model_type": "qwen2"}, "flash_attention_2"),
        ("0.1.20", {"flash-attn": "2.0.9"}, {"model_type": "qwen2"}, "sdpa"),
    ],
)
def test_xtuner_train_sets_attention_for_its_families(xtuner: str, packages: Dict[str, str], workload: Dict[str, Any], want: Optional[str]) -> None:
    pk = {"torch": "2.3.1", "transformers": "4.41.2", "xtuner": xtuner, **packages}
    facts, wl = case_inputs({"packages": pk, "torch": {"version": "2.3.1", "cuda": "12.1"}, "gpu": "8.0",
                             "workload": {"framework": "xtuner", "training": True, **workload}})
    assert infer(facts, wl).default_attention == want


@pytest.mark.parametrize("method,want", [(None, True), ("sft", True), ("pt", True), ("dpo", True), ("orpo", True), ("kto", False), ("rm", False), ("ppo", False)])
def test_lf_megatron_route_is_taken_only_for_stages_pt_sft_dpo(method: Optional[str], want: bool) -> None:
    """LLaMA-Factory 0.9.4/0.9.5 run the USE_MCA route for stages pt, sft and dpo only (train/tuner.py
    0.9.4:69, 0.9.5:98); kto, rm and ppo load through transformers, so neither Megatron-Core nor
    TE's attention is on the path there. ORPO is stage dpo's pref_loss. Unstated, the route is assumed."""
    case: Dict[str, Any] = {"packages": {"torch": "2.9.0", "transformer-engine": "2.19.0", "llamafactory": "0.9.4", "mcore-adapter": "0.7.0"},
                            "env": {"USE_MCA": "1"}, "workload": {"framework": "llamafactory", **({"method": method} if method else {})}}
    facts, wl = case_inputs(case)
    assert infer(facts, wl).megatron_core is want
    assert te_attention(wl, facts.packages, facts.env, facts.imports) is want
