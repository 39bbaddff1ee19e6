"""tools/neighbours.py on a two-rule catalogue: it must read a finding's firing case on other
GPUs, report the fix that brings up another error there and the error that fires alongside
unannounced, and say nothing where the rule reads that error first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.tools.conftest import load_tool

from doctor.rules.loader import load_catalogue

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "neighbours.py"

pytestmark = pytest.mark.skipif(not TOOL.is_file(), reason="tools/ is not part of an installed package")

RULES = """\
rules:
  - id: SOFTCAP-DROPPED
    severity: error
    title: softcap dropped
    message: m
    when: {all: [{env: SOFTCAP, eq: "1"}, {not: {env: KERNEL, eq: "1"}}%s]}
    fixes:
      - description: switch the kernel on
        env: {KERNEL: "1"}
    sources: [https://github.com/pytorch/pytorch/issues/1]
    tests:
      fires: [{env: {SOFTCAP: "1"}, gpu: "9.0"}]
      passes: [{env: {}, gpu: "9.0"}]
  - id: KERNEL-NEEDS-AMPERE
    severity: error
    title: the kernel needs Ampere
    message: m
    when: {all: [{env: KERNEL, eq: "1"}, {fact: gpu.sm, lt: 80}]}
    sources: [https://github.com/pytorch/pytorch/issues/1]
    tests:
      fires: [{env: {KERNEL: "1"}, gpu: "7.5"}]
      passes: [{env: {KERNEL: "1"}, gpu: "8.0"}]
  - id: OLD-GPU
    severity: error
    title: no kernels for this GPU
    message: m
    when: {fact: gpu.sm, lt: 75}
    sources: [https://github.com/pytorch/pytorch/issues/1]
    tests:
      fires: [{gpu: "7.0"}]
      passes: [{gpu: "7.5"}]
"""


def _tool() -> Any:
    return load_tool("neighbours")


def _leads(tmp_path: Path, extra: str) -> Any:
    p = tmp_path / "r.yaml"
    p.write_text(RULES % extra)
    cat = load_catalogue([p], builtin=False, use_cache=False)
    return _tool().scan(["SOFTCAP-DROPPED"], cat)


def test_a_fix_that_moves_the_failure_on_an_older_gpu_is_reported(tmp_path: Path) -> None:
    leads = _leads(tmp_path, "")
    fix = {(x["neighbour"], x["problem"]) for x in leads if x["kind"] == "fix"}
    assert ("gpu 7.5", "brings up KERNEL-NEEDS-AMPERE") in fix
    assert not any(n in ("gpu 8.0", "gpu 9.0", "gpu 12.0") for n, _ in fix)  # the fix helps there
    assert {x["neighbour"] for x in leads if x["kind"] == "cofires" and x["other"] == "OLD-GPU"} == {"gpu 7.0"}


def test_an_error_the_rule_reads_first_is_no_lead(tmp_path: Path) -> None:
    leads = _leads(tmp_path, ", {finding: OLD-GPU, fired: false}")
    assert not any(x["kind"] == "cofires" for x in leads)
    assert not any(x["neighbour"] == "gpu 7.0" for x in leads)  # the rule is silent there now


def test_an_error_at_an_earlier_stage_is_no_lead(tmp_path: Path) -> None:
    # the report lists SOFTCAP-DROPPED behind OLD-GPU: the run stops at the first kernel before
    # the softcap can matter, and the user is told so
    p = tmp_path / "r.yaml"
    text = (RULES % "").replace("    title: softcap dropped\n", "    stage: numbers\n    title: softcap dropped\n")
    p.write_text(text.replace("    title: no kernels for this GPU\n", "    stage: device\n    title: no kernels for this GPU\n"))
    leads = _tool().scan(["SOFTCAP-DROPPED"], load_catalogue([p], builtin=False, use_cache=False))
    assert not any(x["kind"] == "cofires" and x["other"] == "OLD-GPU" for x in leads)
    assert any(x["kind"] == "fix" for x in leads)  # the fix that moves the failure is still a lead


def test_an_amd_gpu_has_no_nvidia_neighbours() -> None:
    case = {"gpu": "9.4", "torch": {"version": "2.4.1+rocm6.1", "cuda": None, "hip": "6.1"}, "platform": {"os": "linux", "arch": "x86_64"}}
    got = [what for what, _ in _tool().neighbours(case)]
    assert got and not any(w.startswith("gpu ") for w in got)
    assert any(w.startswith("gpu ") for w, _ in _tool().neighbours({**case, "torch": {"version": "2.4.1", "cuda": "12.1"}}))
