"""D1 / D3: the fleet view evaluates every rule on every snapshot and reports per host; the exit
code is the worst over the hosts whatever the --env order; a folder gives only snapshots."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Dict, List

import pytest
from harden_util import SEEDS, one_line

XTUNER = "XTUNER-01-TRANSFORMERS-FA-FORWARD"
SNAPSHOTS = sorted(SEEDS.glob("*.snapshot.json"))


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    f = tmp_path / "empty.json"
    f.write_text('{"schema_version": 1, "host": "empty-node"}\n')
    return f


@pytest.mark.parametrize("empty_first", [True, False])
def test_an_error_on_one_node_is_an_error_whatever_the_order(cli, empty: Path, empty_first: bool) -> None:  # type: ignore[no-untyped-def]
    x = SEEDS / "002-xtuner-transformers.snapshot.json"
    order = [empty, x] if empty_first else [x, empty]
    code, out, err = cli("check", "--env", order[0], "--env", order[1], "-f", "json")
    assert code == 1, err
    doc = json.loads(out)
    f = next(f for f in doc["findings"] if f["rule_id"] == XTUNER)
    assert f["status"] == "fired" and f["severity"] == "error"
    assert "fired on qwen2-sft-node" in f["evidence"]
    assert not any(e.startswith("on all") for e in f["evidence"])  # never claimed for the empty node
    assert any("not evaluated on empty-node" in e for e in f["evidence"])
    hosts = {h["host"]: {r["rule_id"]: r["status"] for r in h["findings"]} for h in doc["hosts"]}
    assert hosts["qwen2-sft-node"][XTUNER] == "fired"
    assert hosts["empty-node"][XTUNER] == "not_evaluated"


def test_text_report_has_a_line_per_host(cli, empty: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = cli("check", "--env", SEEDS / "002-xtuner-transformers.snapshot.json", "--env", empty)
    assert code == 1
    assert "Per host" in out
    host_lines = [line.strip() for line in out.splitlines() if line.strip().startswith(("qwen2-sft-node:", "empty-node:"))]
    assert len(host_lines) == 2
    assert any(line.startswith("qwen2-sft-node: 1 error(s)") and "FAIL" in line for line in host_lines)
    assert any(line.startswith("empty-node: 0 error(s)") and "· ok" in line for line in host_lines)


def _alone(cli, path: Path, extra: List[str]) -> int:  # type: ignore[no-untyped-def]
    code, _, err = cli("check", "--env", path, *extra)
    assert code in (0, 1), err
    return code


@pytest.mark.parametrize("extra", [[], ["--fail-on", "warning"], ["--strict"]])
def test_property_exit_code_is_the_worst_host_for_any_order(cli, tmp_path: Path, empty: Path, extra: List[str]) -> None:  # type: ignore[no-untyped-def]
    """Property: for random orders of the fleet, the exit code is the max over the hosts checked
    alone, and the JSON report is the same."""
    fleet = [*SNAPSHOTS, empty]
    alone = {p: _alone(cli, p, extra) for p in fleet}
    rng = random.Random(10)  # fixed seed: reproducible shuffles
    seen: Dict[str, int] = {}
    for _ in range(3):
        n = rng.randint(2, len(fleet))
        subset = rng.sample(fleet, n)
        code, out, err = cli("check", *sum((["--env", str(p)] for p in subset), []), *extra, "-f", "json")
        assert code == max(alone[p] for p in subset), (subset, err)
        doc = json.loads(out)
        key = ",".join(sorted(str(p) for p in subset))
        for order in (list(reversed(subset)), rng.sample(subset, n)):
            code2, out2, _ = cli("check", *sum((["--env", str(p)] for p in order), []), *extra, "-f", "json")
            assert code2 == code
            doc2 = json.loads(out2)
            assert doc2["findings"] == doc["findings"] and doc2["hosts"] == doc["hosts"], order
        seen[key] = code
    assert 0 in set(alone.values()) or 1 in set(alone.values())


def test_the_fleet_error_count_is_not_lowered_by_an_empty_node(cli, empty: Path) -> None:  # type: ignore[no-untyped-def]
    args = sum((["--env", str(p)] for p in SNAPSHOTS), [])
    _, out_all, _ = cli("check", *args, "-f", "json")
    _, out_more, _ = cli("check", "--env", empty, *args, "-f", "json")
    fired = lambda d: {f["rule_id"] for f in json.loads(d)["findings"] if f["status"] == "fired"}  # noqa: E731
    assert fired(out_all) <= fired(out_more)


def test_a_folder_takes_snapshots_by_content_and_names_what_it_skipped(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "fleet"
    shutil.copytree(SEEDS, folder)
    (folder / "notes.yaml").write_text("owner: infra\n")
    (folder / "renamed.txt").write_text("{}")  # not *.json / *.yaml: not looked at
    code, out, err = cli("check", "--env", folder, "-f", "json")
    skipped = [line for line in err.splitlines() if "skipped" in line]
    assert len(skipped) == 6, err
    assert sum("workload.yaml: a workload file, not a snapshot" in line for line in skipped) == 5
    assert any("notes.yaml: unknown key 'owner'" in line for line in skipped)
    hosts = [h["source"] for h in json.loads(out)["hosts"]]
    assert sorted(Path(h).name for h in hosts) == sorted(p.name for p in SNAPSHOTS)
    code2, out2, _ = cli("check", *sum((["--env", str(folder / p.name)] for p in SNAPSHOTS), []), "-f", "json")
    assert code2 == code and json.loads(out2)["summary"] == json.loads(out)["summary"]


def test_a_folder_without_snapshots_says_why(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "w.yaml").write_text("head_dim: 128\n")
    code, _, err = cli("check", "--env", tmp_path)
    assert code == 2
    assert "no snapshots" in err and "w.yaml: a workload file" in err


@pytest.mark.parametrize(
    "text,needle",
    [
        ("head_dim: 128\nnum_heads: 32\n", "unknown section 'head_dim'"),
        ('{"schema_version": 1, "gpu": [], "pakages": {}}', "did you mean 'gpus'"),
    ],
)
def test_a_file_that_is_not_a_snapshot_is_refused(cli, tmp_path: Path, text: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / ("x.yaml" if text.startswith("head") else "x.json")
    f.write_text(text)
    code, _, err = cli("check", "--env", f)
    assert code == 2 and needle in one_line(err)
