"""What-if pins move every fact they imply."""

from __future__ import annotations

import pytest

from doctor.assume import apply_env, apply_pins, parse_env_assignment
from doctor.versions import parse_pin
from doctor.errors import InputError
from doctor.snapshot import facts_from_snapshot

BASE = {
    "packages": {"torch": "2.4.1+cu121", "nvidia-cudnn-cu12": "9.1.0.70", "flash-attn": "2.6.3"},
    "torch": {"version": "2.4.1+cu121", "cuda": "12.1"},
    "cudnn": {"version": "9.1.0", "loaded": "9.1.0", "bundled": "9.1.0"},
    "env": {"NVTE_FLASH_ATTN": "0"},
}


def test_cudnn_wheel_pin_moves_the_loaded_cudnn() -> None:
    f = apply_pins(facts_from_snapshot(BASE), [parse_pin("nvidia-cudnn-cu12==9.3.0.75")])
    assert f.cudnn.version == "9.3.0" and f.cudnn.loaded == "9.3.0"
    assert f.cudnn.bundled == "9.1.0"  # torch 2.4.1 still pins 9.1.0.70: the conflict stays visible
    assert f.packages["nvidia-cudnn-cu12"] == "9.3.0.75"


def test_torch_pin_moves_cuda_and_bundled_cudnn() -> None:
    f = apply_pins(facts_from_snapshot(BASE), [parse_pin("torch==2.7.1")])
    assert f.torch.version == "2.7.1" and f.torch.cuda == "12.6"
    assert f.cudnn.version == "9.5.1" and f.cudnn.bundled == "9.5.1"
    assert f.packages["nvidia-cudnn-cu12"] == "9.5.1.17"


def test_torch_pin_forgets_the_old_builds_architectures() -> None:
    doc = {**BASE, "torch": {**BASE["torch"], "arch_list": ["sm_80", "sm_90"]}}
    f = apply_pins(facts_from_snapshot(doc), [parse_pin("torch==2.8.0")])
    assert f.torch.arch_list is None  # the 2.8.0 wheel's list was never read; a Blackwell fix is not judged by 2.4's
    kept = apply_pins(facts_from_snapshot(doc), [parse_pin("flash-attn==2.8.3")])
    assert kept.torch.arch_list == ("sm_80", "sm_90")


def test_torch_pin_to_cuda13_swaps_the_cudnn_wheel_family() -> None:
    f = apply_pins(facts_from_snapshot(BASE), [parse_pin("torch==2.13.0")])
    assert f.torch.cuda == "13.0"
    assert "nvidia-cudnn-cu12" not in f.packages and f.packages["nvidia-cudnn-cu13"] == "9.20.0.48"


def test_env_assignments_set_and_unset() -> None:
    f = apply_env(facts_from_snapshot(BASE), dict([parse_env_assignment("NVTE_FLASH_ATTN"), parse_env_assignment("NVTE_UNFUSED_ATTN=1")]))
    assert "NVTE_FLASH_ATTN" not in f.env and f.env["NVTE_UNFUSED_ATTN"] == "1"


@pytest.mark.parametrize("bad", ["flash-attn>=2.5", "flash-attn", "==2.5.8"])
def test_bad_assume_pin_is_a_usage_error(bad: str) -> None:
    with pytest.raises(InputError, match="expected NAME==VERSION"):
        apply_pins(facts_from_snapshot(BASE), [parse_pin(bad)])


def test_pinning_a_broken_extension_assumes_the_matching_wheel_imports() -> None:
    doc = {**BASE, "imports": {"flash_attn": {"status": "error", "error": "undefined symbol: _ZN3c10...", "cause": "built for another torch"}, "xformers": {"status": "missing"}}}
    f = apply_pins(facts_from_snapshot(doc), [parse_pin("flash-attn==2.6.3")])
    assert f.imports["flash_attn"].status == "ok" and f.imports["xformers"].status == "missing"


def test_torch_move_reinstalls_compiled_extensions_and_takes_the_wheels_abi() -> None:
    doc = {**BASE, "imports": {"flash_attn": {"status": "ok"}}, "torch": {**BASE["torch"], "cxx11_abi": False}}
    f = apply_pins(facts_from_snapshot(doc), [parse_pin("torch==2.7.1")])
    assert f.imports["flash_attn"].status == "ok" and "assumed" in (f.imports["flash_attn"].cause or "")
    assert f.torch.cxx11_abi is True  # default PyPI wheels are cxx11-ABI from torch 2.7


def test_cudnn_wheel_of_another_cuda_major_is_not_what_torch_loads() -> None:
    f = apply_pins(facts_from_snapshot(BASE), [parse_pin("nvidia-cudnn-cu11==9.3.0.75")])
    assert f.cudnn.version == "9.1.0" and f.cudnn.loaded == "9.1.0"


def test_unknown_torch_release_makes_its_bundle_unknown_not_guessed() -> None:
    from doctor.rules.conditions import resolve
    from doctor.workload import default_workload

    f = apply_pins(facts_from_snapshot(BASE), [parse_pin("torch==9.9.9")])
    assert f.torch.version == "9.9.9"
    assert not resolve("torch.cuda", f, default_workload()).known
    assert not resolve("cudnn.version", f, default_workload()).known
