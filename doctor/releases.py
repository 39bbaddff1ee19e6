"""The release catalogue: real versions the doctor may pin, and what each torch wheel bundles.

Data lives in rules/releases/*.json (shipped in the wheel). Lookups are cached per process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Dict, Optional

from doctor.resources import rules_dir


@dataclass(frozen=True)
class TorchBundle:
    """What a default PyPI torch wheel pins exactly (Requires-Dist)."""

    version: str
    cuda: Optional[str]
    cudnn_dist: Optional[str]
    cudnn: Optional[str]
    nccl: Optional[str] = None
    triton: Optional[str] = None


@lru_cache(maxsize=None)
def _load(name: str) -> Dict[str, Any]:
    path = rules_dir() / "releases" / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def torch_bundle(version: str) -> Optional[TorchBundle]:
    """The bundle of the default PyPI wheel of this torch release (local label ignored;
    an x.y.z that is not in the table falls back to the newest patch of x.y listed)."""
    from doctor.rules.conditions import parse_version

    v = parse_version(version)
    if v is None:
        return None
    rows = _load("torch").get("torch", [])
    exact = [r for r in rows if r["version"] == v.base_version]
    same_minor = [r for r in rows if r["version"].split(".")[:2] == v.base_version.split(".")[:2]]
    row = (exact or same_minor or [None])[-1]
    if row is None:
        return None
    return TorchBundle(
        version=row["version"],
        cuda=row.get("cuda"),
        cudnn_dist=row.get("cudnn_dist"),
        cudnn=row.get("cudnn"),
        nccl=row.get("nccl"),
        triton=row.get("triton"),
    )
