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
            "imports": {"flash_attn": {"status": "error", "error": "undefined symbol"}},
        }
        want = "fired" if rel["version"].startswith("2.8.") else "passed"
        assert _status(rule, case) == want, (rel["version"], want)
        checked += 1
    assert checked >= 3  # 2.7.4.post1 and the 2.8 line publish torch 2.6 wheels
