"""D8: --model never silently falls back to the default profile while crediting the model: a file
that is not a model config, or a value that cannot be used, is exit 2 naming the file and key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest
from harden_util import SEED003, one_line

LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
DSV3 = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}


def _cfg(tmp_path: Path, doc: Any, name: str = "config.json", bom: bool = False) -> Path:
    f = tmp_path / name
    f.write_bytes((b"\xef\xbb\xbf" if bom else b"") + json.dumps(doc).encode())
    return f


@pytest.mark.parametrize(
    "doc,needle",
    [
        ({"bos_token_id": 1, "eos_token_id": 2, "temperature": 0.6}, "not a model config"),  # generation_config.json
        ({}, "not a model config"),
        ({**DSV3, "qk_rope_head_dim": "64"}, "qk_rope_head_dim='64'"),
        ({**DSV3, "v_head_dim": 0}, "v_head_dim=0"),
        ({**LLAMA, "num_attention_heads": 0}, "num_attention_heads=0"),
        ({**LLAMA, "num_key_value_heads": 0}, "num_key_value_heads=0"),
        ({**LLAMA, "num_key_value_heads": 5}, "num_key_value_heads=5: must divide"),
        ({**LLAMA, "hidden_size": 4095}, "hidden_size=4095: is not a multiple"),
        ({**LLAMA, "torch_dtype": "int4"}, "torch_dtype='int4'"),
        ({**LLAMA, "sliding_window": "big"}, "sliding_window='big'"),
        ({**LLAMA, "attn_logit_softcapping": "x"}, "attn_logit_softcapping='x'"),
        ({**LLAMA, "max_position_embeddings": -5}, "max_position_embeddings=-5"),
        ({**LLAMA, "text_config": "llama"}, "text_config='llama'"),
        ({"num_attention_heads": 32}, "no head_dim and no hidden_size"),
    ],
)
def test_unusable_model_configs_are_input_errors(cli, tmp_path: Path, doc: Dict[str, Any], needle: str) -> None:  # type: ignore[no-untyped-def]
    f = _cfg(tmp_path, doc)
    for fmt in ("text", "json") if needle == "not a model config" else ("text",):
        code, out, err = cli("check", "--env", SEED003, "--model", f, "-f", fmt)
        assert code == 2, (out[:300], err)
        line = one_line(err)
        assert "config.json" in line and needle in line, line


@pytest.mark.parametrize(
    "doc,description",
    [
        (LLAMA, "bf16, hd 128, 32/8 heads, causal, seq 4096"),
        (DSV3, "bf16, hd 192/128, 128/128 heads"),
        ({"model_type": "gemma2", "hidden_size": 3584, "num_attention_heads": 16, "num_key_value_heads": 8,
          "head_dim": 256, "sliding_window": 4096, "attn_logit_softcapping": 50.0, "torch_dtype": "float16"},
         "fp16, hd 256, 16/8 heads"),
        ({**LLAMA, "text_config": {"num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64}}, "bf16, hd 64, 16/4 heads"),
    ],
)
def test_real_model_configs_still_work(cli, tmp_path: Path, doc: Dict[str, Any], description: str) -> None:  # type: ignore[no-untyped-def]
    f = _cfg(tmp_path, doc, bom=True)  # m15: a BOM is accepted like in snapshots and workloads
    code, out, err = cli("check", "--env", SEED003, "--model", f, "-f", "json")
    assert code in (0, 1), err
    assert description in json.loads(out)["workload"]["description"]


def test_a_flag_overrides_an_unknown_model_dtype(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = _cfg(tmp_path, {**LLAMA, "torch_dtype": "int4"})
    code, out, err = cli("check", "--env", SEED003, "--model", f, "--dtype", "fp16", "-f", "json")
    assert code in (0, 1), err
    assert json.loads(out)["workload"]["dtype"] == "fp16"
