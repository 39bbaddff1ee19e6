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


@pytest.mark.parametrize(
    "version, build",
    [
        ("2.8.3.post2", "fa2"),
        ("2.7.4.post1", "fa2"),
        ("1.0.9", "fa2"),  # the flash_attn package of the 1.x API: not a hopper/ build
        ("2.8.0.post2", "fa2"),  # ROCm fork tag v2.8.0-cktile
        ("3.0.0b1", "fa3_hopper"),  # hopper/ build of 2.7.3-2.7.4.post1
        ("3.0.0", "fa3_hopper"),
        ("3.0.0.post1", "fa2"),  # ROCm fork tag v3.0.0.r1-cktile ("3.0.0.r1")
        (None, "none"),
    ],
)
def test_flash_attn_build_fact(version, build) -> None:  # type: ignore[no-untyped-def]
    from doctor.rules.conditions import resolve

    packages = {"torch": "2.6.0"} if version is None else {"torch": "2.6.0", "flash-attn": version}
    facts, workload = case_inputs({"packages": packages})
    v = resolve("flash_attn.build", facts, workload)
    assert v.known and v.value == build


def test_flash_attn_build_unknown_without_packages() -> None:
    from doctor.model import Facts
    from doctor.rules.conditions import resolve

    _, workload = case_inputs({"packages": {}})
    assert resolve("flash_attn.build", Facts(), workload).known is False


def test_rocm_fork_is_transformers_flash_attention_2(cat) -> None:  # type: ignore[no-untyped-def]
    # transformers' is_flash_attn_2_available: a flash_attn module and version >= 2.0.4 on ROCm
    # (4.53.0 utils/import_utils.py:1099-1121) or >= 2.3.3 (5.9.0:984-999): 3.0.0.post1 passes
    for version, installed in (("3.0.0.post1", True), ("2.8.3", True), ("3.0.0b1", False)):
        facts, workload = case_inputs({"packages": {"flash-attn": version, "torch": ROCM["version"], "transformers": "4.53.0"},
                                       "torch": ROCM, "gpu": "9.4", "workload": {}})
        from doctor.rules.conditions import Context, evaluate

        fw = next(f for f in cat.frameworks if f.id == "transformers")
        member = next(b for b in fw.backends if b.id == "transformers.flash_attention_2")
        out = evaluate(member.installed, Context(facts, workload))
        assert out.value is installed, version
