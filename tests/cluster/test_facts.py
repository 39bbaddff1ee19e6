"""rules/cluster/hetero.yaml: the cross-rank comparison table is data, validated on load."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.cluster.facts import default_path, load_table
from doctor.errors import ExitCode, RuleError


def test_the_shipped_table_loads_with_every_fact_the_cluster_check_compares() -> None:
    table = load_table()
    ids = [f.rule_id for f in table.facts]
    assert ids[:2] == ["CLUSTER-HETERO-DRIVER", "CLUSTER-HETERO-TORCH"] and len(ids) == len(set(ids)) == 11
    assert {"torch", "flash-attn", "transformer-engine", "nvidia-nccl-cu12"} <= table.covered_dists
    assert "CUDA_VISIBLE_DEVICES" in table.per_rank_env
    assert [f.prefix for f in table.env_families][-1] == ""
    driver = table.facts[0]
    assert driver.severity_of is not None and driver.severity_of(["550.54.15", "535.104.05"]) == "error"
    assert driver.severity_of(["550.54.15", "550.90.07"]) == "warning"
    assert all(u.startswith("https://") for f in table.facts for u in f.sources)


@pytest.mark.parametrize(
    "edit,needle,at",
    [
        (lambda s: s.replace("    cost: fewer eligible nodes\n", "    cost: fewer eligible nodes\n    colour: red\n", 1), "'colour' was unexpected", "colour: red"),
        (lambda s: s.replace("read: {reader: gpus}", "read: {reader: gpu_models}"), "'gpu_models' is not one of", "gpu_models"),
        (lambda s: s.replace("    sources: [cudnn]\n", "    sources: [cudnn-docs]\n", 1), "unknown source 'cudnn-docs'", "cudnn-docs"),
        (lambda s: s.replace("  - id: CLUSTER-HETERO-PYTHON", "  - id: CLUSTER-HETERO-GPU", 1), "duplicate id", "id: CLUSTER-HETERO-GPU\n    what: Python"),
    ],
)
def test_a_bad_table_is_refused_with_file_and_line(tmp_path: Path, edit, needle: str, at: str) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "hetero.yaml"
    text = edit(default_path().read_text(encoding="utf-8"))
    bad.write_text(text, encoding="utf-8")
    line = text[: text.index(at)].count("\n") + 1
    with pytest.raises(RuleError) as exc:
        load_table(bad)
    assert needle in exc.value.one_line() and f"{bad}:{line}" in exc.value.one_line(), exc.value.one_line()
    assert exc.value.exit_code == ExitCode.USAGE
