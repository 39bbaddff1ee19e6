"""A fix's workload value can copy another workload key ("repeat the kv heads":
num_kv_heads takes num_heads), so such a fix is applied and re-checked instead of shown as
unverified advice; where the key it copies is unknown the fix stays advice."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.errors import RuleError
from doctor.fix.recheck import verified_fixes
from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue

GQA_FP32 = {
    "packages": {"torch": "2.7.1"},
    "torch": {"version": "2.7.1+cu126", "cuda": "12.6"},
    "gpu": "9.0",
    "workload": {"dtype": "fp32", "num_heads": 32, "num_kv_heads": 8, "context_parallel": {"size": 2, "impl": "torch_ring"}},
}


def _fixes(case: dict, rule_id: str = "TORCH-CP-MATH-BACKEND") -> dict:
    cat = load_catalogue()
    facts, workload = case_inputs(case)
    diagnosis = diagnose(cat, facts, workload)
    finding = next(f for f in verified_fixes(cat, facts, workload, diagnosis) if f.rule_id == rule_id)
    assert finding.status == "fired"
    return {f.description.split(" (")[0]: f for f in finding.fixes}


def test_repeating_kv_heads_is_rechecked_with_the_query_head_count() -> None:
    fixes = _fixes(GQA_FP32)
    repeat = fixes["Repeat kv heads to the query head count"]
    assert repeat.verified is True and dict(repeat.workload) == {"num_kv_heads": 32}


def test_on_sm75_with_bf16_only_the_repeat_with_fp32_clears() -> None:
    case = {**GQA_FP32, "gpu": "7.5", "workload": {"dtype": "bf16", "num_heads": 32, "num_kv_heads": 8, "context_parallel": {"size": 2, "impl": "torch_ring"}}}
    fixes = _fixes(case)
    assert "Repeat kv heads to the query head count" not in fixes  # re-checked: still math on sm75 bf16
    both = fixes["Repeat kv heads to the query head count and train in fp32"]
    assert both.verified is True and dict(both.workload) == {"num_kv_heads": 32, "dtype": "fp32"}


def test_a_placeholder_must_read_a_workload_key(tmp_path: Path) -> None:
    bad = tmp_path / "rules" / "x.yaml"
    bad.parent.mkdir()
    bad.write_text(
        "rules:\n  - id: X-ONE\n    severity: error\n    title: t\n    message: m\n"
        "    when: {fact: workload.num_heads, gt: 1}\n"
        "    fixes:\n      - description: d\n        workload: {num_kv_heads: \"{gpu.sm}\"}\n"
        "    sources: [https://example.org/a]\n"
        "    tests: {fires: [{workload: {num_heads: 2}}], passes: [{workload: {num_heads: 1}}]}\n"
    )
    with pytest.raises(RuleError, match="reads no workload key"):
        load_catalogue([tmp_path / "rules"], builtin=False, use_cache=False)
