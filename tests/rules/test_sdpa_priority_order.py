"""torch 2.0/2.1 pick SDPA's kernel in a shape-dependent order (priority_order, read in the linux
wheels' select_sdp_backend of 2.0.0, 2.0.1, 2.1.0 and 2.1.2; 2.2.0 has one constant order): the
backend table must show the kernel torch runs, not flash by default."""

from __future__ import annotations

from typing import Any, Dict

import pytest

from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalogue(use_cache=False)


def _chosen(cat, torch: str, wl: Dict[str, Any]) -> str:  # type: ignore[no-untyped-def]
    facts, workload = case_inputs({"packages": {"torch": torch}, "torch": {"version": torch, "cuda": "12.1"}, "gpu": "8.0",
                                   "workload": {"dtype": "fp16", **wl}})
    d = diagnose(cat, facts, workload)
    return next(b.id for b in d.backends if b.framework == "torch-sdpa" and b.selected)


@pytest.mark.parametrize("torch, wl, chosen", [
    # 2.0: memory-efficient first for head_dim 128 ...
    ("2.0.0", {"head_dim": 128, "num_heads": 32, "batch_size": 4, "seq_len": 4096}, "sdpa.efficient"),
    ("2.0.1", {"head_dim": 128, "num_heads": 32, "batch_size": 4, "seq_len": 4096, "training": False}, "sdpa.efficient"),
    # ... or below 60 batch x heads with at least 128 queries
    ("2.0.1", {"head_dim": 64, "num_heads": 32, "batch_size": 1, "seq_len": 128}, "sdpa.efficient"),
    ("2.0.1", {"head_dim": 64, "num_heads": 32, "batch_size": 1, "seq_len": 127}, "sdpa.flash"),
    ("2.0.1", {"head_dim": 64, "num_heads": 30, "num_kv_heads": 30, "batch_size": 2, "seq_len": 4096}, "sdpa.flash"),  # 60
    ("2.0.1", {"head_dim": 64, "num_heads": 59, "num_kv_heads": 59, "batch_size": 1, "seq_len": 4096}, "sdpa.efficient"),
    # 2.1 training: memory-efficient first when 6 x batch x heads > seq_len_q
    ("2.1.2", {"head_dim": 128, "num_heads": 32, "batch_size": 1, "seq_len": 192, "training": True}, "sdpa.flash"),
    ("2.1.2", {"head_dim": 128, "num_heads": 32, "batch_size": 1, "seq_len": 191, "training": True}, "sdpa.efficient"),
    # 2.1 inference: 2.0's test
    ("2.1.0", {"head_dim": 128, "num_heads": 32, "batch_size": 4, "seq_len": 4096, "training": False}, "sdpa.efficient"),
    ("2.1.0", {"head_dim": 64, "num_heads": 32, "batch_size": 4, "seq_len": 4096, "training": False}, "sdpa.flash"),
    # 2.2: flash first whatever the shape
    ("2.2.0", {"head_dim": 128, "num_heads": 32, "batch_size": 1, "seq_len": 128, "training": False}, "sdpa.flash"),
    ("2.2.0", {"head_dim": 128, "num_heads": 32, "batch_size": 1, "seq_len": 128, "training": True}, "sdpa.flash"),
])
def test_torch_2_0_and_2_1_order_depends_on_the_shape(cat, torch: str, wl: Dict[str, Any], chosen: str) -> None:  # type: ignore[no-untyped-def]
    assert _chosen(cat, torch, wl) == chosen
