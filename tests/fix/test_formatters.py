"""Fix plan formatters against golden files (rich rendered at width 100, no colour), and the
JSON contract compared as data. The plan is built by hand so the goldens change only when the
formatters do. UPDATE_GOLDEN=1 rewrites them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from doctor.fix.plan import Alternative, Change, FixPlan, Step
from doctor.releases.wheels import WheelChoice
from doctor.model import Finding, Fix, Pin, Severity
from doctor.report.fix_json import plan_document, render_fix_json
from doctor.report.fix_markdown import render_fix_markdown
from doctor.report.fix_text import render_fix

GOLDEN = Path(__file__).parent / "golden"
URL = "https://github.com/Dao-AILab/flash-attention/releases/download/v2.5.9.post1/flash_attn-2.5.9.post1+cu122torch2.4cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"


def _plan() -> FixPlan:
    softcap = Finding("TE-CP-FLASH-ATTN-SOFTCAP", Severity.ERROR, "Context-parallel attention crashes on flash-attn 2.6 (no softcap argument) with TransformerEngine 1.13.0", "...", "fired")
    allgather = Finding("TE-CP-ALLGATHER-CUDNN-LT-9-3", Severity.ERROR, "Context-parallel all_gather needs cuDNN >= 9.3 for FusedAttention", "...", "fired")
    slow = Finding("FA-NO-KERNEL-FOR-WORKLOAD", Severity.WARNING, "flash-attn is installed, but none of its kernels can run this workload", "...", "fired")
    return FixPlan(
        pins=(Pin("flash-attn", "2.5.9.post1"), Pin("nvidia-cudnn-cu12", "9.3.0.75")),
        env={"NVTE_DEBUG": "1"},
        config=(),
        workload_changes={},
        changes=(
            Change("TE-CP-FLASH-ATTN-SOFTCAP", Fix("Downgrade flash-attn 2.6.3 -> 2.5.9.post1", pins=(Pin("flash-attn", "2.5.9.post1"),)), origin="catalogue"),
            Change("TE-CP-ALLGATHER-CUDNN-LT-9-3", Fix("Install cuDNN 9.3", pins=(Pin("nvidia-cudnn-cu12", "9.3.0.75"),), cost="pip reports torch's exact cuDNN pin")),
        ),
        targets=(softcap, allgather, slow),
        cleared=("TE-CP-FLASH-ATTN-SOFTCAP", "TE-CP-ALLGATHER-CUDNN-LT-9-3"),
        unresolved=("FA-NO-KERNEL-FOR-WORKLOAD",),
        not_evaluated=("TORCH-ARCH-LIST-MISSES-GPU",),
        steps=(
            Step("pip", "Install nvidia-cudnn-cu12 9.3.0.75 after torch", 'pip install "nvidia-cudnn-cu12==9.3.0.75"', ("TE-CP-ALLGATHER-CUDNN-LT-9-3",)),
            Step("wheel", "Install the prebuilt flash-attn 2.5.9.post1 wheel for this torch", f"pip install --no-deps --force-reinstall {URL}", ("TE-CP-FLASH-ATTN-SOFTCAP",)),
            Step("env", "Set NVTE_DEBUG=1 in the training environment", "export NVTE_DEBUG=1"),
            Step("verify", "Re-check with the plan assumed", "attn-doctor check --assume flash-attn==2.5.9.post1 --assume nvidia-cudnn-cu12==9.3.0.75 --assume-env NVTE_DEBUG=1"),
        ),
        conflicts=("torch 2.4.1 requires nvidia-cudnn-cu12==9.1.0.70 exactly: pip will report a conflict",),
        wheels=(WheelChoice("2.5.9.post1", True, URL.rsplit("/", 1)[1], URL, ("assumed CUDA 12.1 (the default PyPI build of torch 2.4.1)",)),),
        alternatives=(Alternative(("TE-CP-ALLGATHER-CUDNN-LT-9-3",), Fix("Move to torch 2.7.1", pins=(Pin("torch", "2.7.1"),), cost="a torch upgrade"), "pip installs it without complaint"),),
        notes=("TE-CP-FLASH-ATTN-SOFTCAP: transformer-engine==2.0.0 is not a release on PyPI; nearby releases are tried instead",),
        verified=True,
        catalogue_date="2026-11-21",
    )


@pytest.mark.parametrize("name,render", [("plan.txt", lambda p: render_fix(p, width=100)), ("plan.md", render_fix_markdown)])
def test_golden(name: str, render, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    got = render(_plan())
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")


def test_text_has_no_escape_codes_and_commands_are_not_wrapped() -> None:
    text = render_fix(_plan(), width=80)
    assert "\x1b[" not in text
    assert URL in text, "a command a person copies is never broken across lines"


def test_json_contract() -> None:
    doc = json.loads(render_fix_json(_plan()))
    assert list(doc)[:6] == ["schema_version", "pins", "env", "config", "unresolved", "steps"]
    assert doc["schema_version"] == 1
    assert doc["pins"] == ["flash-attn==2.5.9.post1", "nvidia-cudnn-cu12==9.3.0.75"]
    assert doc["env"] == {"NVTE_DEBUG": "1"}
    assert doc["unresolved"] == ["FA-NO-KERNEL-FOR-WORKLOAD"]
    assert doc["steps"][1] == {
        "kind": "wheel",
        "text": "Install the prebuilt flash-attn 2.5.9.post1 wheel for this torch",
        "command": f"pip install --no-deps --force-reinstall {URL}",
        "rule_ids": ["TE-CP-FLASH-ATTN-SOFTCAP"],
        "cost": None,
    }
    assert doc["wheels"][0]["filename"].endswith("cxx11abiFALSE-cp310-cp310-linux_x86_64.whl")
    assert doc["conflicts"] and doc["alternatives"][0]["pins"] == ["torch==2.7.1"]
    assert plan_document(_plan()) == doc


def test_nothing_to_fix() -> None:
    empty = FixPlan(pins=(), env={}, config=(), workload_changes={}, changes=(), targets=(), cleared=(), unresolved=(), not_evaluated=(), verified=True)
    assert "Nothing to fix" in render_fix(empty)
    assert json.loads(render_fix_json(empty))["pins"] == []
    assert render_fix_markdown(empty).startswith("## attn-doctor fix: 0 finding(s)")
