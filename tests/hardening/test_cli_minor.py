"""The review's minor items (m1-m8, m12): what a new user meets first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harden_util import SEED003, one_line

from doctor import __version__

COMMANDS = [["probe"], ["check"], ["fix"], ["rules"], ["rules", "list"], ["rules", "show"], ["rules", "lint"],
            ["releases"], ["releases", "show"], ["releases", "refresh"], []]


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(cli, flag: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = cli(flag)
    assert code == 0 and out.strip() == f"attn-doctor {__version__}"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_dash_h_works_on_every_command(cli, command: list) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli(*command, "-h")
    assert code == 0, err
    assert "Usage:" in out and "--help" in out


def test_bare_command_explains_itself(cli) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli()
    assert code == 2
    assert "check" in out  # the command list
    line = one_line(err)
    assert "no command given" in line and "attn-doctor check" in line


@pytest.mark.parametrize("value", ["banana", "2", "maybe"])
def test_boolean_workload_flag_with_a_bad_value_is_an_error(cli, value: str) -> None:  # type: ignore[no-untyped-def]
    code, _, err = cli("check", "--env", SEED003, f"--qkv-packed={value}")
    assert code == 2 and "--qkv-packed" in one_line(err)


def test_boolean_workload_flag_values(cli) -> None:  # type: ignore[no-untyped-def]
    for arg, packed in (("--qkv-packed=false", False), ("--qkv-packed=yes", True), ("--qkv-packed", True)):
        code, out, err = cli("check", "--env", SEED003, arg, "-f", "json")
        assert code in (0, 1), err
        assert json.loads(out)["workload"]["qkv_packed"] is packed


def test_cp_comm_type_alone_is_not_dropped_silently(cli) -> None:  # type: ignore[no-untyped-def]
    code, _, err = cli("check", "--env", SEED003, "--cp-comm-type", "all_gather")
    assert code == 2 and "--cp-size" in one_line(err)
    code, out, err = cli("check", "--env", SEED003, "--cp-comm-type", "all_gather", "--cp-size", "2", "-f", "json")
    cp = json.loads(out)["workload"]["context_parallel"]
    assert code in (0, 1) and (cp["size"], cp["comm_type"]) == (2, "all_gather")


def test_no_inference_means_training(cli) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli("check", "--env", SEED003, "--inference", "--no-inference", "-f", "json")
    assert code in (0, 1), err
    assert json.loads(out)["workload"]["training"] is True


def test_fix_usage_hints_point_at_fix_and_stay_short(cli) -> None:  # type: ignore[no-untyped-def]
    code, _, err = cli("fix", "--env", SEED003, "-v")
    assert code == 2 and "attn-doctor fix --help" in one_line(err)
    code, _, err = cli("check", "--env", SEED003, "--head-dimm", "64")
    line = one_line(err)
    assert code == 2 and "did you mean --head-dim?" in line and len(line) < 200


def test_no_green_mark_when_torch_is_not_installed(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    snap = tmp_path / "no-torch.json"
    snap.write_text(json.dumps({"schema_version": 1, "host": "cpu-box", "packages": {"numpy": "2.1.0"}, "gpus": [], "env": {}}))
    code, out, err = cli("check", "--env", snap)
    assert code in (0, 1), err
    cuda = next(line for line in out.splitlines() if "CUDA and cuDNN" in line)
    assert cuda.startswith("[?]") and "torch not installed" in cuda
    code, out, _ = cli("check", "--env", snap, "-f", "json")
    areas = {a["area"]: a["mark"] for a in json.loads(out)["summary"]["areas"]}
    assert areas["cuda"] == "unknown"


def test_undecided_backends_get_no_green_mark(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    snap = tmp_path / "empty.json"
    snap.write_text('{"schema_version": 1}')
    _, out, _ = cli("check", "--env", snap)
    for line in out.splitlines():
        if "backend choice undecided" in line:
            assert line.startswith("[?]"), line


def test_workload_line_names_every_non_default_setting(cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = cli("check", "--env", SEED003, "--dropout", "0.1", "--fp8", "--deterministic", "--alibi",
                       "--qkv-format", "thd", "-f", "json")
    desc = json.loads(out)["workload"]["description"]
    for word in ("dropout 0.1", "fp8", "deterministic", "alibi", "thd"):
        assert word in desc, desc


def test_markdown_info_findings_have_an_icon(cli) -> None:  # type: ignore[no-untyped-def]
    from harden_util import WORKLOAD003

    _, out, _ = cli("check", "--env", SEED003, "-w", WORKLOAD003, "-f", "markdown")
    assert "`FA-NO-KERNEL-FOR-WORKLOAD`" in out  # an info finding on this seed
    assert "####  `" not in out
