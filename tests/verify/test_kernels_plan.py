"""Case planning, the case-id grammar, and the facts-side helpers (no torch needed)."""

from __future__ import annotations

import re

import pytest
from pathlib import Path

from doctor.model import Facts, GpuInfo, TorchInfo, Workload
from doctor.verify import (BACKENDS, CASE_ID_PATTERN, SDPA_BACKENDS, installed_backends,
                           kernels_available, make_case, matches, plan_cases)
from doctor.resources import kernels_dir

ALL_SDPA = set(SDPA_BACKENDS)


def test_ids_follow_the_documented_examples() -> None:
    assert make_case("sdpa.flash", head_dim_qk=192, head_dim_v=192).id == \
        "sdpa.flash/bf16/hd192/causal/fwdbwd"
    assert make_case("sdpa.cudnn", head_dim_qk=320, head_dim_v=320, mask="no_mask",
                     direction="fwd").id == "sdpa.cudnn/bf16/hd320/no_mask/fwd"
    seed = make_case("te.fused", dtype="fp16", head_dim_qk=64, head_dim_v=64, heads_q=16,
                     heads_kv=1, seq_q=2048, seq_kv=2048, batch=1, layout="strided-qkv")
    assert seed.id == "te.fused/fp16/hd64/gqa16-1/s2048/b1/causal/strided-qkv/fwdbwd"
    mla = make_case("sdpa.math", head_dim_qk=192, head_dim_v=128, seq_q=128, seq_kv=384,
                    mask="causal_bottom_right", window=(64, 0), softcap=30.0, dropout=0.125,
                    bench=True)
    assert mla.id == ("sdpa.math/bf16/hd192-128/sq128-skv384/causal_bottom_right/window64-0/"
                      "softcap30/dropout0.125/bench/fwdbwd")


def test_every_planned_id_is_unique_and_parses() -> None:
    w = Workload(head_dim_qk=192, head_dim_v=128, window_size=(4095, 0), softcap=50.0,
                 dropout=0.1, seq_len_q=8192, seq_len_kv=8192, qkv_format="thd")
    for plan in (plan_cases(None, set(BACKENDS), suite="full"), plan_cases(w, set(BACKENDS))):
        ids = [c.id for c in plan]
        assert len(ids) == len(set(ids))
        for cid in ids:
            assert re.match(CASE_ID_PATTERN, cid), cid


def test_default_plan_covers_the_issue_matrix() -> None:
    ids = {c.id for c in plan_cases(None, ALL_SDPA)}
    for b in SDPA_BACKENDS:
        for hd in (64, 128, 192, 256):
            assert f"{b}/bf16/hd{hd}/causal/fwdbwd" in ids
        assert f"{b}/bf16/hd320/no_mask/fwd" in ids
        assert f"{b}/bf16/hd128/sq128-skv384/causal_bottom_right/fwdbwd" in ids
        assert f"{b}/fp16/hd64/gqa16-1/s2048/b1/causal/strided-qkv/fwdbwd" in ids
        assert f"{b}/bf16/hd128/gqa32-8/s4096/b1/causal/bench/fwdbwd" in ids
    assert not any(c.startswith("sdpa.flex/") for c in ids)  # compile time: full suite only
    assert any(c.startswith("sdpa.flex/") for c in
               (s.id for s in plan_cases(None, ALL_SDPA | {"sdpa.flex"}, suite="full")))


def test_rule_globs_select_cases() -> None:
    ids = [c.id for c in plan_cases(None, ALL_SDPA)]
    hit = [i for i in ids if matches(i, ["sdpa.flash/*/hd320/*"])]
    assert hit == ["sdpa.flash/bf16/hd320/no_mask/fwd"]
    assert len([i for i in ids if matches(i, ["*/strided-qkv/*"])]) == 4


def test_only_expressible_cases_are_planned() -> None:
    plan = plan_cases(None, set(BACKENDS))
    assert not any(c.softcap and c.backend in SDPA_BACKENDS for c in plan)
    assert not any(c.backend.startswith("flash_attn.") and c.mask == "causal"
                   and c.seq_q != c.seq_kv for c in plan)
    assert {c.backend for c in plan if c.layout == "kvcache"} == {"flash_attn.fa2",
                                                                  "flash_attn.fa3"}
    assert {c.backend for c in plan if c.dtype == "fp8"} == {"flash_attn.fa3", "te.flash",
                                                              "te.fused", "te.unfused"}
    assert {c.backend for c in plan if c.softcap} >= {"te.flash", "te.fused", "te.unfused"}
    assert all(c.dropout == 0 or c.head_dim_v >= c.seq_kv for c in plan)


def test_workload_plan_judges_capped_and_times_full_shape() -> None:
    w = Workload(head_dim_qk=256, head_dim_v=256, num_heads=16, num_kv_heads=8,
                 seq_len_q=8192, seq_len_kv=8192, window_size=(4095, 0), softcap=50.0)
    plan = plan_cases(w, ALL_SDPA | {"sdpa.flex", "flash_attn.fa4"})
    flex = [c for c in plan if c.backend == "sdpa.flex"]
    bench = [c for c in flex if c.bench]
    judged = [c for c in flex if not c.bench]
    assert [c.seq_q for c in bench] == [8192] and not bench[0].judge
    assert [(c.seq_q, c.window) for c in judged] == [(1024, (511, 0))]
    assert judged[0].shape == bench[0].shape == \
        "bf16/hd256/gqa16-8/s8192/b1/causal/window4095-0/softcap50/fwdbwd"
    # SDPA cannot express softcap: no workload cases, only the regression cases
    assert all(c.shape is None for c in plan if c.backend in SDPA_BACKENDS)
    assert any(c.id.startswith("sdpa.cudnn/bf16/hd320/") for c in plan)


def _facts(**kw) -> Facts:
    return Facts(**kw)


def test_kernels_available_gives_the_reason_to_skip() -> None:
    gpu = (GpuInfo(index=0, name="NVIDIA H100", compute_capability="9.0"),)
    assert kernels_available(_facts())[1] == "torch is not installed"
    cpu = kernels_available(_facts(torch=TorchInfo(version="2.13.0+cpu"), gpus=gpu))
    assert cpu == (False, "torch 2.13.0+cpu is a CPU-only build (no CUDA)")
    nogpu = kernels_available(_facts(torch=TorchInfo(version="2.11.0", cuda="13.0"), gpus=()))
    assert nogpu == (False, "no NVIDIA GPU found")
    unk = kernels_available(_facts(torch=TorchInfo(version="2.11.0", cuda="13.0")))
    assert not unk[0] and "could not be probed" in unk[1]
    broken = kernels_available(_facts(torch=TorchInfo(version="2.11.0", cuda="13.0",
                                                      cuda_available=False), gpus=gpu))
    assert not broken[0] and "is_available() is False" in broken[1]
    ok = kernels_available(_facts(torch=TorchInfo(version="2.11.0", cuda="13.0",
                                                  cuda_available=True), gpus=gpu))
    assert ok == (True, "")


def test_installed_backends_from_package_facts() -> None:
    f = _facts(packages={"torch": "2.11.0", "triton": "3.6.0", "flash_attn": "2.8.3",
                         "flash-attn-4": "4.0.0b36", "transformer_engine": "2.20",
                         "xformers": "0.0.35"})
    assert installed_backends(f) == ALL_SDPA | {"sdpa.flex", "flash_attn.fa2",
                                                "flash_attn.fa4", "te.flash", "te.fused",
                                                "te.unfused", "xformers.cutlass"}
    assert installed_backends(_facts(packages={})) == set()


def test_worker_is_found_in_the_source_tree() -> None:
    d = kernels_dir()
    assert (d / "worker.py").is_file()
    assert d == Path(__file__).resolve().parents[2] / "kernels"
    assert not (d / "__init__.py").exists()  # data, not an importable package


@pytest.mark.parametrize("given", [
    dict(head_dim=192, num_heads=16, num_kv_heads=4, mask="causal", dtype="bf16"),
    dict(head_dim_qk=192, head_dim_v=128, num_heads=8, num_kv_heads=8, mask="no_mask", dtype="fp16", training=False),
    dict(head_dim=128, window_size=[511, 0], softcap=50.0, qkv_packed=True, num_heads=16, num_kv_heads=16),
    dict(head_dim=64, varlen=True, mask="padding_causal", dtype="bf16"),
])
def test_workload_and_case_shapes_map_both_ways(given) -> None:  # type: ignore[no-untyped-def]
    """The one Workload <-> CaseSpec mapping: a case planned for a workload, mapped back,
    describes the same attention call (what linking asks the backend model about)."""
    from dataclasses import asdict

    from doctor.verify.cases import case_dims, workload_for_case
    from doctor.workload import build, default_workload

    w = build(given, base=default_workload())
    dims = case_dims(w)
    spec = make_case("sdpa.math", **{k: v for k, v in dims.items()})
    back = workload_for_case(spec, w)
    assert case_dims(back) == dims
    for key in ("head_dim_qk", "head_dim_v", "num_heads", "num_kv_heads", "training", "softcap"):
        assert getattr(back, key) == getattr(w, key), key
    assert asdict(spec)["layout"] == dims["layout"]
