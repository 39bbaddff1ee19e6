"""Formatter output for a seed report: golden files for text / markdown / junit (rendered
colourless at a fixed width), JSON compared as data against the contract.

The report is built from the seed snapshot with a fixed slice of the catalogue (the TE
framework and the seed rules) so the goldens do not move when unrelated rules are added.
Regenerate after an intended change with: UPDATE_GOLDEN=1 python -m pytest tests/report
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from doctor.app import Inputs, check, fail_count
from doctor.snapshot import facts_from_snapshot
from doctor.report.check_json import report_dict
from doctor.report.check_junit import render_check_junit
from doctor.report.check_markdown import render_check_markdown
from doctor.report.check_text import render_check
from doctor.resources import rules_dir
from doctor.rules.loader import load_catalogue
from doctor.workload import resolve_workload

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
SEED = ROOT / "docs" / "examples" / "seeds" / "003-te-mla-a100-no-backend"


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    cat = load_catalogue([rules_dir() / "backends" / "transformer_engine.yaml", rules_dir() / "findings" / "seeds.yaml"], builtin=False, use_cache=False)
    doc = json.loads(SEED.with_suffix(".snapshot.json").read_text())
    facts = facts_from_snapshot(doc, source="003.snapshot.json")
    wl = resolve_workload(workload_file=SEED.with_suffix(".workload.yaml"))
    wl = wl.__class__(**{**wl.__dict__, "source": "003.workload.yaml"})
    return check(Inputs(facts=facts, workload=wl, catalogue=cat), kernels_skipped="--no-kernels")


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    if not path.exists():
        pytest.fail(f"golden file {path} is missing; create it with UPDATE_GOLDEN=1 and review it")
    assert text == path.read_text(encoding="utf-8"), f"{name} changed; UPDATE_GOLDEN=1 to accept"


def test_text_golden(report) -> None:  # type: ignore[no-untyped-def]
    text = render_check(report, verbose=False, color=False, width=100)
    assert "\x1b[" not in text
    golden("seed003.txt", text)


def test_text_verbose_golden(report) -> None:  # type: ignore[no-untyped-def]
    golden("seed003-verbose.txt", render_check(report, verbose=True, color=False, width=100))


def test_colour_only_when_asked(report) -> None:  # type: ignore[no-untyped-def]
    assert "\x1b[" in render_check(report, color=True)


def test_markdown_golden(report) -> None:  # type: ignore[no-untyped-def]
    golden("seed003.md", render_check_markdown(report))


def test_junit_is_valid_xml_with_one_failure(report) -> None:  # type: ignore[no-untyped-def]
    xml = render_check_junit(report)
    golden("seed003.junit.xml", xml)
    suite = ET.fromstring(xml).find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    failed = [tc.get("name") for tc in suite.iter("testcase") if tc.find("failure") is not None]
    assert failed == ["TE-NO-BACKEND"]


def test_json_contract(report) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(json.dumps(report_dict(report)))
    assert doc["schema_version"] == 1
    f = doc["findings"][0]
    assert set(f) >= {"rule_id", "severity", "title", "message", "status", "fixes", "sources"}
    assert f["rule_id"] == "TE-NO-BACKEND" and f["severity"] == "error" and f["status"] == "fired"
    assert f["fixes"][0] == {
        "pins": [],
        "env": {"NVTE_UNFUSED_ATTN": "1"},
        "workload": {},
        "config": [],
        "description": "Let TE use UnfusedDotProductAttention",
        "cost": "unfused attention: correct but slower, O(seq^2) memory",
        "verified": True,
        "brings_up": f["fixes"][0]["brings_up"],
        "moves": [],
        "planned": False,
        "unsure": [],
    }
    assert isinstance(f["fixes"][0]["brings_up"], list)
    assert {b["id"]: b["available"] for b in doc["backends"]} == {"te.flash": False, "te.fused": False, "te.unfused": False}
    assert doc["summary"]["error"] == 1 and doc["summary"]["rules"] == 20
    assert doc["workload"]["head_dim_qk"] == 192 and doc["workload"]["head_dim_v"] == 128


def test_fail_threshold_and_strict(report) -> None:  # type: ignore[no-untyped-def]
    assert fail_count(report, "error", strict=False) == 1
    assert fail_count(report, "info", strict=False) == 1


def test_junit_failure_says_which_fix_may_not_apply(report) -> None:  # type: ignore[no-untyped-def]
    # an offered fix whose `when:` could not be decided carries the same note in JUnit as in text
    from dataclasses import replace

    findings = []
    for f in report.findings:
        if f.rule_id == "TE-NO-BACKEND" and f.fixes:
            fixes = (replace(f.fixes[0], when={"fact": "gpu.sm", "ge": 90}, unsure=("gpu.sm: no GPU found",)), *f.fixes[1:])
            f = replace(f, fixes=fixes)
        findings.append(f)
    xml = render_check_junit(replace(report, findings=tuple(findings)))
    (failure,) = [tc.find("failure") for tc in ET.fromstring(xml).iter("testcase") if tc.find("failure") is not None]
    assert "may not apply here: it is for gpu.sm >= 90; could not check gpu.sm: no GPU found" in (failure.text or "")
