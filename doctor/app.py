"""Orchestration: probe() / check() / fix() return plain data and never print."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional


def probe_snapshot(env_file: Optional[Path] = None, loaded: bool = True) -> Dict[str, Any]:
    """The snapshot document: read from `env_file`, or probed from this machine."""
    if env_file is not None:
        from doctor.snapshot import load_snapshot

        return load_snapshot(env_file)
    from doctor.probe import collect

    return collect(loaded=loaded)
