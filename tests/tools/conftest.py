"""Loading a developer tool (tools/NAME.py, not part of the installed package) as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def load_tool(name: str) -> Any:
    """tools/NAME.py as a fresh module (its folder on sys.path, for the tools' shared helpers)."""
    path = TOOLS / f"{name}.py"
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    spec = importlib.util.spec_from_file_location(f"attn_doctor_{name}_tool_t", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
