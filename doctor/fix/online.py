"""`fix --online`: ask pip itself whether the plan's pins resolve on the index.

    pip install --dry-run --report - --only-binary=:all: --target <tmp>
                --python-version X.Y --platform manylinux_2_28_x86_64 "A[x]==1" ...

--only-binary=:all: keeps pip from building anything (an sdist such as TE's torch extension or
flash-attn is left out and reported as not checked); --target with an explicit Python and
platform resolves for the planned environment, not for the Python running the doctor. This
checks the pins together with everything they require on the index; the installed set of a
snapshot is the offline resolver's job (doctor.fix.resolve).
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from doctor.model import Pin

Runner = Callable[[Sequence[str]], Tuple[int, str, str]]


def _run(argv: Sequence[str]) -> Tuple[int, str, str]:
    """pip, through the probe's subprocess runner (a timeout kills pip's whole process group)."""
    from doctor.probe.sources import run_command

    r = run_command(argv, timeout=600)
    return (1 if r.returncode is None else r.returncode), r.stdout, r.stderr or (r.error or "")


@dataclass(frozen=True)
class PipVerdict:
    ok: Optional[bool]  # None: pip could not be asked
    checked: Tuple[str, ...]
    skipped: Tuple[str, ...]  # builds from source: not asked
    message: str


def pip_dry_run(pins: Sequence[Pin], sdists: Sequence[str], python: Optional[str], run: Runner = _run) -> PipVerdict:
    asked = [p for p in pins if p.name not in sdists]
    skipped = tuple(str(p) for p in pins if p.name in sdists)
    if not asked:
        return PipVerdict(None, (), skipped, "every pin builds from source: pip was not asked")
    with tempfile.TemporaryDirectory(prefix="attn-doctor-pip-") as tmp:
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", "--only-binary=:all:",
                "--target", tmp, "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64"]
        if python:
            argv += ["--python-version", python]
        argv += [str(p) for p in asked]
        rc, out, err = run(argv)
    if rc == 0:
        try:
            n = len(json.loads(out).get("install", []))
        except ValueError:
            n = 0
        return PipVerdict(True, tuple(str(p) for p in asked), skipped, f"pip resolves {' '.join(str(p) for p in asked)} ({n} distributions, nothing built)")
    last = [line for line in (err or out).splitlines() if line.strip() and not line.startswith("WARNING:")]
    return PipVerdict(False, tuple(str(p) for p in asked), skipped, "pip: " + (" ".join(last[-3:]) if last else f"exit {rc}"))


def sdist_packages(kinds: List[Tuple[str, Optional[str]]]) -> List[str]:
    return [name for name, kind in kinds if kind == "sdist"]
