"""`path.model_supports`: what a transformers model family declares, read from the one table
(rules/evidence/transformers_attention.json) that tools/hf_attention_facts.py writes from the
released wheels; and the tool's change-point encoding of it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from doctor.releases.model_support import model_supports

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "transformers,model_type,attention,want",
    [
        ("4.35.2", "llama", "sdpa", False),  # sdpa arrived for llama in 4.36
        ("4.36.0", "llama", "sdpa", True),
        ("4.47.1", "llama", "flex_attention", False),
        ("4.48.0", "llama", "flex_attention", True),
        ("4.57.1+cu12", "gpt2", "flex_attention", False),  # GPT-2 has never set _supports_flex_attn
        ("4.41.2", "gpt2", "sdpa", False),
        ("4.42.0", "gpt2", "sdpa", True),
        # FA3 passes the merged flag but the family's attention-class dict has no FA3 key (KeyError)
        ("4.53.3", "nemotron", "flash_attention_3", False),  # no FA3 flag before 4.54
        ("5.12.1", "nemotron", "flash_attention_3", False),
        ("4.52.4", "diffllama", "flash_attention_3", False),  # no flash_attention_3 before 4.53
        ("4.53.0", "diffllama", "flash_attention_3", False),  # 4.53 flag _supports_flash_attn_3, no FA3 key
        ("5.12.1", "diffllama", "flash_attention_3", False),
        ("5.13.0", "diffllama", "flash_attention_3", True),
        ("5.13.0", "nemotron", "flash_attention_3", True),
        ("5.22.2", "bark", "flash_attention_3", False),
        ("5.23.0", "bark", "flash_attention_3", True),
        ("4.57.1", "distilbert", "flash_attention_3", False),
        ("5.0.0", "distilbert", "flash_attention_3", True),
        ("4.55.4", "esm", "flash_attention_3", False),
        ("4.56.0", "esm", "flash_attention_3", True),
        ("4.57.1", "nemotron", "flash_attention_2", True),
        # FA4 (5.4+) goes through the same merged `_supports_flash_attn` flag as FA3, and the
        # attention-class dicts without an FA3 key have none for FA4 either
        ("5.4.0", "llama", "flash_attention_4", True),
        ("5.23.0", "qwen3", "flash_attention_4", True),
        ("5.22.2", "falcon", "flash_attention_4", False),
        ("5.23.0", "falcon", "flash_attention_4", True),
        ("5.12.1", "nemotron", "flash_attention_4", False),
        ("5.3.0", "llama", "flash_attention_4", None),  # no FA4 before 5.4: HF-FA4-NEEDS-5-4, not the model
        ("4.33.0", "llama", "sdpa", None),  # older than every release read
        ("4.48.0", "no_such_family", "sdpa", None),
        (None, "llama", "sdpa", None),
        ("4.48.0", None, "sdpa", None),
    ],
)
def test_model_supports_follows_the_released_class_flags(transformers: str, model_type: str, attention: str, want: object) -> None:
    assert model_supports(transformers, model_type, attention) is want


def _tool():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "tools"))
    spec = importlib.util.spec_from_file_location("hf_attention_facts", ROOT / "tools" / "hf_attention_facts.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_change_points_record_changes_and_removals_only() -> None:
    tool = _tool()
    rows = [
        ("1.0", {"a": ["eager"], "b": ["eager"]}),
        ("1.1", {"a": ["eager"], "b": ["eager", "sdpa"]}),
        ("1.2", {"a": ["eager"]}),
        ("1.3", {"a": ["eager"], "b": ["eager"]}),
    ]
    assert tool.change_points(rows) == {
        "a": {"1.0": ["eager"]},
        "b": {"1.0": ["eager"], "1.1": ["eager", "sdpa"], "1.2": None, "1.3": ["eager"]},
    }
