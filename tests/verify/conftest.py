"""Fixtures for the kernel tests: the worker's sibling modules loaded by path (kernels/ is
data shipped with the wheel, not an importable package) and a one-shot worker runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Callable, Dict, List

import pytest

from doctor.resources import kernels_dir

NO_TORCH = {"ATTN_DOCTOR_WORKER_SELFTEST": "1", "ATTN_DOCTOR_WORKER_NO_TORCH": "1"}


@pytest.fixture(scope="session")
def kref() -> Any:
    """kernels/reference.py as a module (needs torch)."""
    pytest.importorskip("torch")
    path = str(kernels_dir())
    if path not in sys.path:
        sys.path.insert(0, path)
    import reference

    return reference


@pytest.fixture
def worker() -> Callable[..., List[Dict[str, Any]]]:
    """Run worker.py once with a document on stdin; return its protocol events."""

    def run(doc: Dict[str, Any], env: Dict[str, str], timeout: float = 120) -> List[Dict[str, Any]]:
        proc = subprocess.run([sys.executable, str(kernels_dir() / "worker.py")],
                              input=json.dumps(doc).encode(), capture_output=True,
                              timeout=timeout, env={**os.environ, **env})
        return [json.loads(ln) for ln in proc.stdout.decode().splitlines() if ln.strip()]

    return run
