"""Heterogeneity analysis over snapshots: what differs, who is on each side, what to do."""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Tuple

import pytest

from doctor.cluster.hetero import analyze, ranks_text


def snap(host: str = "node01", **over: Any) -> Dict[str, Any]:
    doc: Dict[str, Any] = {
        "schema_version": 1,
        "host": host,
        "created": "2026-01-01T00:00:00+00:00",  # differs between ranks; never compared
        "packages": {"torch": "2.5.1", "flash-attn": "2.6.3", "transformer-engine": "1.12.0",
                     "nvidia-nccl-cu12": "2.21.5", "triton": "3.1.0"},
        "torch": {"version": "2.5.1+cu124", "cuda": "12.4", "cuda_available": True, "cudnn_version": "9.1.0"},
        "cuda": {"driver_version": "550.54.15", "driver_cuda": "12.4", "runtime": "12.4.127"},
        "cudnn": {"loaded": "9.1.0", "version": "9.1.0"},
        "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "memory_mib": 81559}
                 for i in range(8)],
        "env": {"NCCL_IB_HCA": "mlx5", "CUDA_VISIBLE_DEVICES": "0"},
        "imports": {"flash_attn": {"status": "ok"}},
        "python": {"version": "3.11.9"},
        "unknown": {},
    }
    for path, value in over.items():
        node = doc
        *parents, leaf = path.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return doc


def job(*docs: Dict[str, Any]) -> List[Tuple[str, None, Dict[str, Any]]]:
    return [(str(i), None, d) for i, d in enumerate(docs)]


def by_id(findings: Any) -> Dict[str, Any]:
    return {f.rule_id: f for f in findings}


def test_identical_ranks_have_no_findings() -> None:
    docs = [snap(f"node0{i // 4}", env__CUDA_VISIBLE_DEVICES=str(i % 4), created=f"t{i}") for i in range(8)]
    assert analyze(job(*docs)) == ()


def test_one_snapshot_cannot_differ() -> None:
    assert analyze(job(snap())) == ()


def test_driver_major_difference_is_an_error_naming_both_sides() -> None:
    docs = [snap("node01"), snap("node01"), snap("node02", cuda__driver_version="535.104.05"), snap("node03")]
    f = by_id(analyze(job(*docs)))["CLUSTER-HETERO-DRIVER"]
    assert f.severity == "error" and f.status == "fired" and f.area == "cluster"
    assert "550.54.15 on ranks 0-1,3 (node01, node03); 535.104.05 on rank 2 (node02)" in f.message
    assert "drain rank 2 (node02) or move them to driver 550.54.15" == f.fixes[0].description
    assert f.sources


def test_driver_minor_difference_is_a_warning() -> None:
    f = by_id(analyze(job(snap(), snap("n2", cuda__driver_version="550.90.07"))))["CLUSTER-HETERO-DRIVER"]
    assert f.severity == "warning"


@pytest.mark.parametrize(
    "override, rule_id, pin",
    [
        ({"torch__version": "2.4.0+cu121"}, "CLUSTER-HETERO-TORCH", "torch==2.5.1+cu124"),
        ({"cudnn__loaded": "8.9.7"}, "CLUSTER-HETERO-CUDNN", None),
        ({"packages__flash-attn": "2.5.8"}, "CLUSTER-HETERO-FLASH-ATTN", "flash-attn==2.6.3"),
        ({"packages__transformer-engine": "1.11.0"}, "CLUSTER-HETERO-TE", "transformer-engine==1.12.0"),
        ({"packages__nvidia-nccl-cu12": "2.20.5"}, "CLUSTER-HETERO-NCCL", "nvidia-nccl-cu12==2.21.5"),
        ({"torch__cuda": "12.1"}, "CLUSTER-HETERO-TORCH-CUDA", None),
        ({"cuda__runtime": "12.1.105"}, "CLUSTER-HETERO-CUDA-RUNTIME", None),
        ({"torch__cuda_available": False}, "CLUSTER-HETERO-CUDA-AVAILABLE", None),
    ],
)
def test_stack_differences_are_errors_with_a_pin(override: Dict[str, Any], rule_id: str, pin: Any) -> None:
    docs = [snap("a"), snap("b"), snap("c", **override)]
    f = by_id(analyze(job(*docs)))[rule_id]
    assert f.severity == "error"
    assert "on rank 2 (c)" in f.message and "on ranks 0-1 (a, b)" in f.message
    assert tuple(str(p) for p in f.fixes[0].pins) == ((pin,) if pin else ())


def test_flash_attn_missing_on_one_node() -> None:
    docs = [snap(), snap("n2", **{"packages__flash-attn": None})]
    f = by_id(analyze(job(*docs)))["CLUSTER-HETERO-FLASH-ATTN"]
    assert "flash-attn 2.6.3 on rank 0 (node01); not installed on rank 1 (n2)" in f.message


def test_gpu_model_difference() -> None:
    a100 = [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}]
    f = by_id(analyze(job(snap(), snap("old", gpus=a100))))["CLUSTER-HETERO-GPU"]
    assert f.severity == "error"
    assert "8x NVIDIA H100 80GB HBM3 (sm90)" in f.message and "1x NVIDIA A100-SXM4-80GB (sm80)" in f.message


def test_import_that_fails_on_one_rank() -> None:
    broken = {"flash_attn": {"status": "error", "error": "ImportError: undefined symbol",
                             "cause": "flash-attn built for torch 2.4"}}
    f = by_id(analyze(job(snap(), snap("n2", imports=broken))))["CLUSTER-HETERO-IMPORT"]
    assert f.severity == "error" and "flash-attn built for torch 2.4" in f.message


def test_env_differences_are_warnings_with_the_setting_to_use() -> None:
    docs = [snap(env={"NVTE_FLASH_ATTN": "1", "NCCL_IB_HCA": "mlx5"}),
            snap(env={"NVTE_FLASH_ATTN": "1", "NCCL_IB_HCA": "mlx5"}),
            snap(env={"NVTE_FLASH_ATTN": "0", "NCCL_IB_HCA": "mlx5", "NCCL_ALGO": "Tree"})]
    found = by_id(analyze(job(*docs)))
    nvte, nccl = found["CLUSTER-HETERO-ENV-NVTE"], found["CLUSTER-HETERO-ENV-NCCL"]
    assert nvte.severity == nccl.severity == "warning"
    assert "'1' on ranks 0-1 (node01); '0' on rank 2 (node01)" in nvte.message
    assert dict(nvte.fixes[0].env) == {"NVTE_FLASH_ATTN": "1"}
    assert "unset on ranks 0-1" in nccl.message and nccl.fixes[0].description == "unset NCCL_ALGO on rank 2 (node01)"


def test_per_rank_variables_are_not_compared() -> None:
    docs = [snap(env={"CUDA_VISIBLE_DEVICES": str(i), "TORCHELASTIC_ERROR_FILE": f"/tmp/{i}"}) for i in range(3)]
    assert analyze(job(*docs)) == ()


def test_other_packages_are_one_warning() -> None:
    docs = [snap(), snap("n2", packages__triton="3.0.0", packages__einops="0.8.0")]
    f = by_id(analyze(job(*docs)))["CLUSTER-HETERO-PACKAGES"]
    assert f.severity == "warning"
    assert "triton: 3.1.0 on rank 0" in f.message and "einops: not installed on rank 0" in f.message
    assert "triton==3.1.0" in [str(p) for p in f.fixes[0].pins]


def test_fact_unknown_on_some_ranks_is_not_silently_equal() -> None:
    docs = [snap(), snap(), snap("bad", cuda__driver_version=None,
                                 unknown={"cuda.driver_version": "NVML failed"})]
    found = by_id(analyze(job(*docs)))
    assert "CLUSTER-HETERO-DRIVER" not in found
    f = found["CLUSTER-HETERO-UNKNOWN"]
    assert f.status == "not_evaluated" and "NVIDIA driver" in f.missing
    assert "not known on rank 2 (bad)" in f.message


def test_unknown_beside_a_real_difference_is_mentioned() -> None:
    docs = [snap(), snap("n2", cuda__driver_version="535.1.1"), snap("n3", cuda__driver_version=None)]
    f = by_id(analyze(job(*docs)))["CLUSTER-HETERO-DRIVER"]
    assert "(not known on rank 2 (n3))" in f.message


def test_fleet_view_labels_snapshots_by_file() -> None:
    docs = [("a.json", None, snap("h1")), ("b.json", "h2", snap("ignored", torch__version="2.4.0"))]
    f = by_id(analyze(docs))["CLUSTER-HETERO-TORCH"]
    assert "on snapshot a.json (h1)" in f.message and "on snapshot b.json (h2)" in f.message


def test_errors_come_first_and_input_is_not_modified() -> None:
    docs = [snap(), snap("n2", env={"NVTE_FUSED_ATTN": "0"}, torch__version="2.4.0")]
    before = copy.deepcopy(docs)
    found = analyze(job(*docs))
    severities = [f.severity for f in found]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)
    assert docs == before


def test_ranks_text() -> None:
    assert ranks_text(["0", "1", "2", "5", "7", "8"], ["a"] * 6) == "ranks 0-2,5,7-8 (a)"
    assert ranks_text(["3"], [""]) == "rank 3"
    hosts = [f"n{i}" for i in range(6)]
    assert ranks_text([str(i) for i in range(6)], hosts) == "ranks 0-5 (n0, n1, n2, n3 +2 more)"
