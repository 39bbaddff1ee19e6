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
    context_settings={"help_option_names": ["-h", "--help"]},
)

from doctor.commands.check import check, check_context, check_epilog  # noqa: E402
from doctor.commands.fix import fix, fix_context, fix_epilog  # noqa: E402
from doctor.commands.probe import probe  # noqa: E402
from doctor.commands.releases import releases_app  # noqa: E402
from doctor.commands.rules import rules_app  # noqa: E402

app.command(context_settings=check_context, epilog=check_epilog)(check)
app.command()(probe)
app.command(context_settings=fix_context, epilog=fix_epilog)(fix)
app.add_typer(releases_app, name="releases")
app.add_typer(rules_app, name="rules")


def _version(value: bool) -> None:
    if value:
        from doctor import __version__

        sys.stdout.write(f"attn-doctor {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Diagnose the attention stack before training starts."""


def main(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point: the one error boundary."""
    try:
        rv = app(args=argv, standalone_mode=False)
    except DoctorError as exc:
        from doctor.report.safe_text import visible

        sys.stderr.write(f"attn-doctor: error: {visible(exc.one_line())}\n")
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        sys.stderr.write("attn-doctor: interrupted\n")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - the one boundary
        # click (vendored by newer typer as typer._click): match its exceptions by class name
        kinds = {k.__name__ for k in type(exc).__mro__}
        if "UsageError" in kinds:
            msg = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            if not msg.strip():  # bare `attn-doctor` (or a group without its subcommand): help was printed
                sys.stderr.write(
                    "attn-doctor: no command given (pick one of the commands listed above; "
                    "`attn-doctor check` diagnoses this machine)\n"
                )
                sys.exit(int(ExitCode.USAGE))
            sys.stderr.write(f"attn-doctor: usage error: {msg} (see `attn-doctor --help`)\n")
            sys.exit(int(ExitCode.USAGE))
        if "Abort" in kinds:
            sys.exit(130)
        if "Exit" in kinds:
            sys.exit(int(getattr(exc, "exit_code", 0)))
        sys.stderr.write(
            f"attn-doctor: internal error: {type(exc).__name__}: {exc} "
            "(please report this with `attn-doctor probe --format json`)\n"
        )
        sys.exit(int(ExitCode.INTERNAL))
    sys.exit(int(rv or 0))
