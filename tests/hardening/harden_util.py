"""Helpers for the hardening tests (issue 10): a bounded CLI subprocess, seed files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple


ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "docs" / "examples" / "seeds"
SEED003 = SEEDS / "003-te-mla-a100-no-backend.snapshot.json"
WORKLOAD003 = SEEDS / "003-te-mla-a100-no-backend.workload.yaml"

Result = Tuple[int, str, str]


def run_bounded(args: list, tmp_path: Path, *, timeout: float = 120, mem_bytes: Optional[int] = None,
                env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """`python -m doctor ARGS` in a child with a wall-clock limit and, optionally, an address-space
    limit (so an unbounded read fails fast instead of eating the machine)."""

    def limit() -> None:
        if mem_bytes is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))

    return subprocess.run(
        [sys.executable, "-m", "doctor", *[str(a) for a in args]],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=timeout,
        preexec_fn=limit,
        env={**os.environ, "NO_COLOR": "1", "XDG_CACHE_HOME": str(tmp_path / "cache"),
             "PYTHONPATH": str(ROOT), **(env or {})},
    )


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    return lines[0]


def seed_doc(name: str = "003-te-mla-a100-no-backend") -> Dict[str, Any]:
    return json.loads((SEEDS / f"{name}.snapshot.json").read_text())
