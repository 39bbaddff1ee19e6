"""Three-valued condition logic and version matching, as a rule author relies on them."""

from __future__ import annotations

import pytest

from doctor.model import arch_runs_on
from doctor.snapshot import facts_from_snapshot
from doctor.rules.conditions import Context, evaluate
from doctor.versions import version_matches
from doctor.workload import build, default_workload


def ctx(doc: dict, **workload: object) -> Context:
    return Context(facts_from_snapshot(doc), build(workload, base=default_workload()))


def test_local_labels_and_ngc_prereleases_match_like_their_release() -> None:
    assert version_matches("2.4.0+cu121", "<=2.4.0")
    assert version_matches("2.3.0a0+6ddf5cf.nv24.04", ">=2.3")
    assert version_matches("1.13.0+e5edd6c", ">=1.11,<1.14")
    assert not version_matches("2.6.3", "<2.6")
    assert not version_matches("not-a-version", ">=1")


def test_unknown_fact_makes_all_unknown_but_a_false_child_wins() -> None:
    c = ctx({"packages": {"flash-attn": "2.6.3"}})  # no gpus section: GPU facts unknown
    cond = {"all": [{"fact": "gpu.sm", "lt": 90}, {"package": "flash-attn", "version": ">=2.6"}]}
    out = evaluate(cond, c)
    assert out.value is None and any("gpu.sm" in m for m in out.missing)
    cond_false = {"all": [{"fact": "gpu.sm", "lt": 90}, {"package": "flash-attn", "version": "<2.6"}]}
    assert evaluate(cond_false, c).value is False


def test_any_true_child_wins_over_unknown_and_not_keeps_unknown() -> None:
    c = ctx({"packages": {}})
    assert evaluate({"any": [{"fact": "gpu.sm", "ge": 90}, {"package": "torch", "installed": False}]}, c).value is True
    assert evaluate({"not": {"fact": "gpu.sm", "ge": 90}}, c).value is None


def test_if_unknown_decides_a_leaf_only_where_its_fact_cannot_be_read() -> None:
    no_gpu = ctx({"packages": {}})
    sm75 = ctx({"gpus": [{"index": 0, "name": "T4", "compute_capability": "7.5"}]})
    leaf = {"fact": "gpu.sm", "lt": 80, "if_unknown": False}
    assert evaluate(leaf, no_gpu).value is False
    assert evaluate({"not": leaf}, no_gpu).value is True  # an exclusion that keeps a GPU-less report firing
    assert evaluate(leaf, sm75).value is True  # a known fact is compared as always
    assert evaluate({**leaf, "if_unknown": True}, no_gpu).value is True
    assert evaluate({"fact": "gpu.sm", "lt": 80}, no_gpu).value is None  # without it: unknown


def test_if_unknown_is_shown_to_a_reader() -> None:
    from doctor.rules.conditions import describe
    assert describe({"fact": "gpu.sm", "lt": 80, "if_unknown": False}) == "gpu.sm < 80 (taken as false where gpu.sm is unknown)"


def test_absent_packages_section_is_unknown_but_absent_package_is_not_installed() -> None:
    assert evaluate({"package": "torch", "installed": False}, ctx({})).value is None
    assert evaluate({"package": "torch", "installed": False}, ctx({"packages": {}})).value is True
    assert evaluate({"package": "Flash_Attn", "version": ">=2"}, ctx({"packages": {"flash-attn": "2.5.8"}})).value is True


def test_env_unset_is_known_and_compares_false() -> None:
    c = ctx({"env": {}})
    assert evaluate({"env": "NVTE_FLASH_ATTN", "eq": "0"}, c).value is False
    assert evaluate({"env": "NVTE_FLASH_ATTN", "is_set": False}, c).value is True
    assert evaluate({"env": "NVTE_FLASH_ATTN", "eq": "0"}, ctx({})).value is None


def test_version_strings_compare_as_versions_not_text() -> None:
    c = ctx({"cudnn": {"version": "9.10.2"}, "gpus": [{"index": 0, "name": "x", "compute_capability": "9.0"}]})
    assert evaluate({"fact": "cudnn.version", "ge": "9.3"}, c).value is True  # text compare would say "9.10" < "9.3"
    assert evaluate({"fact": "gpu.sm", "eq": 90}, c).value is True


def test_workload_derived_facts() -> None:
    c = ctx({}, head_dim_qk=192, head_dim_v=128, num_heads=16, num_kv_heads=1, context_parallel={"size": 2, "comm_type": "all_gather"})
    assert evaluate({"all": [{"fact": "workload.mla", "eq": True}, {"fact": "workload.gqa", "eq": True}, {"fact": "workload.head_dim_max", "eq": 192}, {"fact": "workload.cp_comm_type", "eq": "all_gather"}]}, c).value is True
    assert evaluate({"fact": "workload.cp_comm_type", "eq": "p2p"}, ctx({})).value is False  # no CP: comm type is None


def test_post_releases_match_exactly() -> None:
    assert version_matches("2.7.4.post1", "==2.7.4.post1")
    assert not version_matches("2.7.4.post1", "<=2.7.4")
    assert version_matches("2.7.4.post1+cu12torch2.6cxx11abiTRUE", "==2.7.4.post1")


def test_multiple_of() -> None:
    c = ctx({}, head_dim=72, seq_len=4096)
    assert evaluate({"fact": "workload.head_dim_qk", "multiple_of": 8}, c).value is True
    assert evaluate({"fact": "workload.seq_len_q", "multiple_of": 3}, c).value is False


@pytest.mark.parametrize(
    "version,spec",
    [
        ("2.6.3", ">=2.6,<2.7"), ("2.6.3", "~=2.6"), ("2.6.3", "~=2.6.0"), ("2.7.0", "~=2.6"), ("2.7.0", "~=2.6.0"),
        ("2.6.3", "==2.6.*"), ("2.7.0", "!=2.6.*"), ("2.7.4.post1", "<=2.7.4.post1"), ("2.8.0rc1", ">=2.8"),
        ("1.13.0", "!=1.13.0"), ("9.10.2", ">9.10.1,<9.11"), ("2.1.0", "==2.1"),
    ],
)
def test_specifier_matching_agrees_with_packaging(version: str, spec: str) -> None:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    assert version_matches(version, spec) == SpecifierSet(spec, prereleases=True).contains(Version(version), prereleases=True)


def test_exclusive_ordering_follows_pep_440_as_pip_does() -> None:
    # "<4.0.0" does not take 4.0.0's own pre-releases (a rule about FlashAttention-4 betas names
    # them: "<=4.0.0b27", "<4.0.0b5"); ">2.5.8" does not take 2.5.8.post1.
    assert not version_matches("4.0.0b4", "<4.0.0") and version_matches("4.0.0b4", "<=4.0.0b27")
    assert version_matches("4.0.0b4", "<4.0.0b5") and version_matches("3.9.0", "<4.0.0")
    assert not version_matches("2.5.8.post1", ">2.5.8") and version_matches("2.5.9", ">2.5.8")


def test_torch_not_installed_is_a_known_absence() -> None:
    c = ctx({"packages": {"transformers": "4.44.2"}, "unknown": {"torch": "torch is not installed on this Python"}})
    assert evaluate({"fact": "torch.cuda", "ge": "12.0"}, c).value is False
    assert evaluate({"fact": "torch.cuda", "is_set": False}, c).value is True


def test_driver_behind_compares_majors_then_minors_of_any_cuda() -> None:
    def behind(torch_cuda: str, driver_cuda: str) -> object:
        doc = {"torch": {"version": "2.4.1", "cuda": torch_cuda}, "cuda": {"driver_cuda": driver_cuda}}
        return evaluate({"fact": "cuda.driver_behind", "eq": "minor"}, ctx(doc)).value, evaluate(
            {"fact": "cuda.driver_behind", "eq": "major"}, ctx(doc)
        ).value

    assert behind("12.1", "12.0") == (True, False)  # torch 2.4's default CUDA, a list of 12.4+ missed it
    assert behind("13.0", "12.8") == (False, True)
    assert behind("14.0", "13.9") == (False, True)  # the next major needs no new rule
    assert behind("12.8", "12.10") == (False, False)  # minor 10 is newer than 8, not "12.1"
    unknown = ctx({"torch": {"version": "2.4.1", "cuda": "12.1"}, "cuda": {}})
    assert evaluate({"fact": "cuda.driver_behind", "eq": "minor"}, unknown).value is None


def test_loaded_cudnn_is_judged_like_torch_judges_it() -> None:
    def refused(bundled: str, loaded: str) -> object:
        return evaluate({"fact": "cudnn.loaded_incompatible", "eq": True}, ctx({"cudnn": {"bundled": bundled, "loaded": loaded}})).value

    assert refused("9.10.2.21", "9.10.0") is False  # same minor: accepted
    assert refused("9.10.2.21", "9.8.0") is True
    assert refused("8.5.0.96", "9.1.0") is True  # another major, even newer
    assert refused("9.1.0.70", "9.19.0") is False


def test_arch_runs_gpu_follows_cubin_and_ptx_compatibility() -> None:
    def runs(arch: list, cc: str) -> object:
        doc = {"torch": {"version": "2.11.0", "cuda": "13.0", "arch_list": arch}, "gpus": [{"name": "g", "compute_capability": cc}]}
        return evaluate({"fact": "torch.arch_runs_gpu", "eq": True}, ctx(doc)).value

    assert runs(["sm_80", "sm_86"], "8.9") is True  # sm_86 cubin on sm89
    assert runs(["sm_90"], "8.7") is False
    assert runs(["sm_120", "compute_120"], "12.1") is True
    assert runs(["sm_90", "compute_120"], "10.0") is False  # PTX never runs on an older GPU
    assert runs(["sm_100"], "10.3") is True


def test_arch_specific_targets_run_only_on_their_own_compute_capability() -> None:
    """NVIDIA's "a" targets (sm_90a, compute_100a) run only on exactly their compute capability,
    cubin and PTX alike; "f" targets (CUDA 12.9+) on later minors of their major, never on another
    major (CUDA C++ Programming Guide, Feature Set Compiler Targets). Plain PTX still
    JIT-compiles on any newer GPU."""
    assert arch_runs_on(("sm_90a", "sm_100a"), 103) is False  # a custom "9.0a;10.0a" build on a B300
    assert arch_runs_on(("sm_90a", "sm_100a"), 100) is True
    assert arch_runs_on(("sm_90a",), 90) is True
    assert arch_runs_on(("sm_120a",), 121) is False  # GB10 (12.1) runs no sm_120a cubin
    assert arch_runs_on(("sm_80", "compute_90a"), 100) is False  # no JIT of arch-specific PTX
    assert arch_runs_on(("compute_100a",), 100) is True
    assert arch_runs_on(("sm_100f",), 103) is True
    assert arch_runs_on(("sm_100f",), 100) is True
    assert arch_runs_on(("sm_103f",), 100) is False  # never an older minor
    assert arch_runs_on(("sm_100f", "compute_100f"), 120) is False  # family PTX stays in its major
    assert arch_runs_on(("compute_120f",), 121) is True
    assert arch_runs_on(("sm_100",), 103) is True  # a plain cubin keeps minor compatibility
    assert arch_runs_on(("compute_90",), 120) is True  # plain PTX: any newer major
    assert arch_runs_on(("compute_90",), 89) is False
    assert arch_runs_on(("sm_90x", "sm_", "weird_90"), 90) is False  # other forms are skipped
    assert arch_runs_on(("sm_87",), 87, tegra=True) is True
    assert arch_runs_on(("sm_80", "sm_86"), 87, tegra=True) is False  # Tegra: a cubin only on its own SM
    assert arch_runs_on(("compute_80",), 87, tegra=True) is True  # PTX is JIT-compiled on Tegra too


def test_thor_sm_101_and_sm_110_are_one_gpu() -> None:
    """CUDA 13 renamed Jetson Thor's SM 10.1 to 11.0 (PTX ISA 9.0 ".target": sm_101/101f/101a
    become sm_110/110f/110a; the sm_11x family holds sm_110f and sm_101f). torch 2.14.1
    torch/cuda/__init__.py DEVICE_REQUIREMENT agrees: sm_100 excludes 10.1, sm_101 and sm_110
    run on {10.1, 11.0}."""
    assert arch_runs_on(("sm_90", "sm_101f"), 103) is False  # sm_101f is not in the sm_10x family
    assert arch_runs_on(("sm_90", "compute_101f"), 110) is True  # Thor under CUDA 13 reports 11.0
    assert arch_runs_on(("sm_101f",), 110) is True
    assert arch_runs_on(("sm_101a",), 110) is True  # the renamed arch-specific target
    assert arch_runs_on(("sm_110a",), 101) is True
    assert arch_runs_on(("sm_101a",), 103) is False
    assert arch_runs_on(("sm_100f", "compute_100f"), 101) is False  # 10.1 is outside the 10.x family
    assert arch_runs_on(("sm_100f",), 110) is False
    assert arch_runs_on(("sm_110f",), 101) is True
    assert arch_runs_on(("sm_100",), 101) is False  # a plain sm_100 cubin does not run on Thor
    assert arch_runs_on(("sm_101",), 110) is True  # a plain sm_101 cubin does
    assert arch_runs_on(("sm_110",), 101) is True
    assert arch_runs_on(("sm_101",), 103) is False  # nor is sm_101 a 10.x cubin for a B300
    assert arch_runs_on(("sm_80", "compute_100"), 110) is True  # plain PTX of an older arch still JIT-compiles
    assert arch_runs_on(("sm_80", "compute_120"), 110) is False


def test_flash_attn_arch_runs_gpu_reads_the_suffix_too() -> None:
    def runs(archs: list, cc: str) -> object:
        doc = {"packages": {"flash-attn": "2.8.3"}, "cuda": {"flash_attn_archs": archs},
               "gpus": [{"name": "g", "compute_capability": cc}]}
        return evaluate({"fact": "flash_attn.arch_runs_gpu", "eq": True}, ctx(doc)).value

    assert runs(["sm_80", "sm_90a", "sm_100a"], "10.3") is False
    assert runs(["sm_80", "sm_90a", "sm_100a"], "10.0") is True
    assert runs(["sm_80", "sm_90", "sm_100", "sm_120"], "10.3") is True


def test_a_jetson_gpu_under_cuda_12_runs_only_its_own_cubin_or_older_ptx() -> None:
    def runs(arch: list, cc: str, cuda: str = "12.6") -> object:
        doc = {"torch": {"version": "2.8.0", "cuda": cuda, "arch_list": arch}, "gpus": [{"name": "Orin", "compute_capability": cc}]}
        return evaluate({"fact": "torch.arch_runs_gpu", "eq": True}, ctx(doc)).value

    assert runs(["sm_80", "sm_86"], "8.7") is False  # a desktop-style sm_86 cubin gives "no kernel image" on Orin
    assert runs(["sm_80", "sm_87"], "8.7") is True
    assert runs(["sm_80", "compute_80"], "8.7") is True  # PTX still JIT-compiles
    assert runs(["sm_70"], "7.2") is False  # Xavier
    assert runs(["sm_80", "sm_86"], "8.7", cuda="13.0") is True  # CUDA 13 on Orin: left to the desktop rule
    assert runs(["sm_80", "sm_86"], "8.9") is True  # a desktop sm89 keeps cubin compatibility


def test_arch_list_probed_is_known_when_the_list_is_not() -> None:
    fact = {"fact": "torch.arch_list_probed", "eq": False}
    static = evaluate(fact, ctx({"torch": {"version": "2.6.0+cu124", "cuda": "12.4"}}))
    assert static.value is True  # known, not unknown: a static probe reads no arch list
    probed = evaluate(fact, ctx({"torch": {"version": "2.6.0+cu124", "cuda": "12.4", "arch_list": ["sm_80"]}}))
    assert probed.value is False
    # torch.cuda.get_arch_list() returns [] whenever is_available() is false: no reading
    empty = {"torch": {"version": "2.8.0+cu128", "cuda": "12.8", "arch_list": []}, "gpus": [{"name": "g", "compute_capability": "6.1"}]}
    assert evaluate(fact, ctx(empty)).value is True
    assert evaluate({"fact": "torch.arch_runs_gpu", "eq": False}, ctx(empty)).value is None


def test_te_fp8_attention_follows_the_f16_switch_from_te_2_8() -> None:
    """FP8 attention in TE: an fp8 workload, unless NVTE_DPA_FP8_RECIPE=F16 (read from TE 2.8)."""
    fact = {"fact": "te.fp8_attention", "eq": True}
    f16 = {"NVTE_DPA_FP8_RECIPE": "F16"}
    assert evaluate(fact, ctx({"packages": {"transformer-engine": "2.8.0"}, "env": {}}, dtype="fp8")).value is True
    assert evaluate(fact, ctx({"packages": {"transformer-engine": "2.8.0"}, "env": f16}, dtype="fp8")).value is False
    assert evaluate(fact, ctx({"packages": {"transformer-engine-torch": "2.20.2"}, "env": f16}, dtype="fp8")).value is False
    assert evaluate(fact, ctx({"packages": {"transformer-engine": "2.7.0"}, "env": f16}, dtype="fp8")).value is True
    assert evaluate(fact, ctx({"packages": {"transformer-engine": "1.6.0"}, "env": {}}, dtype="fp8")).value is True
    assert evaluate(fact, ctx({"packages": {"transformer-engine": "1.5.0"}, "env": {}}, dtype="fp8")).value is False  # no fp8_dpa
    assert evaluate(fact, ctx({"packages": {"transformer-engine": "2.8.0"}, "env": {}}, dtype="bf16")).value is False
    assert evaluate(fact, ctx({"packages": {"transformer-engine": "2.8.0"}}, dtype="fp8")).value is None  # env not probed


def test_te_jax_alone_does_not_put_transformer_engine_on_the_path() -> None:
    """transformer-engine-jax is not TE for PyTorch: with no framework, attention is not TE's."""
    lib = {"fact": "path.library", "eq": "transformer-engine"}
    assert evaluate(lib, ctx({"packages": {"transformer-engine-torch": "2.8.0", "torch": "2.8.0"}})).value is True
    assert evaluate(lib, ctx({"packages": {"transformer-engine-jax": "2.8.0", "torch": "2.8.0"}})).value is False


def test_transformer_engine_version_is_read_from_any_te_distribution() -> None:
    """TE installed as transformer-engine-torch (+ -cu12) without the meta package still has a version."""
    window = {"package": "transformer-engine", "version": ">=2.10,<2.19"}
    only_torch = {"packages": {"transformer-engine-torch": "2.10.0", "transformer-engine-cu12": "2.10.0"}}
    assert evaluate(window, ctx(only_torch)).value is True
    assert evaluate({"package": "transformer-engine", "installed": True}, ctx(only_torch)).value is True
    assert evaluate({"not": window}, ctx({"packages": {"transformer-engine-torch": "2.9.0"}})).value is True
    assert evaluate({"package": "transformer-engine", "installed": False}, ctx({"packages": {"torch": "2.8.0"}})).value is True
    # transformer-engine-jax is not TE for PyTorch
    assert evaluate({"package": "transformer-engine", "installed": False}, ctx({"packages": {"transformer-engine-jax": "2.8.0"}})).value is True


def test_conditions_built_on_the_fly_do_not_grow_the_compiled_cache_without_bound() -> None:
    from doctor.rules import conditions

    c = ctx({"packages": {"flash-attn": "2.6.3"}})
    kept = {"package": "flash-attn", "version": ">=2.6"}
    assert evaluate(kept, c).value is True
    for i in range(conditions.COMPILED_MAX + 500):
        # a new dict each time, as a caller building conditions per call would
        assert evaluate({"package": "flash-attn", "version": f">=2.{i % 9}"}, c).value is (i % 9 <= 6)
    assert len(conditions._COMPILED) <= conditions.COMPILED_MAX
    # a condition dropped from the cache is compiled again and still answers right
    assert evaluate(kept, c).value is True
    assert evaluate({"package": "flash-attn", "version": ">=2.7"}, c).value is False


@pytest.mark.parametrize(
    "version, spec, expected",
    [
        ("2.9.0.dev0+g1a2b3c", ">=2.9", None),  # a source build between 2.8 and 2.9: has 2.9's change?
        ("2.9.0.dev0+g1a2b3c", "<2.9", None),
        ("2.9.0.dev0+g1a2b3c", ">=2.8", True),  # after 2.8 either way
        ("2.9.0.dev0+g1a2b3c", ">=2.9.1", False),  # before 2.9.1 either way
        ("2.6.0.dev20241112+cu124", ">=2.5,<2.6", None),  # a torch nightly of 2.6
        ("2.6.0.dev20241112+cu124", ">=2.5,<2.7", True),
        ("2.9.0", ">=2.9", True),  # releases and NGC pre-releases as before
        ("2.3.0a0+6ddf5cf.nv24.04", ">=2.3", True),
        # a bare .devN is a build of its own (xformers publishes 0.0.35.dev1147): as PEP 440
        ("0.9.2.dev0", "<0.9.2", False),
        ("0.0.35.dev1147", ">=0.0.34", True),
        ("5.0.0rc1", ">=5.0", None),  # a release candidate of a boundary release
        ("5.0.0rc1", "<5.0", None),
        ("5.0.0rc1", ">=4.57,<5.1", True),  # inside the range either way
        ("3.0.0b2", "<2.8", False),
        ("3.0.0b1", "<3.0.0rc0", True),  # a spec naming a pre-release: as written
        ("0.9.2.dev0+g1", ">=0.9.2.dev0,<0.9.3", True),  # a spec naming the pre-release is taken as written
    ],
)
def test_a_snapshot_or_pre_release_at_a_boundary_is_not_known(version: str, spec: str, expected: object) -> None:
    c = ctx({"packages": {"transformer-engine": version}})
    out = evaluate({"package": "transformer-engine", "version": spec}, c)
    assert out.value is expected, (version, spec, out)
    if expected is None:
        kind = "development snapshot" if "+" in version else "pre-release"
        assert any(f"is a {kind} of" in m and "compare with a release" in m for m in out.missing)


def test_import_tried_is_known_where_the_status_is_not() -> None:
    # p7-Te: `imports.<module>.tried` lets a backend rule read an import result only where the
    # probe tried it (TE-FLASH-FA4-CUTLASS-DSL), instead of leaving the backend undecided
    none = ctx({"packages": {}})
    assert evaluate({"fact": "imports.flash_attn.cute.status", "eq": "error"}, none).value is None
    assert evaluate({"fact": "imports.flash_attn.cute.tried", "eq": True}, none).value is False
    tried = ctx({"packages": {}, "imports": {"flash_attn.cute": {"status": "error", "error": "ImportError: x"}}})
    assert evaluate({"fact": "imports.flash_attn.cute.tried", "eq": True}, tried).value is True
    cond = {"all": [{"fact": "imports.flash_attn.cute.tried", "eq": True}, {"fact": "imports.flash_attn.cute.status", "eq": "error"}]}
    assert evaluate(cond, none).value is False
    assert evaluate(cond, tried).value is True


@pytest.mark.parametrize(
    "workload, direct",
    [
        ({}, True),  # custom code: the installed flash-attn is what it calls
        ({"framework": "deepspeed"}, True),  # Megatron-DeepSpeed's FlashSelfAttention calls it itself
        ({"framework": "xtuner"}, True),
        ({"framework": "verl"}, True),  # verl's FSDP workers load flash_attention_2 when none is configured
        ({"framework": "verl", "attn_implementation": "sdpa"}, False),
        ({"framework": "transformers"}, False),  # transformers defaults to SDPA
        ({"framework": "torchtitan"}, False),
        ({"attn_implementation": "flash_attention_2"}, False),  # transformers.flash_attention_2's path
    ],
)
def test_flash_attn_is_selected_only_where_code_may_call_it_directly(workload: dict, direct: bool) -> None:
    # a finding about flash-attn's own kernels (the flash_attn.* backends) must not fire for a run
    # whose stated framework picks SDPA, just because flash-attn is installed
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    case = {"packages": {"flash-attn": "2.6.3", "torch": "2.6.0"}, "gpu": "8.0", "torch": {"version": "2.6.0", "cuda": "12.4"}, "workload": workload}
    facts, wl = case_inputs(case)
    d = diagnose(load_catalogue(), facts, wl)
    assert d.path.flash_attn_direct is direct
    assert next(b for b in d.backends if b.id == "flash_attn.fa2").selected  # the library's own pick is unchanged
    c = Context(facts, wl, backends={b.id: b for b in d.backends}, path=d.path)
    assert evaluate({"backend": "flash_attn.fa2", "selected": True}, c).value is direct


@pytest.mark.parametrize(
    "version, spec, pep440, plain",
    [
        ("0.18.0rc0", "<0.18.0", None, True),  # not known as a change at 0.18.0; LLaMA-Factory's require_version refuses the rc
        ("0.18.0+local", "<0.18.0", False, False),
        ("0.17.1", "<0.18.0", True, True),
        ("0.18.0", "<0.18.0", False, False),
    ],
)
def test_compare_plain_reads_a_version_as_a_frameworks_own_check_does(version: str, spec: str, pep440: object, plain: bool) -> None:
    c = ctx({"packages": {"peft": version}})
    assert evaluate({"package": "peft", "version": spec}, c).value is pep440
    assert evaluate({"package": "peft", "version": spec, "compare": "plain"}, c).value is plain


def test_first_placeholder_shows_the_import_that_failed() -> None:
    """{first:A|B} renders the first of the facts that has a value: the error of whichever of
    TE's two imports failed, not "none none"."""
    from doctor.rules.evaluate import render

    tmpl = "fails: {first:imports.transformer_engine.error|imports.transformer_engine.pytorch.error}"
    c = ctx({"imports": {"transformer_engine": {"status": "ok"}, "transformer_engine.pytorch": {"status": "error", "error": "ImportError: undefined symbol"}}})
    assert render(tmpl, c) == "fails: ImportError: undefined symbol"
    c = ctx({"imports": {"transformer_engine": {"status": "error", "error": "OSError: libcudnn_adv.so.9"}}})
    assert render(tmpl, c) == "fails: OSError: libcudnn_adv.so.9"
    assert render(tmpl, ctx({})) == "fails: unknown"


def test_reasons_placeholder_takes_one_backend() -> None:
    """{reasons:BACKEND} renders only that backend's reasons (FlashAttention-4's head-dim refusal),
    not every backend of its framework, so a message about one kernel names only that kernel."""
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose, render
    from doctor.rules.loader import load_catalogue

    facts, workload = case_inputs({"packages": {"flash-attn-4": "4.0.0b27", "flash-attn": "2.8.3", "torch": "2.9.1"},
                                   "torch": {"version": "2.9.1+cu128", "cuda": "12.8"}, "gpu": "10.0",
                                   "workload": {"head_dim": 192}})
    c = diagnose(load_catalogue(), facts, workload).context(facts, workload)
    one = render("{reasons:flash_attn.fa4}", c)
    assert "flash-attn-4 4.0.0b27" in one and "head_dim_qk=192" in one
    assert "FlashAttention-2" not in one and not one.startswith("\n")
    assert "FlashAttention-2 (flash-attn)" in render("{reasons:flash-attn}", c)


def test_reasons_placeholder_names_only_the_listed_rules() -> None:
    """{reasons:BACKEND:RULE,...} keeps only what those rules say: transformers' flash_attention_4
    route drops dropout, so its message names FA4's head-dim refusal but not FA4's dropout one."""
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose, render
    from doctor.rules.loader import load_catalogue

    facts, workload = case_inputs({"packages": {"flash-attn-4": "4.0.0b27", "torch": "2.9.1"},
                                   "torch": {"version": "2.9.1+cu128", "cuda": "12.8"}, "gpu": "10.0",
                                   "workload": {"head_dim": 192, "dropout": 0.1, "training": True}})
    c = diagnose(load_catalogue(), facts, workload).context(facts, workload)
    every = render("{reasons:flash_attn.fa4}", c)
    assert "dropout 0.1" in every  # the unfiltered list has the dropout refusal
    only = render("{reasons:flash_attn.fa4:FA4-HEAD-DIM}", c)
    assert "head_dim_qk=192" in only and "dropout 0.1" not in only
    assert render("{reasons:flash_attn.fa4:FA4-HD256-LOCAL}", c) == "available"


def test_reasons_placeholder_rejects_rules_of_another_backend(tmp_path) -> None:
    """A {reasons:BACKEND:RULE} naming a rule that does not disable that backend is a load error
    naming the rule, not a message that silently renders nothing."""
    from pathlib import Path

    import pytest

    from doctor.resources import rules_dir
    from doctor.rules.loader import RuleError, load_catalogue

    src = Path(rules_dir()) / "findings" / "transformers.yaml"
    text = src.read_text(encoding="utf-8").replace("{reasons:flash_attn.fa4:FA4-HEAD-DIM,", "{reasons:flash_attn.fa4:TE-FUSED-SOFTCAP,", 1)
    assert "TE-FUSED-SOFTCAP," in text
    (tmp_path / "backends").mkdir()  # a catalogue-shaped folder: its file replaces the built-in one
    (tmp_path / "findings").mkdir()
    (tmp_path / "findings" / "transformers.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(RuleError, match="TE-FUSED-SOFTCAP"):
        load_catalogue([tmp_path], use_cache=False, shadow=True)


def test_reasons_placeholder_takes_a_family_member() -> None:
    """{reasons:te.fa4} names TE's FlashAttention-4 member's reasons (the loader accepts member
    ids), not "no backends"."""
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose, render
    from doctor.rules.loader import load_catalogue

    facts, workload = case_inputs({"packages": {"transformer-engine": "2.20.2", "torch": "2.9.1"},
                                   "torch": {"version": "2.9.1+cu128", "cuda": "12.8"}, "gpu": "10.0"})
    c = diagnose(load_catalogue(), facts, workload).context(facts, workload)
    got = render("{reasons:te.fa4}", c)
    assert got not in ("no backends", "available") and "not installed" in got
