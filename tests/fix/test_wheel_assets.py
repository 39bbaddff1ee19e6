"""`releases wheels` rebuilds flash-attn wheel rows from the assets a GitHub release carries
(saved API answers stand in for GitHub; nothing here touches the network)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, List

import pytest

from doctor.cli import main
from doctor.releases.refresh import IndexUnreachable
from doctor.releases.wheel_assets import builds_from_assets, fetch_release_assets, parse_asset, refresh_wheels
from doctor.resources import rules_dir

NAMES = [
    "flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp312-cp312-linux_x86_64.whl",
    "flash_attn-2.8.3+cu12torch2.8cxx11abiFALSE-cp310-cp310-linux_x86_64.whl",
    "flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE-cp312-cp312-linux_x86_64.whl",
    "flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE-cp312-cp312-linux_aarch64.whl",
    "flash_attn-2.8.3.tar.gz",
]


def test_asset_names_are_read_like_setup_py_writes_them() -> None:
    a = parse_asset(NAMES[0])
    assert a is not None and (a.version, a.cuda, a.torch, a.cxx11_abi, a.python) == ("2.8.3", "12", "2.8", True, "3.12")
    old = parse_asset("flash_attn-2.5.8+cu122torch2.3cxx11abiFALSE-cp311-cp311-linux_x86_64.whl")
    assert old is not None and old.cuda == "12.2" and old.python == "3.11"
    assert parse_asset(NAMES[3]) is None and parse_asset(NAMES[4]) is None


def test_builds_group_assets_per_torch_line() -> None:
    builds = builds_from_assets("2.8.3", NAMES)
    assert [b["torch"] for b in builds] == ["2.8", "2.9"]
    assert builds[0]["python"] == ["3.10", "3.12"] and builds[0]["cxx11_abi"] == [False, True]
    assert builds[1] == {"torch": "2.9", "torch_build": "2.9", "cuda": ["12"], "python": ["3.12"], "cxx11_abi": [True]}


def _catalogue(tmp_path: Path) -> Path:
    d = tmp_path / "releases"
    shutil.copytree(rules_dir() / "releases", d)
    return d


def test_refresh_replaces_one_row_and_keeps_the_rest(tmp_path: Path) -> None:
    d = _catalogue(tmp_path)
    before = json.loads((d / "flash-attn-wheels.json").read_text())
    result = refresh_wheels(d, ["2.8.3"], assets={"2.8.3": NAMES}, today="2026-11-22")
    after = json.loads((d / "flash-attn-wheels.json").read_text())
    row = next(r for r in after["releases"] if r["version"] == "2.8.3")
    assert {b["torch"] for b in row["builds"]} == {"2.8", "2.9"} and row["from"] == "release assets"
    assert result.updated == (("2.8.3", 2),)
    untouched = {r["version"]: r for r in before["releases"] if r["version"] != "2.8.3"}
    assert all(untouched[r["version"]] == r for r in after["releases"] if r["version"] != "2.8.3")
    assert after["broken"] == before["broken"]


def test_a_refreshed_row_decides_which_wheel_fix_names(tmp_path: Path) -> None:
    from doctor.releases.wheels import WheelTarget, choose_wheel
    from doctor.releases.catalogue import load_release_catalogue

    d = _catalogue(tmp_path)
    target = WheelTarget(torch="2.9.0", cuda="12.8", cxx11_abi=True, python="3.12")
    assert not choose_wheel(load_release_catalogue(d), "2.8.3", target).available  # the tag's CI matrix stops at 2.8
    refresh_wheels(d, ["2.8.3"], assets={"2.8.3": NAMES})
    choice = choose_wheel(load_release_catalogue(d), "2.8.3", target)
    assert choice.available and choice.filename == "flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE-cp312-cp312-linux_x86_64.whl"


def test_unreachable_github_is_one_clear_error() -> None:
    def offline(url: str) -> Any:
        raise OSError("network unreachable")

    with pytest.raises(IndexUnreachable) as exc:
        fetch_release_assets("2.8.3.post2", offline)
    assert "v2.8.3.post2" in str(exc.value) and "--assets-json" in (exc.value.hint or "")


def test_cli_reads_a_saved_api_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "v2.8.3.json"
    saved.write_text(json.dumps({"tag_name": "v2.8.3", "assets": [{"name": n} for n in NAMES]}))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["releases", "wheels", "--version", "2.8.3", "--assets-json", str(saved), "--output", str(out)])
    assert exc.value.code == 0
    assert "2.8.3: wheels for 2 torch line(s)" in capsys.readouterr().out
    assert (out / "flash-attn-wheels.json").exists()


def test_cli_names_a_version_missing_from_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "v2.8.3.json"
    saved.write_text(json.dumps({"tag_name": "v2.8.3", "assets": [{"name": n} for n in NAMES]}))
    with pytest.raises(SystemExit) as exc:
        main(["releases", "wheels", "--version", "2.8.3.post2", "--assets-json", str(saved), "--dry-run"])
    assert exc.value.code == 2
    err: List[str] = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "v2.8.3.post2" in err[0]
