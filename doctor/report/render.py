"""Every command's `--format`, in one registry: (document kind, format name) -> formatter.

    render("check", "junit", report, Style(...), fail_on="error")   -> str
    formats("check")                                                -> ("text", "json", ...)

A formatter is a pure function of the value and a Style (colour, width, verbosity, the failure
threshold). Terminal facts (is stdout a terminal, NO_COLOR, TERM=dumb, its width) are read
once, in `Style.for_terminal`. Formatter modules are imported only when used.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from doctor.errors import InputError


@dataclass(frozen=True)
class Style:
    color: bool = False
    width: int = 100
    verbose: bool = False
    fail_on: str = "error"
    strict: bool = False

    @classmethod
    def for_terminal(cls, *, verbose: bool = False, fail_on: str = "error", strict: bool = False, environ: Optional[Mapping[str, str]] = None) -> "Style":
        env = os.environ if environ is None else environ
        tty = sys.stdout.isatty()
        width = 100
        if tty:
            try:
                width = max(80, min(os.get_terminal_size().columns, 160))
            except OSError:
                pass
        color = tty and not env.get("NO_COLOR") and env.get("TERM") != "dumb"
        return cls(color=color, width=width, verbose=verbose, fail_on=fail_on, strict=strict)


Formatter = Callable[[Any, Style], str]


def _check_text(report: Any, style: Style) -> str:
    from doctor.report.check_text import render_check

    return render_check(report, verbose=style.verbose, color=style.color, width=style.width, fail_on=style.fail_on, strict=style.strict)


def _check_json(report: Any, style: Style) -> str:
    from doctor.report.check_json import render_check_json

    return render_check_json(report)


def _check_markdown(report: Any, style: Style) -> str:
    from doctor.report.check_markdown import render_check_markdown

    return render_check_markdown(report)


def _check_junit(report: Any, style: Style) -> str:
    from doctor.report.check_junit import render_check_junit

    return render_check_junit(report, fail_on=style.fail_on, strict=style.strict)


def _fix_text(plan: Any, style: Style) -> str:
    from doctor.report.fix_text import render_fix

    return render_fix(plan, color=style.color, width=style.width)


def _fix_json(plan: Any, style: Style) -> str:
    from doctor.report.fix_json import render_fix_json

    return render_fix_json(plan)


def _fix_markdown(plan: Any, style: Style) -> str:
    from doctor.report.fix_markdown import render_fix_markdown

    return render_fix_markdown(plan)


def _probe_text(doc: Any, style: Style) -> str:
    from doctor.report.probe_text import render_probe

    return render_probe(doc, color=style.color, width=style.width)


def _json(doc: Any, style: Style) -> str:
    from doctor.report.json_report import dumps

    return dumps(doc)


FORMATTERS: Dict[str, Dict[str, Formatter]] = {
    "check": {"text": _check_text, "json": _check_json, "markdown": _check_markdown, "junit": _check_junit},
    "fix": {"text": _fix_text, "json": _fix_json, "markdown": _fix_markdown},
    "probe": {"text": _probe_text, "json": _json},
}


def formats(kind: str) -> Tuple[str, ...]:
    return tuple(FORMATTERS[kind])


def check_format(kind: str, name: str) -> str:
    """`name` if `kind` has that format, else the usage error every command gives."""
    if name not in FORMATTERS[kind]:
        raise InputError(f"unknown format {name!r}", hint="use one of: " + ", ".join(FORMATTERS[kind]))
    return name


def render(kind: str, name: str, value: Any, style: Style) -> str:
    return FORMATTERS[kind][check_format(kind, name)](value, style)
