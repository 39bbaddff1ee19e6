"""`attn-doctor fix` and `attn-doctor releases` end to end, through doctor.cli.main."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import List, Tuple

import pytest

from doctor.cli import main
from tests.fix.conftest import write_snapshot

SEED0 = {
    "packages": {"transformer-engine": "1.13.0", "flash-attn": "2.6.3", "torch": "2.4.1"},
    "python": {"version": "3.10.14"},
    "gpu": "8.0",
}
CP2 = ["--cp-size", "2", "--cp-comm-type", "p2p"]


def run(args: List[str], capsys) -> Tuple[int, str, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_text_json_markdown(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    snap = write_snapshot(tmp_path, SEED0)
    rc, out, _ = run(["fix", "--env", str(snap), *CP2], capsys)
    assert rc == 0 and "flash-attn==2.5.9.post1" in out and "cu122torch2.4cxx11abiFALSE-cp310" in out
    assert f"attn-doctor check --assume flash-attn==2.5.9.post1 --env {snap} --cp-size 2 --cp-comm-type p2p" in out
    rc, out, _ = run(["fix", "--env", str(snap), *CP2, "--format", "json"], capsys)
    doc = json.loads(out)
    assert rc == 0 and doc["pins"] == ["flash-attn==2.5.9.post1"] and doc["unresolved"] == [] and doc["env"] == {}
    rc, out, _ = run(["fix", "--env", str(snap), *CP2, "--format", "markdown"], capsys)
    assert rc == 0 and out.startswith("## attn-doctor fix: 1 finding(s), 1 cleared, 0 unresolved")


def test_pin_writes_updates_and_is_idempotent(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    snap = write_snapshot(tmp_path, SEED0)
    req = tmp_path / "requirements.txt"
    req.write_text("# mine\nflash-attn[triton]==2.6.3\ntorch==2.4.1\n", encoding="utf-8")
    rc, _, err = run(["fix", "--env", str(snap), *CP2, "--format", "json", "--pin", "-o", str(req)], capsys)
    assert rc == 0 and "wrote 1 pin(s)" in err and "backup" in err
    assert req.read_text(encoding="utf-8") == "# mine\nflash-attn[triton]==2.5.9.post1  # attn-doctor: TE-CP-FLASH-ATTN-SOFTCAP\ntorch==2.4.1\n"
    rc, _, err = run(["fix", "--env", str(snap), *CP2, "--format", "json", "--pin", "-o", str(req)], capsys)
    assert rc == 0 and "already has these pins" in err


def test_pin_dry_run_and_constraints(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    snap = write_snapshot(tmp_path, SEED0)
    monkeypatch.chdir(tmp_path)
    rc, out, _ = run(["fix", "--env", str(snap), *CP2, "--pin", "--dry-run"], capsys)
    assert rc == 0 and "+flash-attn==2.5.9.post1" in out and not (tmp_path / "requirements-attn.txt").exists()
    rc, _, _ = run(["fix", "--env", str(snap), *CP2, "--pin", "--constraints"], capsys)
    assert rc == 0 and "flash-attn==2.5.9.post1" in (tmp_path / "constraints-attn.txt").read_text(encoding="utf-8")


def test_unwritable_pin_file_is_exit_2_with_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    snap = write_snapshot(tmp_path, SEED0)
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    rc, _, err = run(["fix", "--env", str(snap), *CP2, "--pin", "-o", str(blocker / "req.txt")], capsys)
    assert rc == 2 and err.startswith("attn-doctor: error: cannot write") and "is not a directory" in err
    assert blocker.read_text(encoding="utf-8") == "x"


def test_unresolved_is_exit_1_and_listed(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "mine.yaml").write_text(
        textwrap.dedent(
            """
            rules:
              - id: MY-NEEDS-PRIVATE-FORK
                severity: error
                area: test
                title: needs a package that is not on PyPI
                message: only our fork works
                when: {package: flash-attn, version: ">=2.6"}
                fixes:
                  - description: install our fork
                    pins: ["our-private-flash==1.0"]
                sources: [https://github.com/example/example/issues/2]
                tests:
                  fires: [{packages: {flash-attn: "2.6.3"}}]
                  passes: [{packages: {flash-attn: "2.5.8"}}]
            """
        ),
        encoding="utf-8",
    )
    snap = write_snapshot(tmp_path, {"packages": {"flash-attn": "2.6.3"}})
    rc, out, _ = run(["fix", "--env", str(snap), "--rules-dir", str(rules), "--format", "json"], capsys)
    doc = json.loads(out)
    assert rc == 1 and doc["unresolved"] == ["MY-NEEDS-PRIVATE-FORK"]
    assert any("our-private-flash is not in the release catalogue" in n for n in doc["notes"])


def test_bad_flags(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    snap = write_snapshot(tmp_path, SEED0)
    assert run(["fix", "--env", str(snap), "--format", "yaml"], capsys)[0] == 2
    assert run(["fix", "--env", str(snap), "--dry-run"], capsys)[0] == 2
    assert run(["fix", "--env", str(snap), "--head-dim", "banana"], capsys)[0] == 2


def test_releases_show(capsys) -> None:  # type: ignore[no-untyped-def]
    rc, out, _ = run(["releases", "show", "torch"], capsys)
    assert rc == 0 and "2.4.1  CUDA 12.1  nvidia-cudnn-cu12==9.1.0.70" in out
    rc, out, _ = run(["releases", "show", "Flash_Attn"], capsys)
    assert rc == 0 and "2.5.9.post1" in out
    assert run(["releases", "show", "numpy"], capsys)[0] == 2


def test_releases_refresh_offline_is_a_clear_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    # Port 9 on loopback: nothing listens, so the index is unreachable at once.
    rc, _, err = run(["releases", "refresh", "--method", "json", "--index", "http://127.0.0.1:9", "-p", "xtuner", "-o", str(tmp_path)], capsys)
    assert rc == 1 and "attn-doctor: error:" in err and "127.0.0.1:9/pypi/xtuner/json" in err
    assert list(tmp_path.iterdir()) == []
