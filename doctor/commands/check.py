"""`attn-doctor check`: probe (or --env), workload, rules, backends, findings, kernels."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from doctor.commands.common import emit
from doctor.commands.options import WORKLOAD_FLAGS_HELP, parse_workload_flags
from doctor.errors import ExitCode, InputError

FORMATS = ("text", "json", "markdown", "junit")


def use_color() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def check(
    ctx: typer.Context,
    env: Optional[List[Path]] = typer.Option(
        None, "--env", help="Check this snapshot (JSON/YAML from `probe --format json`) instead of this machine. Repeat (or pass a folder) for a fleet view."
    ),
    workload: Optional[Path] = typer.Option(None, "--workload", "-w", help="Workload file (YAML/JSON)."),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Hugging Face config.json or model folder."),
    format: str = typer.Option("text", "--format", "-f", help="text | json | markdown | junit"),
    fail_on: str = typer.Option("error", "--fail-on", help="Exit 1 when a finding is at or above: error | warning | info"),
    strict: bool = typer.Option(False, "--strict", help="Count rules that could not be evaluated as failures."),
    no_kernels: bool = typer.Option(False, "--no-kernels", help="Skip the GPU kernel stage."),
    kernels_only: bool = typer.Option(False, "--kernels-only", help="GPU smoke test: run the kernel cases, judge only them."),
    assume: Optional[List[str]] = typer.Option(None, "--assume", help="Evaluate as if NAME==VERSION were installed (repeatable)."),
    assume_env: Optional[List[str]] = typer.Option(None, "--assume-env", help="Evaluate as if NAME=VALUE were set (repeatable)."),
    rules_dir: Optional[List[Path]] = typer.Option(None, "--rules-dir", help="Add your own rules (same schema)."),
    distributed: bool = typer.Option(False, "--distributed", help="Run on every rank of a torchrun/srun job; rank 0 reports."),
    timeout: float = typer.Option(300.0, "--timeout", help="--distributed: seconds per stage (join, probe, each collective) before a rank is reported missing."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Every backend with its reasons; rules not evaluated."),
    static: bool = typer.Option(False, "--static", help="Static facts only: no child process that imports torch (faster, but import failures go unseen)."),
) -> int:
    """Diagnose this environment (or a snapshot) for a workload.

    Exit codes: 0 nothing at or above --fail-on, 1 findings, 2 usage or input error, 3 internal
    error, 4 (--distributed) a rank did not answer."""
    from doctor import app as core

    if format not in FORMATS:
        raise InputError(f"unknown format {format!r}", hint="use one of: " + ", ".join(FORMATS))
    if fail_on not in ("error", "warning", "info"):
        raise InputError(f"--fail-on {fail_on!r}", hint="use error, warning or info")
    if timeout <= 0:
        raise InputError(f"--timeout {timeout:g}: must be a positive number of seconds")
    flags = parse_workload_flags(ctx.args, "check")
    env_files = _expand_env(env or [])
    if kernels_only and (no_kernels or env_files or assume or assume_env):
        raise InputError("--kernels-only runs kernels here: it cannot be combined with --no-kernels, --env or --assume")
    if distributed:
        from doctor.commands.cluster import run_cluster_check

        return run_cluster_check(
            workload_file=workload, model=model, flags=flags, format=format, fail_on=fail_on,
            strict=strict, kernels=not no_kernels, verbose=verbose, timeout_s=timeout,
        )
    inputs = core.load_inputs(
        env_files=env_files,
        workload_file=workload,
        model=model,
        workload_flags=flags,
        assume=assume or [],
        assume_env=assume_env or [],
        rules_dirs=rules_dir or [],
        loaded=not static,  # the torch-importing child (its result is cached for an hour)
    )
    kernel_run, skipped = None, None
    if no_kernels:
        skipped = "--no-kernels"
    elif env_files:
        skipped = "facts come from a snapshot: kernels run only where the GPU is"
    elif inputs.pins or inputs.env_changes:
        skipped = "--assume: the kernels would test what is installed, not what is assumed"
    else:
        kernel_run, skipped = _run_kernels(inputs, quiet=format != "text" or not use_color())
    if len(env_files) > 1:
        report = core.check_fleet(inputs, env_files)
    else:
        report = core.check(inputs, kernel_run=kernel_run, kernels_skipped=skipped)
    if kernels_only:
        if kernel_run is None:  # a GPU smoke test that ran nothing must not pass
            raise InputError(f"--kernels-only: no kernel could run here ({skipped})", hint="run it on a machine with a CUDA GPU and torch")
        report = core.kernels_only(report)
    emit(_render(report, format, fail_on, strict, verbose))
    return int(ExitCode.FINDINGS if core.fail_count(report, fail_on, strict) else ExitCode.OK)


def _render(report, format: str, fail_on: str, strict: bool, verbose: bool) -> str:  # type: ignore[no-untyped-def]
    if format == "json":
        from doctor.report.check_json import render_check_json

        return render_check_json(report)
    if format == "markdown":
        from doctor.report.check_markdown import render_check_markdown

        return render_check_markdown(report)
    if format == "junit":
        from doctor.report.check_junit import render_check_junit

        return render_check_junit(report, fail_on=fail_on, strict=strict)
    from doctor.report.check_text import render_check

    width = 100
    try:
        width = max(80, min(os.get_terminal_size().columns, 160)) if sys.stdout.isatty() else 100
    except OSError:
        pass
    return render_check(report, verbose=verbose, color=use_color(), width=width, fail_on=fail_on, strict=strict)


def _expand_env(paths: List[Path]) -> List[Path]:
    from doctor.fleet import expand_env

    files, skipped = expand_env(paths)
    for path, why in skipped:
        sys.stderr.write(f"attn-doctor: skipped {path}: {why}\n")
    return files


def _run_kernels(inputs, quiet: bool):  # type: ignore[no-untyped-def]
    """Run the kernel cases when torch with CUDA and a GPU are present; else say why not."""
    from doctor import verify
    from doctor.rules.evaluate import diagnose

    ok, reason = verify.kernels_available(inputs.facts)
    if not ok:
        return None, reason
    statuses = diagnose(inputs.catalogue, inputs.facts, inputs.workload).backends
    installed = {b.id for b in statuses if "library not installed" not in b.reasons}
    if "sdpa.math" in installed:
        installed.add("sdpa.flex")
    given = inputs.workload if "head_dim_qk" not in inputs.workload.defaulted else None
    cases = verify.plan_cases(given, installed)
    observer = None
    if not quiet:
        from doctor.commands.progress import RichProgress

        observer = RichProgress()
    return verify.run_cases(cases, observer=observer), None


check_context = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": ["-h", "--help"]}
check_epilog = WORKLOAD_FLAGS_HELP
