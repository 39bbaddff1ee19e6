"""D7 / m19: `fix --pin -o` never corrupts a file that is not a requirements file, and a later
run removes the hidden temporary files a killed write left behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from harden_util import SEED003, WORKLOAD003, one_line

from doctor.fix.pinfile import Pinned, write_pinfile
from doctor.model import Pin
from doctor.errors import WriteError

PYPROJECT = '[project]\nname = "x"\ndependencies = ["transformer-engine==2.3.0"]\n\n[tool.x]\nkeep = "me"\n'


def _pin(cli, out: Path) -> tuple:  # type: ignore[no-untyped-def]
    return cli("fix", "--env", SEED003, "-w", WORKLOAD003, "--pin", "-o", out)


POETRY = '[tool.poetry]\nname = "x"\n\n[tool.poetry.dependencies]\ntransformer-engine = "2.3.0"\n'
DYNAMIC = '[project]\nname = "x"\ndynamic = ["dependencies"]\n'


@pytest.mark.parametrize("name,text", [
    ("pyproject.toml", POETRY),  # no [project] table: refused, with what to do instead
    ("pyproject.toml", DYNAMIC),
    ("setup.cfg", "[options]\ninstall_requires =\n    transformer-engine==2.3.0\n"),
    ("deps.txt", PYPROJECT),  # TOML content under another name
])
def test_pin_refuses_files_that_are_not_requirements_files(cli, tmp_path: Path, name: str, text: str) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / name
    f.write_text(text)
    code, _, err = _pin(cli, f)
    assert code == 2
    line = one_line(err)
    assert ("not a requirements file" in line or "cannot pin in this pyproject.toml" in line), line
    assert "--constraints" in line and "transformer-engine==" in line
    assert f.read_text() == text  # byte-identical
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == [name]  # no .bak, no .tmp


def test_pin_edits_project_dependencies_and_keeps_every_other_byte(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tomllib = pytest.importorskip("tomllib")
    text = (
        '# my project\n[project]\nname = "x"  # the name\nversion = "1.0"\ndependencies = [\n'
        '    "numpy>=1.26",  # numerics\n    "transformer-engine[pytorch]==2.3.0 ; platform_system == \'Linux\'",\n'
        '    "torch"\n]\n\n[project.optional-dependencies]\ndev = ["pytest"]\n\n[tool.x]\nkeep = [1, 2]\n'
    )
    f = tmp_path / "pyproject.toml"
    f.write_text(text)
    code, _, err = _pin(cli, f)
    assert code in (0, 1), err
    new = f.read_text()
    deps = tomllib.loads(new)["project"]["dependencies"]
    assert deps[0] == "numpy>=1.26" and deps[2] == "torch"
    assert deps[1].startswith("transformer-engine[") and "pytorch" in deps[1] and "==2.17.0" in deps[1] and "platform_system" in deps[1]
    assert not any(d.startswith("nvidia-cudnn-cu12==") for d in deps), "seed 003 keeps the cuDNN warning: no conflicting pin (issue 15)"
    head, tail = text.split("dependencies = [")[0], text.split("\n]\n", 1)[1]
    assert new.startswith(head) and new.endswith(tail)  # outside the array: byte-identical
    assert "# numerics" in new
    assert tomllib.loads(new)["tool"] == {"x": {"keep": [1, 2]}}
    assert (tmp_path / "pyproject.toml.bak").read_text() == text
    code, _, err = _pin(cli, f)  # idempotent
    assert f.read_text() == new and "already has these pins" in err


def test_pin_refuses_constraints_into_pyproject(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "pyproject.toml"
    f.write_text(PYPROJECT)
    code, _, err = cli("fix", "--env", SEED003, "-w", WORKLOAD003, "--pin", "--constraints", "-o", f)
    assert code == 2 and "constraints go in a file of their own" in one_line(err)
    assert f.read_text() == PYPROJECT


def test_pin_still_writes_requirements_and_constraints_files(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    req = tmp_path / "requirements.txt"
    req.write_text("numpy\ntransformer-engine==2.3.0\n")
    code, _, err = _pin(cli, req)
    assert code in (0, 1), err
    assert "transformer-engine==2.3.0" not in req.read_text() and "transformer-engine[core-cu12,pytorch]==" in req.read_text()


def test_stale_temporary_files_of_a_killed_write_are_removed(tmp_path: Path) -> None:
    from doctor.fix.pinfile import STALE_TMP_S

    req = tmp_path / "requirements.txt"
    req.write_text("numpy\n")
    stale = tmp_path / ".requirements.txt.abc123.tmp"
    stale.write_text("half a file")
    old = time.time() - STALE_TMP_S - 3600
    os.utime(stale, (old, old))
    fresh = tmp_path / ".requirements.txt.def456.tmp"  # maybe another run's, in progress: kept
    fresh.write_text("in progress")
    other = tmp_path / ".other.txt.zzz.tmp"  # not ours
    other.write_text("x")
    os.utime(other, (old, old))
    write_pinfile(req, [Pinned(Pin("transformer-engine", "2.17.0"))])
    assert not stale.exists() and fresh.exists() and other.exists()
    assert "transformer-engine==2.17.0" in req.read_text()


def test_library_refusal_leaves_the_file_alone(tmp_path: Path) -> None:
    f = tmp_path / "pyproject.toml"
    f.write_text(POETRY)
    with pytest.raises(WriteError):
        write_pinfile(f, [Pinned(Pin("transformer-engine", "2.17.0"))])
    assert f.read_text() == POETRY


@pytest.mark.parametrize(
    "text",
    [
        '[project]\nname = "x"\ndependencies = ["transformer-engine==2.3.0"]\n\n[tool.x]\nkeep = "me"\n',
        '[project]\nname = "x"\ndependencies = []\n',
        '[project]\nname = "x"\ndependencies = [\n  "numpy",\n  "torch"\n]\n',
        '[project]\nname = "x"\ndependencies = [\n  "numpy",\n  "torch",  # last\n]\n# tail\n',
        "[project]\r\nname = 'x'\r\ndependencies = [\r\n    'numpy',\r\n]\r\n",
        '[project]\nname = "x"\ndependencies = ["numpy", "transformer-engine @ https://example.com/te-2.3.0.whl"]\n',
    ],
)
def test_pyproject_layouts(text: str) -> None:
    tomllib = pytest.importorskip("tomllib")
    from doctor.fix.pyproject import render_pyproject

    pins = [Pinned(Pin("transformer-engine", "2.17.0")), Pinned(Pin("nvidia-cudnn-cu12", "9.3.0.75"))]
    new, warnings = render_pyproject(text, pins)
    before, after = tomllib.loads(text), tomllib.loads(new)
    deps = after["project"].pop("dependencies")
    before["project"].pop("dependencies")
    assert after == before
    assert any(d.startswith("transformer-engine") and d.endswith("==2.17.0") for d in deps) and "nvidia-cudnn-cu12==9.3.0.75" in deps
    assert len(deps) == len(set(deps))
    assert ("\r\n" in new) == ("\r\n" in text)
    assert bool(warnings) == ("@ https" in text)
