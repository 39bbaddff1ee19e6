"""The one format registry: every command's --format goes through doctor.report.render, and the
terminal decides colour once (a terminal, unless NO_COLOR or TERM=dumb)."""

from __future__ import annotations

import sys

import pytest

from doctor.cli import main
from doctor.errors import InputError
from doctor.report.render import FORMATTERS, Style, check_format


def test_colour_follows_the_terminal_no_color_and_dumb_terminals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert Style.for_terminal(environ={}).color
    assert not Style.for_terminal(environ={"NO_COLOR": "1"}).color
    assert not Style.for_terminal(environ={"TERM": "dumb"}).color
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert not Style.for_terminal(environ={}).color
    assert Style.for_terminal(environ={}).width == 100


def test_every_command_lists_its_formats_and_refuses_others() -> None:
    assert set(FORMATTERS) == {"check", "fix", "probe"}
    assert set(FORMATTERS["check"]) == {"text", "json", "markdown", "junit"}
    for kind, table in FORMATTERS.items():
        for name in table:
            assert check_format(kind, name) == name
        with pytest.raises(InputError) as exc:
            check_format(kind, "yaml-ish")
        assert exc.value.hint == "use one of: " + ", ".join(table)


@pytest.mark.parametrize("command", [["check", "--no-kernels"], ["fix"], ["probe", "--static"]])
def test_an_unknown_format_is_a_usage_error_for_every_command(command, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exc:
        main([*command, "--format", "html"])
    assert exc.value.code == 2
    assert "unknown format 'html'" in capsys.readouterr().err


def test_formatter_modules_are_imported_only_when_their_format_is_used() -> None:
    import subprocess

    code = (
        "import sys\n"
        "from doctor.report.render import Style, render\n"
        "mods = lambda: {m for m in sys.modules if m.startswith('doctor.report.') and m != 'doctor.report.render'}\n"
        "before = mods()\n"
        "out = render('probe', 'json', {'host': 'h'}, Style())\n"
        "print(sorted(before), sorted(mods()), repr(out))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[] ['doctor.report.json_report'] '{\\n  \"host\": \"h\"\\n}'"


def test_every_table_row_names_a_function_that_takes_its_style_options() -> None:
    import importlib
    import inspect

    for table in FORMATTERS.values():
        for fmt in table.values():
            params = inspect.signature(getattr(importlib.import_module(fmt.module), fmt.function)).parameters
            assert set(fmt.options) <= set(params), (fmt.module, fmt.function)
