"""A CPU-only, XPU or macOS torch has no CUDA FlashAttention, memory-efficient or cuDNN SDPA kernel:
there each of those backends is out for one reason (SDPA-*-CPU-TORCH), not for a filter of a
kernel that is not in the build (sample 18 rows 1 and 25). Every firing case of every other rule
that switches those backends off is moved to a CPU-only build of the same torch; none may fire."""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional

from doctor.rules.cases import case_inputs, iter_rule_cases
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue

KERNEL_BACKENDS = ("sdpa.flash", "sdpa.efficient", "sdpa.cudnn")


def _cpu_build(case: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    c = copy.deepcopy(case)
    t = dict(c.get("torch") or {})
    v = t.get("version") or (c.get("packages") or {}).get("torch")
    if not v:
        return None
    v = str(v).split("+")[0] + "+cpu"
    t.update(version=v, cuda=None)
    t.pop("hip", None)
    c["torch"] = t
    c["packages"] = {**(c.get("packages") or {}), "torch": v}
    c.pop("cudnn", None)
    return c


def test_cuda_kernel_filters_stay_quiet_on_a_cpu_only_torch() -> None:
    cat = load_catalogue()
    wrong = []
    checked = 0
    rules = lambda r: r.disables in KERNEL_BACKENDS and not r.id.endswith("-CPU-TORCH")  # noqa: E731
    for rule, kind, i, case in iter_rule_cases(cat, rules):
        if kind != "fires":
            continue
        moved = _cpu_build(case)
        if moved is None:
            continue
        facts, wl = case_inputs(moved)
        d = diagnose(cat, facts, wl)
        checked += 1
        if d.result(rule.id).status == "fired":
            wrong.append(f"{rule.id} fires[{i}]")
        # the backend is still out, for the build's reason
        cpu_rule = {"sdpa.flash": "SDPA-FLASH-CPU-TORCH", "sdpa.efficient": "SDPA-EFF-CPU-TORCH", "sdpa.cudnn": "SDPA-CUDNN-CPU-TORCH"}[rule.disables]
        assert d.result(cpu_rule).status == "fired", (rule.id, i, cpu_rule)
    assert checked > 50
    assert not wrong, "fire on a CPU-only torch: " + ", ".join(wrong)


def test_cudnn_filters_stay_quiet_on_a_rocm_torch() -> None:
    # ROCm builds have no cuDNN attention at all (SDPA-CUDNN-CPU-TORCH covers every non-CUDA build)
    cat = load_catalogue()
    wrong = []
    for rule, kind, i, case in iter_rule_cases(cat, lambda r: r.disables == "sdpa.cudnn" and not r.id.endswith("-CPU-TORCH")):
        moved = _cpu_build(case) if kind == "fires" else None
        if moved is None:
            continue
        v = moved["torch"]["version"].replace("+cpu", "+rocm6.2")
        moved["torch"].update(version=v, hip="6.2")
        moved["packages"]["torch"] = v
        facts, wl = case_inputs(moved)
        if diagnose(cat, facts, wl).result(rule.id).status == "fired":
            wrong.append(f"{rule.id} fires[{i}]")
    assert not wrong, "fire on a ROCm torch: " + ", ".join(wrong)
