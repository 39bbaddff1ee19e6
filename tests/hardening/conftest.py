"""Fixtures for the hardening tests (issue 10): the CLI run in-process, the cache in a temp dir."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Tuple

import pytest

Result = Tuple[int, str, str]


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One temp cache for these tests: the rule catalogue is compiled once, not per test."""
    return tmp_path_factory.mktemp("hardening-cache")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, shared_cache: Path) -> Callable[..., Result]:
    """Run `attn-doctor ARGS` in this process: (exit code, stdout, stderr)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared_cache))
    monkeypatch.setenv("NO_COLOR", "1")

    def run(*args: str) -> Result:
        from doctor.cli import main

        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main([str(a) for a in args])
        out, err = capsys.readouterr()
        code = exc.value.code
        return (code if isinstance(code, int) else 0 if code is None else 1), out, err

    return run
