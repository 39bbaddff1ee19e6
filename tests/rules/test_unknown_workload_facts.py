"""A workload fact that is not known leaves the rules that read it undecided, never "passed".

`vision_tower` comes from the model's config.json (a `visual` or `vision_config` section). With
only `model_type: qwen` the doctor cannot tell Qwen-1 text (which calls flash-attn) from Qwen-VL
(which never does), so REMOTE-CODE-FLASH-ATTN-PRE-AMPERE must say it could not check, not that
all is well.
"""

from __future__ import annotations

from typing import Any, Dict

import pytest

from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue

RULE = "REMOTE-CODE-FLASH-ATTN-PRE-AMPERE"


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalogue(use_cache=False)


def _result(cat: Any, workload: Dict[str, Any]) -> Any:
    facts, wl = case_inputs({"packages": {"flash-attn": "2.5.8", "torch": "2.1.2"}, "torch": {"version": "2.1.2", "cuda": "12.1"}, "gpu": "7.5", "workload": workload})
    return diagnose(cat, facts, wl).result(RULE)


def test_an_unknown_vision_tower_leaves_the_rule_undecided(cat) -> None:  # type: ignore[no-untyped-def]
    got = _result(cat, {"model_type": "qwen", "dtype": "fp16"})
    assert got.status == "not_evaluated"
    assert any("workload.vision_tower" in m for m in got.missing)


def test_a_known_vision_tower_decides(cat) -> None:  # type: ignore[no-untyped-def]
    assert _result(cat, {"model_type": "qwen", "dtype": "fp16", "vision_tower": False}).status == "fired"
    assert _result(cat, {"model_type": "qwen", "dtype": "fp16", "vision_tower": True}).status == "passed"


# TE 1.x's packed FP8 branch takes only NVTE_T3HD. TE's MultiheadAttention splits a fused QKV per
# head (th3d) only with fuse_qkv_params=True and qkv_weight_interleaved=True; its defaults
# (fuse_qkv_params=False forces the flag off: v1.9 attention.py:6058-6059) give t3hd. With the layout
# not stated TE-FUSED-FP8 reads TE's defaults (sample 15 row 26, sample 18 Q5).
_TE1_PACKED_FP8 = {"dtype": "fp8", "qkv_format": "thd", "qkv_packed": True, "head_dim": 64, "num_heads": 16,
                   "num_kv_heads": 16, "seq_len": 512, "mask": "padding"}


def _fp8(cat: Any, workload: Dict[str, Any]) -> Any:
    facts, wl = case_inputs({"packages": {"transformer-engine": "1.11.0"}, "gpu": "9.0", "cudnn": {"version": "9.2.1"}, "workload": workload})
    return diagnose(cat, facts, wl).result("TE-FUSED-FP8")


def test_an_unknown_qkv_interleaving_reads_as_te_defaults_in_te_fused_fp8(cat) -> None:  # type: ignore[no-untyped-def]
    assert _fp8(cat, _TE1_PACKED_FP8).status == "passed"
    # Megatron-Core splits per head whatever is stated
    assert _fp8(cat, {**_TE1_PACKED_FP8, "framework": "megatron"}).status == "fired"


def test_a_known_qkv_interleaving_decides_te_fused_fp8(cat) -> None:  # type: ignore[no-untyped-def]
    assert _fp8(cat, {**_TE1_PACKED_FP8, "qkv_weight_interleaved": True}).status == "fired"
    assert _fp8(cat, {**_TE1_PACKED_FP8, "qkv_weight_interleaved": False}).status == "passed"
    # not a packed THD workload: the layout does not matter, the rule decides without it
    assert _fp8(cat, {**_TE1_PACKED_FP8, "qkv_format": "bshd", "qkv_packed": False, "head_dim": 128, "mask": "causal"}).status == "passed"
