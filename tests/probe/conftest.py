"""Probe test fixtures: an empty fake site-packages folder per test."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def site(tmp_path: Path) -> Path:
    d = tmp_path / "site-packages"
    d.mkdir()
    return d
