"""A fix whose pin PyPI does not have for the user's Python or platform is not verified: `check`
drops it, as `fix` refuses to pin it (doctor.fix.recheck.uninstallable)."""

from __future__ import annotations

import copy

from doctor.fix.recheck import recheck
from doctor.model import Fix, Pin
from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue

# torch 2.7.1 cu126 (no sm_120) on an RTX 50-series card, x86-64 Linux: TORCH-NO-BLACKWELL-KERNELS
CASE = {
    "packages": {"torch": "2.7.1"},
    "torch": {"version": "2.7.1", "cuda": "12.6", "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]},
    "gpu": "12.0",
    "platform": {"os": "Linux 6.8.0", "arch": "x86_64", "libc": "glibc 2.35"},
}
RULE = "TORCH-NO-BLACKWELL-KERNELS"


def _recheck(python: str, version: str):  # type: ignore[no-untyped-def]
    cat = load_catalogue()
    case = copy.deepcopy(CASE)
    case["python"] = {"version": python}
    facts, wl = case_inputs(case)
    d = diagnose(cat, facts, wl)
    assert d.result(RULE).status == "fired"
    return recheck(cat, facts, wl, Fix("move torch", pins=(Pin("torch", version),)), (RULE,), d)


def test_a_torch_pin_without_a_wheel_for_this_python_is_not_verified() -> None:
    # torch 2.8.0 (CUDA 12.8, sm_120) has wheels for CPython 3.9-3.13 only
    assert _recheck("3.12.3", "2.8.0").verified
    r = _recheck("3.14.0", "2.8.0")
    assert not r.verified and r.cleared == (RULE,)
    assert r.uninstallable == ("torch==2.8.0 does not install on Python 3.14",)
    assert "does not install on Python 3.14" in r.side_effects


def test_the_release_table_takes_a_torchs_pythons_from_its_wheels() -> None:
    # torch 2.9.1's Requires-Python is >=3.10, but PyPI has no cp315 wheel of it; 2.15.0 has one
    assert _recheck("3.14.0", "2.9.1").verified
    assert _recheck("3.15.0", "2.9.1").uninstallable == ("torch==2.9.1 does not install on Python 3.15",)
    assert _recheck("3.15.0", "2.15.0").verified


def _recheck_on(arch: str, version: str):  # type: ignore[no-untyped-def]
    cat = load_catalogue()
    case = copy.deepcopy(CASE)
    case["python"] = {"version": "3.11.9"}
    case["platform"] = {"os": "Linux 6.8.0", "arch": arch, "libc": "glibc 2.39"}
    facts, wl = case_inputs(case)
    d = diagnose(cat, facts, wl)
    return recheck(cat, facts, wl, Fix("move torch", pins=(Pin("torch", version),)), (RULE,), d)


def test_a_torch_pin_whose_pypi_wheel_for_this_machine_is_cpu_only_is_not_verified() -> None:
    # PyPI's aarch64 torch wheels up to 2.10.0 are CPU builds (nvidia-* requirements marked
    # platform_machine == "x86_64", no libtorch_cuda.so); 2.11.0's are CUDA 13 builds
    from doctor.releases.catalogue import load_release_catalogue

    rel = load_release_catalogue()
    assert not rel.cuda_build_ok("torch", "2.8.0", "linux-aarch64")
    assert not rel.cuda_build_ok("torch", "2.10.0", "linux-aarch64")
    assert rel.cuda_build_ok("torch", "2.11.0", "linux-aarch64")
    assert rel.cuda_build_ok("torch", "2.8.0", "linux-x86_64")
    assert rel.cuda_build_ok("torch", "2.8.0", None)
    assert rel.cuda_build_ok("nvidia-cudnn-cu12", "9.10.2.21", "linux-aarch64")
    assert _recheck_on("x86_64", "2.8.0").uninstallable == ()
    r = _recheck_on("aarch64", "2.8.0")
    assert r.uninstallable == ("PyPI's torch==2.8.0 for linux-aarch64 is a CPU-only build",)
    assert not r.verified
    assert "CPU-only" not in " ".join(_recheck_on("aarch64", "2.11.0").uninstallable)
    # a +cuXXX torch came from PyTorch's CUDA index, which `fix` installs the pin from
    assert rel.cuda_build_ok("torch", "2.8.0", "linux-aarch64", "2.7.1+cu128")
    assert not rel.cuda_build_ok("torch", "2.8.0", "linux-aarch64", "2.7.1")


def test_a_pypi_torch_pin_on_windows_is_a_cpu_build_and_the_cuda_index_exemption_is_what_fix_installs() -> None:
    """PyPI's Windows torch wheels are CPU-only in every release; a +cuXXX torch is exempt only
    where `fix` really adds PyTorch's CUDA index to the command (the pin's CUDA known)."""
    from doctor.fix.install import install_commands
    from doctor.releases.catalogue import load_release_catalogue, torch_cuda_index_tag

    rel = load_release_catalogue()
    assert not rel.cuda_build_ok("torch", "2.8.0", "windows-x86_64")
    assert not rel.cuda_build_ok("torch", "2.11.0", "windows-x86_64")
    assert rel.cuda_build_ok("torch", "2.8.0", "windows-x86_64", "2.7.1+cu128")
    # a pin whose CUDA the release table does not know is installed from PyPI: not exempt
    unknown = "1.0.0"
    assert torch_cuda_index_tag("2.7.1+cu128", unknown) is None
    assert not rel.cuda_build_ok("torch", unknown, "linux-aarch64", "2.7.1+cu128")
    # the command `fix` writes takes the same index the exemption counted on
    tag = torch_cuda_index_tag("2.7.1+cu128", "2.8.0")
    assert tag is not None and tag.startswith("cu")
    cmds = install_commands(rel, {"torch": "2.8.0"}, {"torch": "2.7.1+cu128"}, "2.7.1+cu128")
    torch_cmd = next(c for c in cmds if c.package == "torch")
    assert f"/{tag}" in torch_cmd.command


def test_a_switch_to_an_attention_none_of_whose_backends_runs_here_is_not_verified() -> None:
    """Code calling flash-attn 2.0.4 on a T4 (no FlashAttention-2 kernel for sm75): switching it to
    SDPA clears the rule on torch 2.4, but on torch 1.13.1 there is no public SDPA at all, so the
    switch cannot help (sample 35 row 12) and `check` must not call it verified."""
    cat = load_catalogue()
    rule = "CUSTOM-CODE-FLASH-ATTN-NO-KERNEL"
    to_sdpa = Fix("switch to SDPA", workload={"attn_implementation": "sdpa"})
    for torch, verified in (("2.4.1", True), ("1.13.1", False)):
        case = {"packages": {"flash-attn": "2.0.4", "torch": torch}, "torch": {"version": torch, "cuda": "12.1" if torch == "2.4.1" else "11.7"}, "gpu": "7.5",
                "workload": {"framework": "custom", "attn_implementation": "flash_attention_2", "dtype": "fp16"}}
        facts, wl = case_inputs(case)
        d = diagnose(cat, facts, wl)
        assert d.result(rule).status == "fired"
        r = recheck(cat, facts, wl, to_sdpa, (rule,), d)
        assert r.cleared == (rule,) and r.verified is verified, (torch, r.side_effects, r.still)
        assert bool(r.no_backend) is not verified
    assert "no sdpa backend can run here" in r.side_effects


# transformers' flash_attention_2 on a B200 with flash-attn 2.5.6 (its check refuses sm100)
HF_FA2 = {
    "packages": {"torch": "2.7.1", "transformers": "4.44.2", "flash-attn": "2.5.6"},
    "torch": {"version": "2.7.1", "cuda": "12.8"},
    "python": {"version": "3.11.9"},
    "platform": {"os": "Linux 6.8.0", "arch": "x86_64", "libc": "glibc 2.35"},
    "workload": {"framework": "transformers", "attn_implementation": "flash_attention_2", "dtype": "bf16"},
}


def _fa_pin(gpu: "str | None", version: str, case: dict = HF_FA2):  # type: ignore[no-untyped-def,type-arg]
    cat = load_catalogue()
    case = copy.deepcopy(case)
    if gpu:
        case["gpu"] = gpu
    facts, wl = case_inputs(case)
    return recheck(cat, facts, wl, Fix("move flash-attn", pins=(Pin("flash-attn", version),)), (), diagnose(cat, facts, wl))


def test_a_flash_attn_pin_whose_arch_check_refuses_the_gpu_is_not_verified_where_it_runs() -> None:
    # flash-attn 2.0-2.7.2.post1 admit sm80-sm89 and sm90 only; 2.7.3+ any sm80+
    r = _fa_pin("10.0", "2.6.3")
    assert not r.verified
    assert "flash-attn==2.6.3 refuses sm100 at its first call" in r.side_effects
    assert not any("refuses" in u for u in _fa_pin("10.0", "2.8.3").uninstallable)
    assert not any("refuses" in u for u in _fa_pin("9.0", "2.6.3").uninstallable)
    # Jetson Thor and an RTX 50 card are refused by 2.6.3 too; a mixed H100 + B200 host names the B200
    assert "refuses sm110" in _fa_pin("11.0", "2.6.3").side_effects
    gpus = [{"index": i, "name": f"GPU {cc}", "compute_capability": cc} for i, cc in enumerate(("9.0", "10.0"))]
    mixed = _fa_pin(None, "2.6.3", {**HF_FA2, "gpus": gpus})
    assert "flash-attn==2.6.3 refuses sm100 at its first call" in mixed.side_effects


def test_a_flash_attn_pin_is_not_refused_where_nothing_calls_flash_attn() -> None:
    # with attn_implementation sdpa the pin only changes a package nothing here calls
    case = {**HF_FA2, "workload": {**HF_FA2["workload"], "attn_implementation": "sdpa"}}  # type: ignore[dict-item]
    assert not any("refuses" in u for u in _fa_pin("10.0", "2.6.3", case).uninstallable)


def _te_pin(cudnn: str, te: str):  # type: ignore[no-untyped-def]
    # TE 2.1 on a torch 2.3.1 host; the fix moves TE only (no cuDNN, no torch)
    cat = load_catalogue()
    case = {
        "packages": {"transformer-engine": "2.1.0", "torch": "2.3.1"},
        "torch": {"version": "2.3.1+cu121", "cuda": "12.1"},
        "gpu": "9.0",
        "cudnn": {"version": cudnn},
        "python": {"version": "3.11.9"},
        "platform": {"os": "Linux 6.8.0", "arch": "x86_64", "libc": "glibc 2.35"},
        "imports": {"transformer_engine": {"status": "ok"}, "transformer_engine.pytorch": {"status": "ok"}},
    }
    facts, wl = case_inputs(case)
    return recheck(cat, facts, wl, Fix("move TE", pins=(Pin("transformer-engine", te),)), (), diagnose(cat, facts, wl))


def test_a_te_pin_that_links_cudnn_9_is_not_verified_beside_a_cudnn_8() -> None:
    # TE 2.2+ link libcudnn.so.9: on torch 2.3's cuDNN 8.9 the upgraded TE would not import,
    # although the installed TE 2.1 imported fine (the re-check must not trust that observation)
    r = _te_pin("8.9.2", "2.5.0")
    assert not r.verified and "TE-LINKS-CUDNN-9-CUDNN-8-HERE" in r.new_errors
    # the same pin beside a cuDNN 9, and a pin that stays below 2.2, are clean
    assert "TE-LINKS-CUDNN-9-CUDNN-8-HERE" not in _te_pin("9.1.0", "2.5.0").new_errors
    assert "TE-LINKS-CUDNN-9-CUDNN-8-HERE" not in _te_pin("8.9.2", "2.1.0").new_errors
