"""flash-attn wheel names per release: the CUDA tag changed spelling over time, and a wheel
exists only for the torch lines, CUDA majors, Pythons and ABIs a release's CI built. Names
checked against real release assets seen in public install scripts."""

from __future__ import annotations

from typing import Optional

import pytest

from doctor.releases.wheels import WheelTarget, choose_wheel, cuda_tag, wheel_target
from doctor.model import Facts, PythonInfo, TorchInfo


@pytest.mark.parametrize(
    "fa,torch_mm,cuda,tag",
    [
        ("2.1.1", "2.0", "11.7", "117"),  # major+minor of torch.version.cuda
        ("2.3.0", "2.1", "12.1", "122"),  # torch 2.1 forced to 12.2
        ("2.3.0", "2.0", "11.8", "118"),
        ("2.3.6", "2.1", "12.1", "122"),  # CUDA 12 -> 122
        ("2.5.8", "2.3", "12.1", "122"),
        ("2.6.0.post1", "2.3", "11.8", "118"),
        ("2.6.3", "2.4", "12.4", "123"),  # CUDA 12 -> 123 from 2.6.1
        ("2.7.0.post2", "2.5", "12.4", "12"),  # the major alone from 2.7.0
        ("2.8.3", "2.8", "12.8", "12"),
    ],
)
def test_cuda_tag(fa: str, torch_mm: str, cuda: str, tag: str) -> None:
    assert cuda_tag(fa, torch_mm, cuda) == tag


def _t(torch: str, cuda: Optional[str], abi: Optional[bool], py: Optional[str]) -> WheelTarget:
    return WheelTarget(torch=torch, cuda=cuda, cxx11_abi=abi, python=py)


@pytest.mark.parametrize(
    "fa,target,filename",
    [
        ("2.5.8", _t("2.3.0", "12.1", False, "3.10"), "flash_attn-2.5.8+cu122torch2.3cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"),
        ("2.5.8", _t("2.2.2", "12.1", False, "3.10"), "flash_attn-2.5.8+cu122torch2.2cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"),
        ("2.6.3", _t("2.4.1", "12.4", False, "3.11"), "flash_attn-2.6.3+cu123torch2.4cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"),
        ("2.7.4.post1", _t("2.6.0", "12.4", False, "3.12"), "flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp312-cp312-linux_x86_64.whl"),
        ("2.7.4.post1", _t("2.4.1", "12.1", False, "3.10"), "flash_attn-2.7.4.post1+cu12torch2.4cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"),
        ("2.3.0", _t("2.0.1", "11.7", False, "3.10"), "flash_attn-2.3.0+cu117torch2.0cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"),
        ("2.8.3", _t("2.7.1", "12.6", True, "3.11"), "flash_attn-2.8.3+cu12torch2.7cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"),
    ],
)
def test_real_asset_names(fa: str, target: WheelTarget, filename: str, rel) -> None:  # type: ignore[no-untyped-def]
    choice = choose_wheel(rel, fa, target)
    assert choice.available, choice.notes
    assert choice.filename == filename
    assert choice.url == f"https://github.com/Dao-AILab/flash-attention/releases/download/v{fa}/{filename}"
    assert choice.pip_command == f"pip install --no-deps {choice.url}"


@pytest.mark.parametrize(
    "fa,target,why",
    [
        ("2.5.8", _t("2.4.1", "12.1", False, "3.10"), "not 2.4"),  # no torch 2.4 build
        ("2.8.3", _t("2.9.1", "12.8", True, "3.11"), "not 2.9"),
        ("2.5.8", _t("2.3.0", "12.1", False, "3.13"), "Python 3.13"),
        ("2.8.3", _t("2.6.0", "12.4", False, "3.11"), "does not import"),  # 2.8.x torch2.6 FALSE wheels are new-ABI
        ("2.8.3.post2", _t("2.8.0", "12.8", True, "3.11"), "no wheel matrix"),
        ("2.7.4.post1", _t("2.6.0", None, False, "3.11"), "not a CUDA build"),
    ],
)
def test_no_wheel_says_why_and_how_to_build(fa: str, target: WheelTarget, why: str, rel) -> None:  # type: ignore[no-untyped-def]
    choice = choose_wheel(rel, fa, target)
    assert not choice.available
    assert any(why in n for n in choice.notes), choice.notes
    assert choice.build == f"MAX_JOBS=4 FLASH_ATTENTION_FORCE_BUILD=TRUE pip install flash-attn=={fa} --no-build-isolation"


@pytest.mark.parametrize("torch,fails", [("2.13.0", False), ("2.14.0", True), ("2.15.0", True)])
def test_source_build_against_a_cxx20_torch_is_flagged(torch: str, fails: bool, rel) -> None:  # type: ignore[no-untyped-def]
    """flash-attn's setup.py compiles with -std=c++17; torch 2.14's headers require C++20, so the
    build a user would be told to run fails there: the choice says so and the install step warns."""
    from doctor.fix.install import install_commands

    choice = choose_wheel(rel, "2.8.2", _t(torch, "13.0", True, "3.12"))
    assert not choice.available
    assert bool(choice.build_fails) is fails
    assert any("require C++20" in n for n in choice.notes) is fails
    cmds = install_commands(rel, {"flash-attn": "2.8.2"}, {"torch": torch}, torch, [choice], (), 13)
    build = next(c for c in cmds if c.package == "flash-attn")
    assert ("warning:" in build.text) is fails


def test_unknown_python_leaves_a_placeholder(rel) -> None:  # type: ignore[no-untyped-def]
    choice = choose_wheel(rel, "2.6.3", _t("2.4.1", "12.4", False, None))
    assert choice.available and "cp{XY}" in (choice.filename or "")
    assert any("3.8, 3.9, 3.10, 3.11, 3.12" in n for n in choice.notes)
    assert choice.pip_command == choice.build  # no copy-paste URL with a placeholder in it


def test_target_from_facts_fills_in_the_pypi_build() -> None:
    facts = Facts(packages={"torch": "2.4.1"}, torch=TorchInfo(version="2.4.1"), python=PythonInfo(version="3.10.14"))
    t = wheel_target(facts)
    assert t is not None and (t.cuda, t.cxx11_abi, t.python) == ("12.1", False, "3.10")
    assert t.assumed, "what was assumed is said"
    moved = wheel_target(Facts(torch=TorchInfo(version="2.4.1", cuda="12.4", cxx11_abi=False)), "2.7.1")
    assert moved is not None and (moved.cuda, moved.cxx11_abi) == ("12.6", True)
    probed = wheel_target(Facts(torch=TorchInfo(version="2.4.1+cu124", cuda="12.4", cxx11_abi=True)))
    assert probed is not None and (probed.cuda, probed.cxx11_abi, probed.assumed) == ("12.4", True, ())
    cpu = wheel_target(Facts(torch=TorchInfo(version="2.13.0+cpu")))
    assert cpu is not None and cpu.cuda is None


def test_flash_attn_unbuildable_names_a_needed_build_that_cannot_compile(rel) -> None:  # type: ignore[no-untyped-def]
    """What the planner refuses and the re-check counts as not installable: a flash-attn that must
    be compiled against torch >= 2.14 (no wheel; C++20 headers), not the installed release left as
    it is, nor a build against torch 2.13."""
    from doctor.fix.recheck import uninstallable
    from doctor.model import Fix, Pin
    from doctor.releases.wheels import flash_attn_unbuildable
    from doctor.rules.cases import case_inputs

    def facts(torch: str):  # type: ignore[no-untyped-def]
        f, _ = case_inputs({"packages": {"torch": torch, "flash-attn": "2.6.3"}, "torch": {"version": torch, "cuda": "13.0", "cxx11_abi": True},
                            "python": {"version": "3.12.3"}, "platform": {"os": "Linux 6.8.0", "arch": "x86_64", "libc": "glibc 2.39"}})
        return f

    why = flash_attn_unbuildable(rel, facts("2.14.0"), {"flash-attn": "2.8.3"})
    assert why and "flash-attn==2.8.3" in why and "C++20" in why
    assert flash_attn_unbuildable(rel, facts("2.14.0"), {"flash-attn": "2.6.3"}) is None  # nothing to install
    assert flash_attn_unbuildable(rel, facts("2.13.0"), {"flash-attn": "2.8.3"}) is None  # a build compiles there
    assert any("C++20" in u for u in uninstallable(facts("2.14.0"), Fix("x", pins=(Pin("flash-attn", "2.8.3"),))))


def test_flash_attn_arch_check_per_release() -> None:
    from doctor.releases.wheels import flash_attn_refuses_gpu
    from doctor.rules.cases import case_inputs

    def refused(version: str, gpu: str, hip: bool = False) -> bool:
        torch = {"version": "2.7.1", "cuda": "12.8"} if not hip else {"version": "2.7.1", "hip": "6.3"}
        facts, _ = case_inputs({"packages": {"torch": "2.7.1"}, "torch": torch, "gpu": gpu})
        return flash_attn_refuses_gpu(facts, {"flash-attn": version}) is not None

    # 1.x: is_sm90 || is_sm8x || is_sm75; 2.0-2.7.2.post1: is_sm90 || is_sm8x; 2.7.3+: cc_major >= 8
    assert not refused("1.0.9", "7.5") and refused("1.0.9", "7.0") and refused("1.0.9", "10.0")
    assert refused("2.0.0", "7.5") and not refused("2.0.0", "8.6") and not refused("2.0.0", "9.0")
    assert refused("2.7.2.post1", "10.0") and refused("2.6.3", "12.0")
    assert not refused("2.7.3", "10.0") and not refused("2.8.3", "12.0") and refused("2.8.3", "7.5")


def test_flash_attn_rocm_build_per_gpu() -> None:
    """On a ROCm torch a flash-attn pin helps only from 2.6.2 (the first release whose setup.py
    builds for ROCm) and only on the GPUs its composable_kernel backend supports: an MI100
    reports compute capability 9.0 like an MI250 but is refused by name."""
    from doctor.releases.wheels import flash_attn_refuses_gpu
    from doctor.rules.cases import case_inputs

    def why(version: str, name: str, cc: str, env: "dict | None" = None) -> "str | None":
        facts, _ = case_inputs({"packages": {"torch": "2.5.1+rocm6.2"}, "torch": {"version": "2.5.1+rocm6.2", "hip": "6.2", "cuda": None},
                                "gpus": [{"index": 0, "name": name, "compute_capability": cc}], "env": env or {}})
        return flash_attn_refuses_gpu(facts, {"flash-attn": version})

    assert why("2.7.4.post1", "AMD Instinct MI250X", "9.0") is None
    assert why("2.7.4.post1", "AMD Instinct MI300X", "9.4") is None
    refused = why("2.7.4.post1", "AMD Instinct MI100", "9.0")
    assert refused and "MI100" in refused and "MI200/MI300" in refused
    assert why("2.6.3", "AMD Radeon VII", "9.0") and why("2.8.3", "AMD Radeon RX 7900 XTX", "11.0")
    assert why("2.7.4.post1", "AMD Instinct MI355X", "9.5") and why("2.8.3", "AMD Instinct MI355X", "9.5") is None
    no_rocm = why("2.5.8", "AMD Instinct MI250X", "9.0")
    assert no_rocm and "no ROCm build" in no_rocm and why("2.6.2", "AMD Instinct MI250X", "9.0") is None
    facts, _ = case_inputs({"packages": {"torch": "2.2.2+rocm5.7"}, "torch": {"version": "2.2.2+rocm5.7", "hip": "5.7", "cuda": None},
                            "gpus": [{"index": 0, "name": "AMD Instinct MI250X", "compute_capability": "9.0"}]})
    old_rocm = flash_attn_refuses_gpu(facts, {"flash-attn": "2.7.4.post1"})
    assert old_rocm and "ROCm 6.0" in old_rocm
    # the Triton backend, chosen at build and run time, is not judged
    assert why("2.7.4.post1", "AMD Instinct MI100", "9.0", {"FLASH_ATTENTION_TRITON_AMD_ENABLE": "TRUE"}) is None
    # only the exact "TRUE" turns it on (v2.8.3 setup.py:65): "true" builds and runs the CK backend
    assert why("2.7.4.post1", "AMD Instinct MI100", "9.0", {"FLASH_ATTENTION_TRITON_AMD_ENABLE": "true"})


def test_rocm_gpu_names_match_the_catalogue_condition() -> None:
    """The re-check tells an MI50/MI100 from an MI250 (all report 9.0) by the same names as the
    catalogue's amd_gfx9_before_gfx90a condition: a card one of them learns and the other does not
    would make `check` and the re-check disagree about the same GPU."""
    from pathlib import Path

    import yaml

    from doctor.releases.wheels import _AMD_BEFORE_GFX90A

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "rules" / "conditions.yaml").read_text(encoding="utf-8"))
    cond = next(c for c in doc["conditions"] if c["id"] == "amd_gfx9_before_gfx90a")
    names = [leaf["matches"] for leaf in cond["when"]["all"] if leaf.get("fact") == "gpu.name"]
    assert names == [_AMD_BEFORE_GFX90A.pattern]


def test_rocm_target_says_no_rocm_wheel(rel) -> None:  # type: ignore[no-untyped-def]
    """Sample 47 row 24: a ROCm torch gets no flash-attn wheel (publish.yml builds CUDA wheels
    only) and compiles the composable_kernel build from 2.6.2; before 2.6.2 there is no ROCm build."""
    facts = Facts(torch=TorchInfo(version="2.6.0+rocm6.2.4", cuda=None, hip="6.2.41133"), python=PythonInfo(version="3.11.9"))
    target = wheel_target(facts)
    assert target is not None and target.hip == "6.2.41133" and target.cuda is None
    choice = choose_wheel(rel, "2.7.4.post1", target)
    assert not choice.available
    assert "ROCm build" in choice.notes[-1] and "composable_kernel" in choice.notes[-1]
    assert not any(n.startswith("assumed C++ ABI") for n in choice.notes)
    old = choose_wheel(rel, "2.6.1", target)
    assert not old.available and "has no ROCm build" in old.notes[-1]
    # a plan that moves torch judges the default (CUDA) build of the new release, not this ROCm one
    moved = wheel_target(facts, "2.7.1")
    assert moved is not None and moved.hip is None
