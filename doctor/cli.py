"""The typer app. Each command parses flags, calls doctor.app, renders, returns an exit code.

Nothing here does real work: see doctor/app.py for orchestration. `main()` is the single
error boundary: a DoctorError becomes one line on stderr and its exit code; anything else is
an internal error (exit 3) with a short note on how to report it.
"""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from doctor.errors import DoctorError, ExitCode

app = typer.Typer(
    name="attn-doctor",
    help="Diagnose the attention stack (torch, CUDA, cuDNN, flash-attn, TransformerEngine, "
    "transformers) before training starts.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

from doctor.commands.check import check, check_context, check_epilog  # noqa: E402
from doctor.commands.probe import probe  # noqa: E402
from doctor.commands.rules import rules_app  # noqa: E402

app.command(context_settings=check_context, epilog=check_epilog)(check)
app.command()(probe)
app.add_typer(rules_app, name="rules")


@app.callback()
def _root() -> None:
    """Diagnose the attention stack before training starts."""


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
