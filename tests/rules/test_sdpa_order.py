"""Which SDPA backend torch tries first, per release and build (rules/backends/torch_sdpa.yaml).

torch 2.9 put cuDNN attention first on sm90/sm100 (#162073), but PyPI's CUDA 12.8 wheels were
compiled against cuDNN 9.8, below the 9.9 the preference needs, so they keep flash first on
every GPU (#165801). A user on those wheels must not be told cuDNN runs.
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalogue(use_cache=False)


def _picked(cat: Any, torch: str, cuda: str, gpu: str, env: Optional[dict] = None) -> Optional[str]:
    facts, workload = case_inputs({"packages": {"torch": torch}, "torch": {"version": torch, "cuda": cuda}, "gpu": gpu,
                                   "cudnn": {"version": "9.10.2"}, "env": env or {}, "workload": {"seq_len": 4096}})
    return dict(diagnose(cat, facts, workload).selections).get("torch-sdpa")


def test_torch_2_9_cuda_12_8_wheels_keep_flash_first(cat) -> None:  # type: ignore[no-untyped-def]
    assert _picked(cat, "2.9.1", "12.8", "9.0") == "sdpa.flash"
    assert _picked(cat, "2.9.0", "12.8", "10.0") != "sdpa.cudnn"


def test_other_torch_2_9_builds_prefer_cudnn_on_hopper(cat) -> None:  # type: ignore[no-untyped-def]
    assert _picked(cat, "2.9.1", "13.0", "9.0") == "sdpa.cudnn"
    assert _picked(cat, "2.9.1", "13.0", "9.0", {"TORCH_CUDNN_SDPA_PREFERRED": "0"}) == "sdpa.flash"
    assert _picked(cat, "2.9.1", "13.0", "8.0") == "sdpa.flash"
