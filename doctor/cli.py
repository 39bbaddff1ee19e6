"""The typer app. Each command parses flags, calls doctor.app, renders, returns an exit code.

Nothing here does real work: see doctor/app.py for orchestration. `main()` is the single
error boundary: a DoctorError becomes one line on stderr and its exit code; anything else is
an internal error (exit 3) with a short note on how to report it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from doctor.errors import DoctorError, ExitCode, InputError

app = typer.Typer(
    name="attn-doctor",
    help="Diagnose the attention stack (torch, CUDA, cuDNN, flash-attn, TransformerEngine, "
    "transformers) before training starts.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

FORMATS_PROBE = ("text", "json")


def _emit(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


@app.command()
def probe(
    format: str = typer.Option("text", "--format", "-f", help="text | json"),
    env: Optional[Path] = typer.Option(
        None, "--env", help="Read facts from this snapshot (JSON/YAML) instead of probing."
    ),
    no_child: bool = typer.Option(
        False, "--static", help="Static facts only: do not start a Python child to import torch."
    ),
) -> None:
    """Show what is installed and loaded: GPUs, driver, CUDA, cuDNN, attention libraries."""
    from doctor import app as core

    if format not in FORMATS_PROBE:
        raise InputError(f"unknown format {format!r}", hint="use one of: text, json")
    doc = core.probe_snapshot(env_file=env, loaded=not no_child)
    if format == "json":
        from doctor.report.json_report import dumps

        _emit(dumps(doc))
    else:
        from doctor.report.probe_text import render_probe

        _emit(render_probe(doc))


def main(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point: the one error boundary."""
    try:
        rv = app(args=argv, standalone_mode=False)
    except DoctorError as exc:
        sys.stderr.write(f"attn-doctor: error: {exc.one_line()}\n")
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        sys.stderr.write("attn-doctor: interrupted\n")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # click usage errors are handled below; anything else is a bug
        import click

        if isinstance(exc, click.exceptions.UsageError):
            msg = exc.format_message()
            sys.stderr.write(f"attn-doctor: usage error: {msg} (see `attn-doctor --help`)\n")
            sys.exit(int(ExitCode.USAGE))
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(130)
        if isinstance(exc, click.exceptions.Exit):
            sys.exit(exc.exit_code)
        sys.stderr.write(
            f"attn-doctor: internal error: {type(exc).__name__}: {exc} "
            "(please report this with `attn-doctor probe --format json`)\n"
        )
        sys.exit(int(ExitCode.INTERNAL))
    sys.exit(int(rv or 0))
