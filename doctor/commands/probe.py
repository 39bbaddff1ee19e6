"""`attn-doctor probe`: what is installed and loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from doctor.commands.common import emit
from doctor.errors import ExitCode, InputError


def probe(
    format: str = typer.Option("text", "--format", "-f", help="text | json"),
    env: Optional[Path] = typer.Option(
        None, "--env", help="Read facts from this snapshot (JSON/YAML) instead of probing."
    ),
    static: bool = typer.Option(
        False, "--static", help="Static facts only: no Python child that imports torch."
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="Re-run the torch-importing child even if a cached result fits."),
    child_timeout: Optional[float] = typer.Option(None, "--child-timeout", help="Seconds to wait for the torch-importing child (default 20)."),
) -> int:
    """Show what is installed and loaded: GPUs, driver, CUDA, cuDNN, attention libraries."""
    from doctor import app as core

    if format not in ("text", "json"):
        raise InputError(f"unknown format {format!r}", hint="use one of: text, json")
    import os

    if no_cache:
        os.environ["ATTN_DOCTOR_NO_CACHE"] = "1"
    if child_timeout is not None:
        if child_timeout <= 0:
            raise InputError("--child-timeout must be positive")
        os.environ["ATTN_DOCTOR_CHILD_TIMEOUT"] = str(child_timeout)
    doc = core.probe_snapshot(env_file=env, loaded=not static)
    if format == "json":
        from doctor.report.json_report import dumps

        emit(dumps(doc))
    else:
        from doctor.report.probe_text import render_probe

        emit(render_probe(doc))
    return int(ExitCode.OK)
