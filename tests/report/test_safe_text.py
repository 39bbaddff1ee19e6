"""Newcomer review m14: a snapshot's host name, GPU name or package version can carry terminal
escape sequences; no text output may pass them to the terminal (JSON keeps the data)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest

from doctor.cli import main
from doctor.report.safe_text import neutralise, visible

SEEDS = Path(__file__).resolve().parents[2] / "docs" / "examples" / "seeds"
HOST = "\x1b[2J\x1b[31mPWNED\x1b[0m"


@pytest.fixture()
def evil(tmp_path: Path) -> Path:
    doc = json.loads((SEEDS / "003-te-mla-a100-no-backend.snapshot.json").read_text(encoding="utf-8"))
    doc["host"] = HOST
    doc["gpus"][0]["name"] = "NVIDIA A100\x1b]0;owned\x07"
    doc["packages"]["transformer-engine"] = "2.3.0\x9b2J"
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _run(args: List[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        main(args)
    cap = capsys.readouterr()
    return cap.out + cap.err


@pytest.mark.parametrize(
    "command",
    [
        ["probe"],
        ["check", "--no-kernels", "-v"],
        ["check", "--no-kernels", "--format", "markdown"],
        ["check", "--no-kernels", "--format", "junit"],
        ["fix"],
    ],
)
def test_no_text_output_passes_escape_sequences_through(command: List[str], evil: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    extra = [] if command[0] == "probe" else ["-w", str(SEEDS / "003-te-mla-a100-no-backend.workload.yaml")]
    out = _run([*command, "--env", str(evil), *extra], capsys)
    assert not set(out) & {"\x1b", "\x07", "\x9b"}
    assert "\\x9b2J" in out  # the TE version, made visible


def test_probe_shows_the_host_name_escaped(evil: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(["probe", "--env", str(evil)], capsys)
    assert "host \\x1b[2J\\x1b[31mPWNED\\x1b[0m" in out
    assert "NVIDIA A100\\x1b]0;owned\\x07" in out


def test_json_keeps_the_data_as_it_is(evil: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(["probe", "--env", str(evil), "--format", "json"], capsys)
    assert "\x1b" not in out  # JSON escapes it as \u001b
    assert json.loads(out)["host"] == HOST


def test_visible_keeps_tabs_newlines_and_crlf() -> None:
    assert visible("a\tb\r\nc\n") == "a\tb\r\nc\n"
    assert visible("x\ry\x7f\x00") == "x\\x0dy\\x7f\\x00"
    value = {"k": ("ok", ["\x1b"])}
    assert neutralise(value) == {"k": ("ok", ["\\x1b"])}
    clean = {"k": ("ok",)}
    assert neutralise(clean) is clean
