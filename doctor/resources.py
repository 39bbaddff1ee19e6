"""Where the shipped data lives: the rule catalogue and the kernel worker.

In a wheel they are package data under doctor/_data/; in a source checkout (editable install,
tests) they are the top-level rules/ and kernels/ folders next to the doctor package.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    installed = _PKG / "_data" / name
    if installed.is_dir():
        return installed
    return _PKG.parent / name


def rules_dir() -> Path:
    return data_dir("rules")


def kernels_dir() -> Path:
    return data_dir("kernels")
