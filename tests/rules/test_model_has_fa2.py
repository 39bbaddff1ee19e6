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
