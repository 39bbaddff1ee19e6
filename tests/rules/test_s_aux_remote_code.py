"""HF-5-6-0-FA-S-AUX-NONE: a model_type transformers 5.6.0 does not ship (trust_remote_code)
is not known to reach the shared flash-attention forward, so the rule does not fire there."""

from __future__ import annotations

from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue


def test_remote_code_model_type_does_not_fire() -> None:
    cat = load_catalogue(use_cache=False)
    facts, workload = case_inputs(
        {"packages": {"transformers": "5.6.0"}, "workload": {"attn_implementation": "flash_attention_2", "model_type": "internlm2"}}
    )
    assert diagnose(cat, facts, workload).result("HF-5-6-0-FA-S-AUX-NONE").status != "fired"
    facts, workload = case_inputs(
        {"packages": {"transformers": "5.6.0"}, "workload": {"attn_implementation": "flash_attention_2"}}
    )
    assert diagnose(cat, facts, workload).result("HF-5-6-0-FA-S-AUX-NONE").status == "fired"
