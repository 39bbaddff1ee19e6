"""Small helpers shared by the command modules."""

from __future__ import annotations

import sys


def emit(text: str) -> None:
    """Write a rendered report to stdout with exactly one trailing newline."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
