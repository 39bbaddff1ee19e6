"""Rule cases seeded from upstream data instead of the rule author's belief.

- rules/evidence/flash_attn_signatures.json (tools/signatures.py, from every flash-attn sdist on
  PyPI): the flash-attn feature rules refuse a feature exactly on the releases whose
  flash_attn_func has no parameter for it.
- rules/releases/flash-attn-wheels.json (flash-attn's publish.yml at every tag): the wheel-ABI
  finding fires for every release whose torch 2.6 wheels the 2.8 workflow built against the
  new-ABI cu126 torch, and for no earlier release that also published torch 2.6 wheels.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

import pytest

from doctor.resources import rules_dir
from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import Catalogue, load_catalogue

CAT: Catalogue = load_catalogue(use_cache=False)
SIGS: Dict[str, Any] = json.loads((rules_dir() / "evidence" / "flash_attn_signatures.json").read_text(encoding="utf-8"))
WHEELS: Dict[str, Any] = json.loads((rules_dir() / "releases" / "flash-attn-wheels.json").read_text(encoding="utf-8"))

# rule id -> (flash_attn_func parameter, a workload that needs it)
FEATURES: Dict[str, Tuple[str, Dict[str, Any]]] = {
    "FA2-SOFTCAP-NEEDS-2-6": ("softcap", {"softcap": 50.0}),
    "FA2-SLIDING-WINDOW-NEEDS-2-3": ("window_size", {"window_size": [4095, 0]}),
    "FA2-ALIBI-NEEDS-2-4": ("alibi_slopes", {"alibi": True}),
    "FA2-DETERMINISTIC-NEEDS-2-4-1": ("deterministic", {"deterministic": True}),
}


def _flash_attn_func(version: str) -> List[str]:
    rel = SIGS["releases"][version]
    while "same_as" in rel:
        rel = SIGS["releases"][rel["same_as"]]
    params = rel["files"]["flash_attn/flash_attn_interface.py"]["flash_attn_func"]
    return [p.split("=")[0].lstrip("*") for p in params]


def _status(rule_id: str, case: Dict[str, Any]) -> str:
    facts, workload = case_inputs(case)
    return str(diagnose(CAT, facts, workload).result(rule_id).status)


def test_signatures_cover_flash_attn_2() -> None:
    assert {"2.0.0.post1", "2.5.7", "2.6.3", "2.8.3"} <= set(SIGS["releases"])


@pytest.mark.parametrize("rule_id", sorted(FEATURES))
def test_feature_rules_follow_flash_attn_func_signature(rule_id: str) -> None:
    param, workload = FEATURES[rule_id]
    wrong = []
    for version in SIGS["releases"]:
        has = param in _flash_attn_func(version)
        got = _status(rule_id, {"packages": {"flash-attn": version}, "gpu": "8.0", "workload": dict(workload)})
        if got != ("passed" if has else "fired"):
            wrong.append(f"{version}: flash_attn_func {'has' if has else 'lacks'} {param}, rule {got}")
    assert not wrong, f"{rule_id} disagrees with the released signatures: {wrong}"


def _torch26_cu126_built(release: Dict[str, Any]) -> bool:
    return any(b["torch"] == "2.6" for b in release["builds"])


def test_wheel_abi_finding_follows_the_publish_matrix() -> None:
    rule = "FA-WHEEL-2-8-TORCH-2-6-OLD-ABI"
    checked = 0
    for rel in WHEELS["releases"]:
        if not _torch26_cu126_built(rel):
            continue
        case = {
            "packages": {"flash-attn": rel["version"], "torch": "2.6.0"},
            "torch": {"version": "2.6.0", "cuda": "12.4", "cxx11_abi": False},
            "imports": {"flash_attn": {"status": "error", "error": "undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"}},
        }
        want = "fired" if rel["version"].startswith("2.8.") else "passed"
        assert _status(rule, case) == want, (rel["version"], want)
        checked += 1
    assert checked >= 3  # 2.7.4.post1 and the 2.8 line publish torch 2.6 wheels


# ---------------------------------------------------------------- transformers, every release

HF: Dict[str, Any] = json.loads((rules_dir() / "evidence" / "transformers_attention.json").read_text(encoding="utf-8"))


def _hf_facts() -> Dict[str, Dict[str, Any]]:
    out = {}
    for version, rel in HF["releases"].items():
        while "same_as" in rel:
            rel = HF["releases"][rel["same_as"]]
        out[version] = rel["facts"]
    return out


def _below(version: str) -> str:
    """A torch release just below `version` (2.4 -> 2.3.1, 2.1.1 -> 2.1.0)."""
    parts = [int(x) for x in version.split(".")]
    if len(parts) == 3 and parts[2] > 0:
        return f"{parts[0]}.{parts[1]}.{parts[2] - 1}"
    return f"{parts[0]}.{parts[1] - 1}.1"


def test_hf_facts_cover_the_releases_the_rules_name() -> None:
    assert {"4.34.0", "4.36.0", "4.47.0", "4.53.0", "5.4.0"} <= set(HF["releases"])


@pytest.mark.parametrize(
    "rule_id,implementation,extra",
    [
        ("HF-SDPA-NEEDS-4-36", "sdpa", {}),
        ("HF-FA3-NEEDS-4-53", "flash_attention_3", {}),
        ("HF-FLEX-NEEDS-TORCH-2-5", "flex_attention", {"torch": "2.6.0"}),
    ],
)
def test_hf_implementation_rules_follow_the_released_modeling_utils(rule_id: str, implementation: str, extra: Dict[str, str]) -> None:
    wrong = []
    for version, facts in _hf_facts().items():
        offered = implementation in facts["implementations"]
        got = _status(rule_id, {"packages": {"transformers": version, **extra}, "torch": {"version": extra.get("torch", "2.6.0"), "cuda": "12.4"}})
        if got != ("passed" if offered else "fired"):
            wrong.append(f"{version}: {implementation} {'offered' if offered else 'absent'}, rule {got}")
    assert not wrong, f"{rule_id} disagrees with transformers' released modeling_utils: {wrong}"


def test_torch_floor_rule_follows_the_released_import_utils() -> None:
    rule = "HF-TORCH-TOO-OLD-FOR-TRANSFORMERS-5"
    checked = 0
    for version, facts in _hf_facts().items():
        floor = facts["torch_floor"]
        if floor is None:
            assert _status(rule, {"packages": {"transformers": version, "torch": "2.0.1"}}) == "passed", version
            continue
        below, at = _below(floor), f"{floor}.0"
        assert _status(rule, {"packages": {"transformers": version, "torch": below}}) == "fired", (version, below)
        assert _status(rule, {"packages": {"transformers": version, "torch": at}}) == "passed", (version, at)
        checked += 1
    assert checked >= 50


def test_flash_attn_floor_rule_follows_the_released_import_utils() -> None:
    rule = "HF-FA2-FLASH-ATTN-TOO-OLD"
    below_of = {">2.0.0": "2.0.0", ">=2.1.0": "2.0.9", ">=2.3.3": "2.3.2"}
    ok_of = {">2.0.0": "2.0.1", ">=2.1.0": "2.1.0", ">=2.3.3": "2.3.3"}
    for version, facts in _hf_facts().items():
        floor = facts["flash_attn_min"]
        env = {"torch": {"version": "2.3.1", "cuda": "12.1"}}
        low = _status(rule, {"packages": {"transformers": version, "flash-attn": below_of[floor], "torch": "2.3.1"}, **env})
        ok = _status(rule, {"packages": {"transformers": version, "flash-attn": ok_of[floor], "torch": "2.3.1"}, **env})
        assert (low, ok) == ("fired", "passed"), (version, floor, low, ok)
