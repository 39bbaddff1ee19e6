"""JSON output: stable key order, UTF-8, no ANSI, trailing newline added by the CLI."""

from __future__ import annotations

import json
from typing import Any


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False, default=str)
