"""The installed torch build, read as text: torch/version.py and the wheel's Requires-Dist.

torch is never imported here (that costs a second or more and may crash); the loaded facts
come from the child process instead (doctor/probe/child.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

from doctor.probe.packages import PackageScan, exact_pins, requires

_ASSIGN = re.compile(r"^(\w+)\s*(?::[^=]*)?=\s*(.+?)\s*$")
_STRING = re.compile(r"""^(?:[rbuRBU]{0,2})(['"])(.*)\1$""")


@dataclass(frozen=True)
class TorchBuild:
    version: Optional[str]
    cuda: Optional[str]
    hip: Optional[str]
    git_version: Optional[str]
    version_file: Optional[str]  # where the values came from
    metadata: Optional[str]  # the dist-info METADATA that gave `pins`
    pins: Mapping[str, str]  # exact pins in Requires-Dist: nvidia-cudnn-cu12 -> 9.1.0.70
    site_dir: str  # the sys.path entry that holds torch

    def pin_for(self, prefix: str) -> Optional[Tuple[str, str]]:
        """The first pinned distribution whose name starts with `prefix`, as (name, version)."""
        for name, version in self.pins.items():
            if name.startswith(prefix):
                return name, version
        return None


def parse_version_file(text: str) -> Dict[str, Optional[str]]:
    """Top-level `name = 'literal'` / `name: Optional[str] = None` assignments of version.py."""
    values: Dict[str, Optional[str]] = {}
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if not m:
            continue
        name, rhs = m.group(1), m.group(2)
        if rhs == "None":
            values[name] = None
            continue
        s = _STRING.match(rhs)
        if s:
            values[name] = s.group(2)
    return values


def read(scan: PackageScan) -> Optional[TorchBuild]:
    """The torch that `import torch` would find on the scanned path, or None if there is none."""
    dist = scan.dists.get("torch")
    module = scan.modules.get("torch")
    if dist is None and module is None:
        return None
    # import resolves the package by path order; prefer that copy's version.py
    pkg_dir = os.path.dirname(module) if module else dist.site_dir  # type: ignore[union-attr]
    version_file = Path(pkg_dir, "torch", "version.py")
    values: Dict[str, Optional[str]] = {}
    found_file: Optional[str] = None
    try:
        values = parse_version_file(version_file.read_text(encoding="utf-8", errors="replace"))
        found_file = str(version_file)
    except OSError:
        pass
    pins: Dict[str, str] = {}
    if dist is not None:
        pins = exact_pins(requires(dist))
    version = values.get("__version__") or (dist.version if dist else None)
    return TorchBuild(
        version=version,
        cuda=values.get("cuda"),
        hip=values.get("hip"),
        git_version=values.get("git_version"),
        version_file=found_file,
        metadata=str(dist.metadata) if dist else None,
        pins=pins,
        site_dir=os.path.abspath(pkg_dir),
    )
