"""Every command's `--format`, in one registry: (document kind, format name) -> formatter.

    render("check", "junit", report, Style(...), fail_on="error")   -> str
    formats("check")                                                -> ("text", "json", ...)

A formatter is a pure function of the value and a Style (colour, width, verbosity, the failure
threshold). Terminal facts (is stdout a terminal, NO_COLOR, TERM=dumb, its width) are read
once, in `Style.for_terminal`. Formatter modules are imported only when used.
"""

from __future__ import annotations

import importlib
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


@dataclass(frozen=True)
class Formatter:
    """Where one format's function lives and which Style fields it takes as keywords; the module
    is imported on the first call."""

    module: str
    function: str
    options: Tuple[str, ...] = ()
    data: bool = False  # JSON: the value as it is; any other format sees control characters made visible

    def __call__(self, value: Any, style: Style) -> str:
        fn: Callable[..., str] = getattr(importlib.import_module(self.module), self.function)
        if not self.data:
            from doctor.report.safe_text import neutralise

            value = neutralise(value)
        return fn(value, **{name: getattr(style, name) for name in self.options})


_TERMINAL = ("color", "width")
FORMATTERS: Dict[str, Dict[str, Formatter]] = {
    "check": {
        "text": Formatter("doctor.report.check_text", "render_check", ("verbose", *_TERMINAL, "fail_on", "strict")),
        "json": Formatter("doctor.report.check_json", "render_check_json", data=True),
        "markdown": Formatter("doctor.report.check_markdown", "render_check_markdown"),
        "junit": Formatter("doctor.report.check_junit", "render_check_junit", ("fail_on", "strict")),
    },
    "fix": {
        "text": Formatter("doctor.report.fix_text", "render_fix", _TERMINAL),
        "json": Formatter("doctor.report.fix_json", "render_fix_json", data=True),
        "markdown": Formatter("doctor.report.fix_markdown", "render_fix_markdown"),
    },
    "probe": {
        "text": Formatter("doctor.report.probe_text", "render_probe", _TERMINAL),
        "json": Formatter("doctor.report.json_report", "dumps", data=True),
    },
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
