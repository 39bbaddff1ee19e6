"""Shared fixtures: the shipped rule catalogue and release catalogue, and seed facts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Mapping

import pytest

from doctor.releases.catalogue import ReleaseCatalogue, load_release_catalogue
from doctor.rules.loader import Catalogue, load_catalogue

SEEDS = (
    "TE-CP-FLASH-ATTN-SOFTCAP",
    "TE-CP-ALLGATHER-CUDNN-LT-9-3",
    "XTUNER-01-TRANSFORMERS-FA-FORWARD",
    "TE-NO-BACKEND",
    "TE-FUSED-STRIDED-GQA-QKV",
)


@pytest.fixture(scope="session")
def cat() -> Catalogue:
    return load_catalogue(use_cache=False)


@pytest.fixture(scope="session")
def rel() -> ReleaseCatalogue:
    return load_release_catalogue()


def snapshot_of(case: Mapping[str, Any]) -> Dict[str, Any]:
    """A rule test case as a snapshot document (what `--env FILE` reads)."""
    from doctor.rules.cases import case_snapshot

    return case_snapshot(case)


def write_snapshot(tmp: Path, case: Mapping[str, Any], name: str = "snap.json") -> Path:
    path = tmp / name
    path.write_text(json.dumps(snapshot_of(case)), encoding="utf-8")
    return path
