"""D5 / m13: hostile input files end as one-line input errors (exit 2), never as exit 3, a hang,
or gigabytes of memory. One reader (doctor.bounded) serves every JSON/YAML input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from harden_util import SEED003, one_line, run_bounded

from doctor.errors import InputError, RuleError

LIMIT = 1500 * 1024 * 1024  # address space for a child: torch-free attn-doctor needs far less


def _bomb(top: str = "extra") -> str:
    """The review's 366-byte billion-laughs document (9 levels of 9 aliases)."""
    lines = ["schema_version: 1", f"{top}:", "  a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]"]
    prev = "a"
    for n in "bcdefghi":
        lines.append(f"  {n}: &{n} [" + ",".join([f"*{prev}"] * 9) + "]")
        prev = n
    return "\n".join(lines) + "\n"


def _deep_json(n: int = 10_000) -> str:
    return '{"schema_version": 1, "packages": ' + "[" * n + "]" * n + "}"


def _deep_yaml(n: int = 10_000) -> str:
    return "schema_version: 1\nx: " + "[" * n + "]" * n + "\n"


@pytest.mark.parametrize("command", [["probe", "--format", "json", "--env"], ["check", "--no-kernels", "--env"]])
def test_yaml_alias_bomb_snapshot_is_refused(tmp_path: Path, command: list) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb())
    p = run_bounded([*command, bomb], tmp_path, mem_bytes=LIMIT)
    assert p.returncode == 2, (p.returncode, p.stderr[-500:])
    assert "alias" in one_line(p.stderr) and "bomb.yaml" in p.stderr


@pytest.mark.parametrize("kind", ["workload", "rules"])
def test_yaml_alias_bomb_in_workload_and_rule_files_is_refused(tmp_path: Path, kind: str) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb("rules" if kind == "rules" else "head_dim").replace("schema_version: 1\n", ""))
    flag = ["-w", bomb] if kind == "workload" else ["--rules-dir", bomb]
    p = run_bounded(["check", "--no-kernels", "--env", SEED003, *flag], tmp_path, mem_bytes=LIMIT)
    assert p.returncode == 2 and "alias" in one_line(p.stderr)


@pytest.mark.parametrize(
    "name,text,flag",
    [
        ("snap.json", _deep_json(), "--env"),
        ("snap.yaml", _deep_yaml(), "--env"),
        ("w.yaml", "head_dim: " + "[" * 10_000 + "]" * 10_000 + "\n", "-w"),
        ("r.yaml", "rules: " + "[" * 10_000 + "]" * 10_000 + "\n", "--rules-dir"),
        ("config.json", '{"num_attention_heads": ' + "[" * 10_000 + "]" * 10_000 + "}", "--model"),
    ],
)
def test_ten_thousand_levels_of_nesting_are_an_input_error(tmp_path: Path, name: str, text: str, flag: str, cli) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / name
    f.write_text(text)
    args = ["check", "--no-kernels", flag, f] if flag == "--env" else ["check", "--no-kernels", "--env", SEED003, flag, f]
    code, _, err = cli(*args)
    assert code == 2, err
    assert "nested more than" in one_line(err) and name in err


def test_nesting_just_under_the_limit_still_loads(tmp_path: Path) -> None:
    from doctor.bounded import MAX_DEPTH, load_document

    f = tmp_path / "ok.json"
    f.write_text(json.dumps({"a": json.loads("[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2))}))
    doc, _ = load_document(f, "json")
    assert isinstance(doc["a"], list)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("flag", ["--env", "-w", "--model"])
def test_a_fifo_without_a_writer_never_blocks(tmp_path: Path, flag: str) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    args = ["check", "--no-kernels", flag, fifo] if flag == "--env" else ["check", "--no-kernels", "--env", SEED003, flag, fifo]
    p = run_bounded(args, tmp_path, timeout=60)  # the old reader blocked here forever
    assert p.returncode == 2 and "not a regular file" in one_line(p.stderr)


@pytest.mark.parametrize("flag", ["--env", "-w"])
def test_dev_zero_is_refused_without_reading_it(tmp_path: Path, flag: str) -> None:
    args = ["check", "--no-kernels", flag, "/dev/zero"]
    if flag != "--env":
        args = ["check", "--no-kernels", "--env", SEED003, flag, "/dev/zero"]
    p = run_bounded(args, tmp_path, mem_bytes=LIMIT)
    assert p.returncode == 2 and "not a regular file" in one_line(p.stderr)


def test_size_limit_and_error_class(tmp_path: Path) -> None:
    from doctor.bounded import read_text

    f = tmp_path / "big.yaml"
    f.write_text("x: " + "a" * 100 + "\n")
    with pytest.raises(RuleError) as exc:
        read_text(f, what="rule file", error=RuleError, max_bytes=50)
    assert "too large" in exc.value.message and exc.value.path == str(f)
    with pytest.raises(InputError):
        read_text(tmp_path, what="snapshot file")


def test_shipped_rules_and_seeds_are_within_the_limits() -> None:
    from doctor.bounded import load_document

    root = Path(__file__).resolve().parents[2]
    files = sorted((root / "rules").rglob("*.yaml")) + sorted((root / "docs" / "examples" / "seeds").glob("*"))
    assert files
    for f in files:
        load_document(f, "yaml" if f.suffix == ".yaml" else "json")
