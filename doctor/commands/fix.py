"""`attn-doctor fix`: one verified plan of pins, environment settings and config changes that
clears the error and warning findings; `--pin` writes the pins to a requirements file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from doctor.commands.common import emit
from doctor.commands.options import WORKLOAD_FLAGS_HELP, check_options
from doctor.errors import ExitCode, InputError

if TYPE_CHECKING:
    from doctor.fix.plan import FixPlan

def fix(
    ctx: typer.Context,
    env: Optional[List[Path]] = typer.Option(None, "--env", help="Plan for this snapshot (JSON/YAML from `probe --format json`) instead of this machine."),
    workload: Optional[Path] = typer.Option(None, "--workload", "-w", help="Workload file (YAML/JSON)."),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Hugging Face config.json or model folder."),
    config: Optional[List[Path]] = typer.Option(None, "--config", "-c", help="A training config, log or package list, recognised by content: axolotl / LLaMA-Factory / accelerate / NeMo YAML, DeepSpeed JSON, torchtitan TOML, Megatron arguments, TE NVTE_DEBUG log, pip freeze / requirements / uv.lock / poetry.lock (repeatable)."),
    format: str = typer.Option("text", "--format", "-f", help="text | json | markdown"),
    assume: Optional[List[str]] = typer.Option(None, "--assume", help="Plan as if `pip install NAME==VERSION` had run: installed packages its requirements exclude move as pip would move them (repeatable)."),
    assume_env: Optional[List[str]] = typer.Option(None, "--assume-env", help="Plan as if NAME=VALUE were set (repeatable)."),
    rules_dir: Optional[List[Path]] = typer.Option(None, "--rules-dir", help="Add your own rules (same schema)."),
    releases: Optional[Path] = typer.Option(None, "--releases", help="Release catalogue folder (from `releases refresh --output`)."),
    pin: bool = typer.Option(False, "--pin", help="Write the pins to a requirements file (-o)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="File for --pin (default requirements-attn.txt, or constraints-attn.txt with --constraints)."),
    constraints: bool = typer.Option(False, "--constraints", help="Write a constraints file (for pip -c): no extras."),
    dry_run: bool = typer.Option(False, "--dry-run", help="With --pin: show the diff, write nothing."),
    static: bool = typer.Option(False, "--static", help="Static facts only: no Python child that imports torch."),
    online: bool = typer.Option(False, "--online", help="Also ask pip (install --dry-run --report, wheels only, nothing built) whether the pins resolve on the index."),
) -> int:
    """Plan the least change that clears the findings. Exit 0 when every finding has a fix in the
    plan, 1 when some are unresolved, 2 on bad input or a file that cannot be written."""
    from doctor import app as core
    from doctor.report.render import Style, check_format, render

    check_format("fix", format)
    if (output or constraints or dry_run) and not pin:
        raise InputError("--output, --constraints and --dry-run go with --pin", hint="add --pin")
    opts = core.FixOptions(
        check=check_options(
            env=env or (), workload=workload, model=model, extra_args=ctx.args, assume=assume, command="fix",
            assume_env=assume_env, rules_dir=rules_dir, static=static, configs=tuple(config or ()), releases=releases,
        ),
        verify_args=tuple(_input_args(env, workload, model, rules_dir, ctx.args, assume, assume_env, config)),
        online=online,
    )
    plan = core.run_fix(opts)
    emit(render("fix", format, plan, Style.for_terminal()))
    if pin:
        _write_pins(plan, output or Path("constraints-attn.txt" if constraints else "requirements-attn.txt"), constraints, dry_run, format)
    return int(ExitCode.FINDINGS if plan.unresolved else ExitCode.OK)


def _input_args(
    env: Optional[List[Path]],
    workload: Optional[Path],
    model: Optional[Path],
    rules_dir: Optional[List[Path]],
    flags: List[str],
    assume: Optional[List[str]] = None,
    assume_env: Optional[List[str]] = None,
    config: Optional[List[Path]] = None,
) -> List[str]:
    """The user's own inputs, so the printed re-check command checks the same environment."""
    import shlex

    args: List[str] = []
    for flag, values in (
        ("--env", env or []),
        ("--workload", [workload] if workload else []),
        ("--model", [model] if model else []),
        ("--config", config or []),
        ("--rules-dir", rules_dir or []),
        ("--assume", assume or []),
        ("--assume-env", assume_env or []),
    ):
        args += [f"{flag} {shlex.quote(str(v))}" for v in values]
    return args + [shlex.quote(a) for a in flags]


def _write_pins(plan: "FixPlan", path: Path, constraints: bool, dry_run: bool, format: str) -> None:
    """Write (or diff) the pin file; messages go to stderr so --format json stays parseable."""
    from doctor.fix.pinfile import pins_from_plan, write_pinfile

    if not plan.pins:
        sys.stderr.write(f"attn-doctor: no pins in the plan; {path} not touched\n")
        return
    pins = pins_from_plan(plan)
    result = write_pinfile(path, pins, constraints=constraints, dry_run=dry_run)
    from doctor.report.safe_text import visible

    for w in result.warnings:
        sys.stderr.write(f"attn-doctor: warning: {visible(w)}\n")
    if dry_run:
        from doctor.probe.envvars import scrub

        diff = "".join(visible(scrub(line)) for line in (result.diff or "").splitlines(keepends=True))
        (sys.stderr if format == "json" else sys.stdout).write(diff or f"{path}: no change\n")
    elif not result.changed:
        sys.stderr.write(f"attn-doctor: {path} already has these pins\n")
    else:
        backup = f" (backup: {result.backup})" if result.backup else ""
        sys.stderr.write(f"attn-doctor: wrote {len(pins)} pin(s) to {path}{backup}\n")


fix_context = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": ["-h", "--help"]}
fix_epilog = WORKLOAD_FLAGS_HELP
