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
    from doctor.report.render import Style, check_format, render

    check_format("probe", format)
    if child_timeout is not None and child_timeout <= 0:
        raise InputError("--child-timeout must be positive")
    opts = core.ProbeOptions(static=static, no_cache=no_cache, child_timeout=child_timeout)
    doc = core.run_probe(opts, env_file=env)
    emit(render("probe", format, doc, Style.for_terminal()))
    return int(ExitCode.OK)
