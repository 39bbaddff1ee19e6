"""A CPU-only, XPU or macOS torch has no CUDA FlashAttention, memory-efficient or cuDNN SDPA kernel:
there each of those backends is out for one reason (SDPA-*-CPU-TORCH), not for a filter of a
kernel that is not in the build (sample 18 rows 1 and 25). Every firing case of every other rule
that switches those backends off is moved to a CPU-only build of the same torch; none may fire."""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional

from packaging.version import Version

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
    # the torch-before-2.0 rules say there is no SDPA at all, on every build (sample 24 row 30):
    # below 2.0 they, not SDPA-*-CPU-TORCH, are the one reason
    rules = lambda r: r.disables in KERNEL_BACKENDS and not r.id.endswith(("-CPU-TORCH", "-TORCH-LT-2-0"))  # noqa: E731
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
        if Version(moved["torch"]["version"].split("+")[0]) < Version("2.0") and rule.disables != "sdpa.cudnn":
            cpu_rule = {"sdpa.flash": "SDPA-FLASH-TORCH-LT-2-0", "sdpa.efficient": "SDPA-EFF-TORCH-LT-2-0"}[rule.disables]
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


def test_cpu_torch_before_2_0_has_no_sdpa_at_all() -> None:
    # sample 24 row 30: torch 1.13.1 has only the private _scaled_dot_product_attention, so a
    # CPU-only 1.13.1 is not told that "SDPA runs that device's own kernels"
    cat = load_catalogue()
    facts, wl = case_inputs({"packages": {"torch": "1.13.1+cpu"}, "torch": {"version": "1.13.1+cpu", "cuda": None, "hip": None}, "gpu": "9.0"})
    d = diagnose(cat, facts, wl)
    for lt, cpu in (("SDPA-FLASH-TORCH-LT-2-0", "SDPA-FLASH-CPU-TORCH"), ("SDPA-EFF-TORCH-LT-2-0", "SDPA-EFF-CPU-TORCH"), ("SDPA-MATH-TORCH-LT-2-0", None)):
        assert d.result(lt).status == "fired", lt
        if cpu:
            assert d.result(cpu).status == "passed", cpu


# flash-attn: FlashAttention-2 and -3 are CUDA or ROCm extensions, FlashAttention-4 CuTe DSL kernels
# for NVIDIA GPUs. On a torch without CUDA or ROCm each member is out for the build alone
# (FA2-CPU-TORCH, FA3-CPU-TORCH, FA4-CPU-TORCH; FA4 on ROCm too), never for a kernel filter.
FA_CPU_RULE = {"flash_attn.fa2": "FA2-CPU-TORCH", "flash_attn.fa3": "FA3-CPU-TORCH", "flash_attn.fa4": "FA4-CPU-TORCH"}
FA_DEFAULT_TORCH = {"flash_attn.fa2": "2.6.0", "flash_attn.fa3": "2.8.0", "flash_attn.fa4": "2.9.0"}


def _fa_cpu_build(case: Dict[str, Any], member: str) -> Dict[str, Any]:
    # flash-attn cases often leave torch out: give them the member's usual torch, as a CPU build
    c = copy.deepcopy(case)
    if not ((c.get("torch") or {}).get("version") or (c.get("packages") or {}).get("torch")):
        c["packages"] = {**(c.get("packages") or {}), "torch": FA_DEFAULT_TORCH[member]}
    moved = _cpu_build(c)
    assert moved is not None
    return moved


def test_flash_attn_filters_stay_quiet_on_a_cpu_only_torch() -> None:
    cat = load_catalogue()
    wrong = []
    checked = 0
    rules = lambda r: r.disables in FA_CPU_RULE and not r.id.endswith("-CPU-TORCH")  # noqa: E731
    for rule, kind, i, case in iter_rule_cases(cat, rules):
        if kind != "fires":
            continue
        facts, wl = case_inputs(_fa_cpu_build(case, rule.disables))
        d = diagnose(cat, facts, wl)
        checked += 1
        if d.result(rule.id).status == "fired":
            wrong.append(f"{rule.id} fires[{i}]")
        # the member is still out, for the build's reason
        assert d.result(FA_CPU_RULE[rule.disables]).status == "fired", (rule.id, i, FA_CPU_RULE[rule.disables])
    assert checked > 50
    assert not wrong, "fire on a CPU-only torch: " + ", ".join(wrong)


def test_flash_attn_4_filters_stay_quiet_on_a_rocm_torch() -> None:
    # CuTe DSL has no AMD target: FA4-CPU-TORCH covers every torch without CUDA
    cat = load_catalogue()
    wrong = []
    for rule, kind, i, case in iter_rule_cases(cat, lambda r: r.disables == "flash_attn.fa4" and not r.id.endswith("-CPU-TORCH")):
        if kind != "fires":
            continue
        moved = _fa_cpu_build(case, rule.disables)
        v = moved["torch"]["version"].replace("+cpu", "+rocm6.2")
        moved["torch"].update(version=v, hip="6.2")
        moved["packages"]["torch"] = v
        facts, wl = case_inputs(moved)
        d = diagnose(cat, facts, wl)
        if d.result(rule.id).status == "fired":
            wrong.append(f"{rule.id} fires[{i}]")
        assert d.result("FA4-CPU-TORCH").status == "fired", (rule.id, i)
    assert not wrong, "fire on a ROCm torch: " + ", ".join(wrong)


def test_flash_attn_members_out_for_one_reason_on_a_cpu_only_torch() -> None:
    # sample 18's example: torch 2.6.0+cpu, flash-attn 2.7.4.post1, fp32, head_dim 320, an H100
    cat = load_catalogue()
    case = {
        "packages": {"flash-attn": "2.7.4.post1", "flash-attn-3": "3.0.0b1", "flash-attn-4": "4.0.0b27", "torch": "2.6.0+cpu"},
        "torch": {"version": "2.6.0+cpu", "cuda": None, "hip": None},
        "gpu": "9.0",
        "workload": {"dtype": "fp32", "head_dim": 320},
    }
    facts, wl = case_inputs(case)
    d = diagnose(cat, facts, wl)
    fired = {r.id for r in cat.rules if r.disables in FA_CPU_RULE and d.result(r.id).status == "fired"}
    assert fired == set(FA_CPU_RULE.values()), fired
