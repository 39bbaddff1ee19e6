"""Call-path decisions checked against released transformers/accelerate code (catalogue5 part H)."""

from __future__ import annotations

import functools
import itertools
import pathlib
from typing import Any, Dict, Optional

import pytest
import yaml

from doctor.rules.callpath import infer
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
        # several query rows against another number of keys: a mask tensor
        ("4.57.1", {"seq_len_q": 1024, "seq_len_kv": 4096}, None, "repeat_kv"),
        ("4.57.1", {"seq_len_q": 1, "seq_len_kv": 4096}, None, "enable_gqa"),
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


@functools.lru_cache(maxsize=1)
def _anchor() -> Dict[str, Any]:
    """The &hf_sdpa_packed_search_mask condition of SDPA-FLASH-ATTN-MASK."""
    doc = yaml.safe_load((pathlib.Path(__file__).resolve().parents[2] / "rules/backends/torch_sdpa.yaml").read_text())
    rule = next(r for r in doc["rules"] if r["id"] == "SDPA-FLASH-ATTN-MASK")
    return next(c for c in rule["when"]["any"] if isinstance(c, dict) and {"fact": "workload.packing", "eq": "padding_free"} in c.get("all", []))


def test_padding_free_mask_matches_rule_anchor() -> None:
    """callpath.hf_padding_free_mask (path.gqa_form) and the YAML anchor read by
    SDPA-FLASH-ATTN-MASK state one condition."""
    from doctor.rules.callpath import hf_padding_free_mask
    from doctor.rules.conditions import Context, evaluate

    grid = itertools.product(
        ["4.53.0", "4.53.1", "4.54.0", "4.54.1", "4.57.1", "5.0.0", "5.2.0", "5.3.0", "5.4.0", "5.17.0", "5.18.0", "5.20.0", "5.21.0", "5.23.0"],
        ["2.5.1", "2.11.0"],
        [("trl", "0.18.2"), ("trl", "0.19.0"), ("trl", "0.23.1"), ("transformers", None), ("accelerate", None), ("peft", None), ("axolotl", None), ("unsloth", None)],
        ["llama", "qwen2_moe", "gpt2", "chameleon", "opt", "bloom", "recurrent_gemma", "biogpt", "idefics", "falcon", "dbrx"],
        [False, True],
    )
    seen = set()
    for tf, torch, (framework, trl), model, kv_cache in grid:
        packages = {"torch": torch, "transformers": tf, **({"trl": trl} if trl else {})}
        facts, wl = case_inputs({"packages": packages, "workload": {**PF, "framework": framework, "model_type": model, "kv_cache": kv_cache}})
        path = infer(facts, wl)
        got = evaluate(_anchor(), Context(facts, wl, path=path)).value
        want = hf_padding_free_mask(wl, path.framework, path.library, packages)
        assert got is want, (tf, torch, framework, trl, model, kv_cache)
        seen.add(want)
    assert seen == {True, False}
