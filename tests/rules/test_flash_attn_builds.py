"""Which FlashAttention a `flash_attn` distribution is, by its version (rules/backends/flash_attn.yaml).

hopper/ builds of the 2.7.3-2.7.4.post1 sources install flash_attn 3.0.0b1 (FlashAttention-3);
ROCm's fork tag v3.0.0.r1-cktile installs flash_attn 3.0.0.r1 (= 3.0.0.post1), a CK build of the
FlashAttention-2 API (flash_attn_2_cuda), which runs dropout.
"""

from __future__ import annotations

from typing import Any, Dict

import pytest

from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue

ROCM = {"version": "2.6.0+rocm6.2.4", "cuda": None, "hip": "6.2"}


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalogue(use_cache=False)


def backends(cat: Any, case: Dict[str, Any]) -> Dict[str, Any]:
    facts, workload = case_inputs(case)
    return {b.id: b for b in diagnose(cat, facts, workload).backends if b.id.startswith("flash_attn.")}


def test_rocm_fork_3_0_0_r1_is_flashattention_2(cat) -> None:  # type: ignore[no-untyped-def]
    b = backends(cat, {"packages": {"flash-attn": "3.0.0.post1", "torch": ROCM["version"]}, "torch": ROCM, "gpu": "9.4", "workload": {"dropout": 0.1}})
    assert b["flash_attn.fa2"].available is True
    assert b["flash_attn.fa3"].available is False
    assert "library not installed" in "; ".join(b["flash_attn.fa3"].reasons)


def test_hopper_build_3_0_0b1_is_flashattention_3(cat) -> None:  # type: ignore[no-untyped-def]
    b = backends(cat, {"packages": {"flash-attn": "3.0.0b1"}, "gpu": "9.0", "workload": {}})
    assert b["flash_attn.fa3"].available is True
    assert b["flash_attn.fa2"].available is False
    assert "library not installed" in "; ".join(b["flash_attn.fa2"].reasons)
