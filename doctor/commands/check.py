"""`attn-doctor check`: probe (or --env), workload, rules, backends, findings, kernels."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from doctor.commands.common import emit
from doctor.commands.options import WORKLOAD_FLAGS_HELP, check_options, parse_workload_flags
from doctor.errors import ExitCode, InputError

def check(
    ctx: typer.Context,
    env: Optional[List[Path]] = typer.Option(
        None, "--env", help="Check this snapshot (JSON/YAML from `probe --format json`) instead of this machine. Repeat (or pass a folder) for a fleet view."
    ),
    workload: Optional[Path] = typer.Option(None, "--workload", "-w", help="Workload file (YAML/JSON)."),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Hugging Face config.json or model folder."),
    config: Optional[List[Path]] = typer.Option(None, "--config", "-c", help="A training config, log or package list, recognised by content: axolotl / LLaMA-Factory / accelerate / NeMo YAML, DeepSpeed JSON, torchtitan TOML, Megatron arguments, TE NVTE_DEBUG log, pip freeze / requirements / uv.lock / poetry.lock (repeatable)."),
    format: str = typer.Option("text", "--format", "-f", help="text | json | markdown | junit"),
    fail_on: str = typer.Option("error", "--fail-on", help="Exit 1 when a finding is at or above: error | warning | info"),
    strict: bool = typer.Option(False, "--strict", help="Count rules that could not be evaluated as failures."),
    no_kernels: bool = typer.Option(False, "--no-kernels", help="Skip the GPU kernel stage."),
    kernels_only: bool = typer.Option(False, "--kernels-only", help="GPU smoke test: run the kernel cases, judge only them."),
    assume: Optional[List[str]] = typer.Option(None, "--assume", help="Evaluate as if `pip install NAME==VERSION` had run: installed packages its requirements exclude move as pip would move them (repeatable)."),
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
    from doctor.report.render import Style, check_format, render

    check_format("check", format)
    if fail_on not in ("error", "warning", "info"):
        raise InputError(f"--fail-on {fail_on!r}", hint="use error, warning or info")
    if timeout <= 0:
        raise InputError(f"--timeout {timeout:g}: must be a positive number of seconds")
    flags = parse_workload_flags(ctx.args, "check")
    style = Style.for_terminal(verbose=verbose, fail_on=fail_on, strict=strict)
    if distributed:
        from doctor.commands.cluster import run_cluster_check

        return run_cluster_check(
            workload_file=workload, model=model, flags=flags, format=format, style=style,
            kernels=not no_kernels, timeout_s=timeout,
        )
    from doctor.report.safe_text import visible

    env_files, skipped = core.expand_env_files(env or [])
    for path, why in skipped:
        sys.stderr.write(f"attn-doctor: skipped {visible(str(path))}: {visible(why)}\n")
    opts = check_options(
        env=env_files, workload=workload, model=model, extra_args=ctx.args, assume=assume, command="check",
        assume_env=assume_env, rules_dir=rules_dir, static=static, configs=tuple(config or ()), kernels=not no_kernels, kernels_only=kernels_only,
    )
    observer = None
    if format == "text" and style.color:
        from doctor.commands.progress import RichProgress

        observer = RichProgress()
    report = core.run_check(opts, observer)
    emit(render("check", format, report, style))
    return int(ExitCode.FINDINGS if core.fail_count(report, fail_on, strict) else ExitCode.OK)


check_context = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": ["-h", "--help"]}
check_epilog = WORKLOAD_FLAGS_HELP
