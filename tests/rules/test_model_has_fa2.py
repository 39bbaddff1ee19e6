"""`path.model_has_fa2`: whether the model family declares flash_attention_2 in this transformers
release whatever attention was asked for (before 4.48 only such model modules import flash_attn,
so a broken flash-attn breaks only them)."""

from __future__ import annotations

from doctor.model import Facts, Workload
from doctor.rules.callpath import infer
from doctor.rules.conditions import Context, evaluate


def _path(transformers: str, model_type, attention: str = "sdpa"):
    facts = Facts(packages={"transformers": transformers, "torch": "2.5.1"})
    return infer(facts, Workload(model_type=model_type, attn_implementation=attention))


def test_read_for_flash_attention_2_whatever_was_asked_for() -> None:
    assert _path("4.44.2", "llama", "sdpa").model_has_fa2 is True
    assert _path("4.44.2", "bert", "sdpa").model_has_fa2 is False
    assert _path("4.44.2", "bert", "sdpa").model_supports is True  # sdpa itself is declared


def test_unknown_without_a_model_type() -> None:
    facts = Facts(packages={"transformers": "4.44.2", "torch": "2.5.1"})
    ctx = Context(facts, Workload(attn_implementation="sdpa"))
    assert evaluate({"fact": "path.model_has_fa2", "eq": True}, ctx).value is None
    ctx = Context(facts, Workload(model_type="llama", attn_implementation="sdpa"))
    assert evaluate({"fact": "path.model_has_fa2", "eq": True}, ctx).value is True


def test_model_has_sdpa_reads_the_table_for_sdpa_whatever_was_asked_for() -> None:
    assert _path("4.57.1", "llama", "flash_attention_2").model_has_sdpa is True
    assert _path("4.57.1", "mpt", "flash_attention_2").model_has_sdpa is False  # MPT never had SDPA


def test_model_in_transformers_reads_the_first_release_of_the_family() -> None:
    # sample 40 row 20: qwen2_moe first in 4.40.0, gemma2 in 4.42.0 (the support table's first rows)
    assert _path("4.39.3", "qwen2_moe").model_in_transformers is False
    assert _path("4.40.0", "qwen2_moe").model_in_transformers is True
    assert _path("4.41.2", "gemma2").model_in_transformers is False
    assert _path("4.42.0", "gemma2").model_in_transformers is True
    # a family outside the table (remote code) or older than the table's first release: not known
    assert _path("4.44.2", "baichuan").model_in_transformers is None
    assert _path("4.30.0", "llama").model_in_transformers is None
    facts = Facts(packages={"transformers": "4.44.2", "torch": "2.5.1"})
    ctx = Context(facts, Workload(model_type="baichuan", attn_implementation="sdpa"))
    assert evaluate({"fact": "path.model_in_transformers", "eq": False}, ctx).value is None
    ctx = Context(facts, Workload(model_type="qwen3", attn_implementation="sdpa"))
    assert evaluate({"fact": "path.model_in_transformers", "eq": False}, ctx).value is True
