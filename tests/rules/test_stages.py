"""Stages: where in a run a finding's failure shows. An error at an earlier stage stops the run
before a later finding can show, so the report lists the later one behind it (text, markdown,
JUnit, JSON) instead of presenting both as what the user meets first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest

from doctor.app import Inputs, check
from doctor.errors import RuleError
from doctor.report.check_json import report_dict
from doctor.report.check_junit import render_check_junit
from doctor.report.check_markdown import render_check_markdown
from doctor.report.check_text import render_check
from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import Catalogue, load_catalogue

RULES = """
rules:
  - id: Z-NO-KERNELS
    severity: error
    stage: device
    title: no kernels for this GPU
    message: every kernel fails on this GPU
    when: {fact: gpu.sm_max, ge: 100}
    sources: [https://github.com/pytorch/pytorch/issues/1]
    tests:
      fires: [{gpu: "10.0"}]
      passes: [{gpu: "9.0"}]
  - id: A-STEP-FAILS
    severity: error
    stage: step
    title: attention refuses the workload
    message: the first step raises
    when: {env: STEP, eq: "1"}
    sources: [https://github.com/pytorch/pytorch/issues/2]
    tests:
      fires: [{env: {STEP: "1"}}]
      passes: [{env: {}}]
  - id: B-IMPORT-WARNING
    severity: warning
    stage: import
    title: an import warning
    message: a warning at import
    when: {env: WARN, eq: "1"}
    sources: [https://github.com/pytorch/pytorch/issues/3]
    tests:
      fires: [{env: {WARN: "1"}}]
      passes: [{env: {}}]
  - id: C-NO-STAGE
    severity: error
    title: no stage said
    message: unordered
    when: {env: PLAIN, eq: "1"}
    sources: [https://github.com/pytorch/pytorch/issues/4]
    tests:
      fires: [{env: {PLAIN: "1"}}]
      passes: [{env: {}}]
"""


def _cat(tmp_path: Path, text: str = RULES) -> Catalogue:
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return load_catalogue([p], builtin=False, use_cache=False)


def _findings(cat: Catalogue, case: Dict[str, Any]) -> Dict[str, Any]:
    facts, wl = case_inputs(case)
    return {f.rule_id: f for f in diagnose(cat, facts, wl).findings if f.status == "fired"}


def test_a_later_stage_is_listed_behind_an_earlier_error(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    got = _findings(cat, {"gpu": "10.0", "env": {"STEP": "1", "WARN": "1", "PLAIN": "1"}})
    assert got["A-STEP-FAILS"].behind == ("Z-NO-KERNELS",)
    assert got["Z-NO-KERNELS"].behind == ()
    # a warning does not stop the run: nothing is behind it
    assert got["B-IMPORT-WARNING"].behind == ()
    # a finding that does not say its stage is not ordered
    assert got["C-NO-STAGE"].behind == ()
    # on a Hopper GPU nothing stops the run first
    assert _findings(cat, {"gpu": "9.0", "env": {"STEP": "1"}})["A-STEP-FAILS"].behind == ()


def test_the_earlier_error_is_listed_first(tmp_path: Path) -> None:
    facts, wl = case_inputs({"gpu": "10.0", "env": {"STEP": "1"}})
    order = [f.rule_id for f in diagnose(_cat(tmp_path), facts, wl).findings if f.status == "fired"]
    assert order.index("Z-NO-KERNELS") < order.index("A-STEP-FAILS")


def test_every_format_says_which_failure_comes_first(tmp_path: Path) -> None:
    facts, wl = case_inputs({"gpu": "10.0", "env": {"STEP": "1"}})
    report = check(Inputs(facts=facts, workload=wl, catalogue=_cat(tmp_path)), kernels_skipped="--no-kernels")
    text = render_check(report, verbose=False, color=False, width=200)
    assert "Comes after Z-NO-KERNELS: the run stops there first; this shows in the first training or inference step" in " ".join(text.split())
    assert text.index("Z-NO-KERNELS  no kernels") < text.index("A-STEP-FAILS  attention refuses")
    assert "Comes after Z-NO-KERNELS" in render_check_markdown(report)
    assert "Comes after Z-NO-KERNELS" in render_check_junit(report)
    doc = {f["rule_id"]: f for f in json.loads(json.dumps(report_dict(report)))["findings"]}
    assert doc["A-STEP-FAILS"]["stage"] == "step" and doc["A-STEP-FAILS"]["behind"] == ["Z-NO-KERNELS"]
    assert doc["Z-NO-KERNELS"]["behind"] == []


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda s: s.replace("stage: device", "stage: runtime"), "'runtime' is not one of"),
        (lambda s: s.replace("    stage: step\n", "    stage: step\n    silent_wrong_results: true\n"), "stage `numbers`"),
    ],
)
def test_bad_stages_are_refused(tmp_path: Path, edit: Any, needle: str) -> None:
    with pytest.raises(RuleError) as e:
        _cat(tmp_path, edit(RULES))
    assert needle in str(e.value)


def test_a_backend_rule_has_no_stage(tmp_path: Path) -> None:
    p = tmp_path / "b.yaml"
    p.write_text(
        "rules:\n  - id: X-OFF\n    disables: te.fused\n    stage: step\n    title: t\n    message: m\n"
        "    when: {env: X, eq: '1'}\n    sources: [https://github.com/NVIDIA/TransformerEngine/issues/1]\n"
        "    tests: {fires: [{env: {X: '1'}}], passes: [{env: {}}]}\n"
    )
    with pytest.raises(RuleError):
        load_catalogue([p], builtin=False, use_cache=False)


def test_fa3_step_failures_are_listed_behind_te_failing_to_import_the_fa3_interface() -> None:
    # TE 2.8-2.14 import flash_attn_3.flash_attn_interface, which FA3 3.0.0's own build does not
    # install: the import stops the run first, and FA3's deterministic-backward refusal (reached
    # once the interface is copied into place) is listed behind it (sample 29 row 15)
    cat = load_catalogue()
    facts, wl = case_inputs({
        "packages": {"transformer-engine": "2.8.0", "flash-attn-3": "3.0.0"},
        "gpu": "9.0",
        "env": {"NVTE_FUSED_ATTN": "0"},
        "imports": {"transformer_engine.pytorch": {"status": "error", "error": "ModuleNotFoundError: No module named 'flash_attn_3.flash_attn_interface'"}},
        "workload": {"head_dim": 256, "deterministic": True, "training": True},
    })
    got = {f.rule_id: f for f in diagnose(cat, facts, wl).findings if f.status == "fired"}
    assert got["TE-FA3-INTERFACE-MISSING"].behind == ()
    assert got["TE-FLASH-FA3-DETERMINISTIC-BWD-RAISES"].behind == ("TE-FA3-INTERFACE-MISSING",)


def test_te_fa3_import_error_orders_only_runs_that_import_te() -> None:
    # The probe records transformer_engine.pytorch's import whenever TE is installed. An HF run on
    # SDPA with accelerate 1.10 (TE imported only inside its fp8 functions) never imports it, so its
    # own failure is not listed behind TE-FA3-INTERFACE-MISSING; accelerate 0.33 imports TE at
    # module level, and there the order holds (sample 29 check-R4)
    cat = load_catalogue()

    def fired(accelerate: str) -> Dict[str, Any]:
        facts, wl = case_inputs({
            "packages": {"transformer-engine": "2.8.0", "flash-attn-3": "3.0.0", "torch": "2.6.0",
                         "transformers": "4.44.2", "accelerate": accelerate},
            "torch": {"version": "2.6.0", "cuda": "12.4"},
            "gpu": "10.0",
            "imports": {"transformer_engine.pytorch": {"status": "error", "error": "ModuleNotFoundError: No module named 'flash_attn_3.flash_attn_interface'"}},
            "workload": {"framework": "transformers", "model_type": "llama", "attn_implementation": "sdpa"},
        })
        return {f.rule_id: f for f in diagnose(cat, facts, wl).findings if f.status == "fired"}

    new = fired("1.10.0")
    assert "TE-FA3-INTERFACE-MISSING" not in new
    assert new["TORCH-NO-BLACKWELL-KERNELS"].behind == ()
    old = fired("0.33.0")
    assert old["TORCH-NO-BLACKWELL-KERNELS"].behind == ("TE-FA3-INTERFACE-MISSING",)


@pytest.mark.parametrize("rule_id, packages, workload", [
    # check_set_window_size asserts in DotProductAttention.__init__ (TE 2.8.0 wheel
    # dot_product_attention.py:326): setup
    ("TE-WINDOW-SIZE-REFUSED", {"transformer-engine": "2.1.0", "flash-attn": "2.7.4.post1", "flashattn-hopper": "3.0.0b1"},
     {"window_size": [-1, 64], "mask": "no_mask"}),
    # FlashAttention.__init__ asserts the flash-attn version while DotProductAttention is built
    # (TE 1.11.0 wheel attention.py:4816-4821, built at :7055): setup
    ("TE-FA2-VERSION-ASSERT", {"transformer-engine": "1.11.0", "flash-attn": "2.0.4", "flashattn-hopper": "3.0.0b1"},
     {"deterministic": True}),
    # "No dot product attention backend is available" is raised in forward (TE 2.8.0 wheel
    # dot_product_attention.py:1355-1357): step
    ("TE-NO-BACKEND", {"transformer-engine": "1.11.0", "flash-attn": "2.3.6", "flashattn-hopper": "3.0.0b1"},
     {"alibi": True, "context_parallel": {"size": 2, "comm_type": "p2p", "impl": "te"}}),
])
def test_te_setup_and_step_errors_are_listed_behind_the_fa3_interface_import_error(rule_id: str, packages: Dict[str, str], workload: Dict[str, Any]) -> None:
    # these fired next to TE-FA3-INTERFACE-MISSING with no stage and no alongside (sample 29 check-R4)
    cat = load_catalogue()
    facts, wl = case_inputs({
        "packages": packages,
        "gpu": "9.0",
        "imports": {"transformer_engine.pytorch": {"status": "error", "error": "ModuleNotFoundError: No module named 'flashattn_hopper.flash_attn_interface'"}},
        "workload": workload,
    })
    got = {f.rule_id: f for f in diagnose(cat, facts, wl).findings if f.status == "fired"}
    assert got["TE-FA3-INTERFACE-MISSING"].behind == ()
    assert got[rule_id].behind == ("TE-FA3-INTERFACE-MISSING",)
