"""Planner behaviour on small hand-written rule catalogues: candidates that trigger other rules
are discarded, torch moves only when it must (and takes flash-attn with it), pins respect
Python and the CUDA major, and package requirements come along."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict

import pytest

from doctor.fix.plan import distance, plan_fixes
from doctor.rules.cases import case_inputs
from doctor.rules.loader import Catalogue, load_catalogue


def pins(x) -> tuple:  # type: ignore[no-untyped-def]
    """A plan's or alternative's pins as `name==version` text."""
    return tuple(str(p) for p in x.pins)


def _catalogue(tmp_path: Path, text: str) -> Catalogue:
    (tmp_path / "rules.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
    return load_catalogue([tmp_path], builtin=False, use_cache=False)


HEAD = """
rules:
"""


def _rule(rid: str, when: str, fixes: str, fires: str, passes: str, severity: str = "error") -> str:
    return f"""
  - id: {rid}
    severity: {severity}
    area: test
    title: {rid}
    message: {rid} fires
    when: {when}
    fixes: {fixes}
    sources: [https://github.com/example/example/issues/1]
    tests:
      fires: [{fires}]
      passes: [{passes}]
"""


def test_a_candidate_that_triggers_another_rule_is_discarded(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    cat = _catalogue(
        tmp_path,
        HEAD
        + _rule("NEW-FA", '{package: flash-attn, version: ">=2.6"}', '[{description: pin below 2.6, pins: ["flash-attn==2.5.8"]}]',
                '{packages: {flash-attn: "2.6.3"}}', '{packages: {flash-attn: "2.5.6"}}')
        + _rule("BAD-258", '{package: flash-attn, version: ">=2.5.8,<2.6"}', "[]",
                '{packages: {flash-attn: "2.5.8"}}', '{packages: {flash-attn: "2.5.6"}}'),
    )
    facts, workload = case_inputs({"packages": {"flash-attn": "2.6.3", "torch": "2.4.1"}, "python": {"version": "3.10.1"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert pins(plan) == ("flash-attn==2.5.7",), "2.5.9.post1 and 2.5.8 clear NEW-FA but fire BAD-258"
    assert plan.cleared == ("NEW-FA",) and not plan.new_findings
    rejected = [a for a in plan.alternatives if "flash-attn==2.5.8" in pins(a)]
    assert rejected and "also triggers BAD-258" in rejected[0].why


CUDNN_RULE = _rule(
    "OLD-CUDNN", '{fact: cudnn.version, lt: "9.5"}', '[{description: move torch, pins: ["torch==2.7.1"], cost: a torch upgrade}]',
    '{packages: {torch: "2.4.1"}, cudnn: {version: "9.1.0"}}', '{packages: {torch: "2.7.1"}, cudnn: {version: "9.5.1"}}',
)


def test_torch_moves_only_when_it_must_and_flash_attn_follows(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    cat = _catalogue(tmp_path, HEAD + CUDNN_RULE)
    case: Dict[str, Any] = {
        "packages": {"torch": "2.4.1", "flash-attn": "2.6.3"},
        "torch": {"version": "2.4.1", "cuda": "12.1", "cxx11_abi": False},
        "cudnn": {"version": "9.1.0"},
        "python": {"version": "3.10.14"},
    }
    facts, workload = case_inputs(case)
    plan = plan_fixes(rel, cat, facts, workload)
    assert pins(plan) == ("torch==2.7.1", "flash-attn==2.8.0.post2")
    assert plan.torch_reason and "torch 2.4.1 -> 2.7.1" in plan.torch_reason and "OLD-CUDNN" in plan.torch_reason
    assert any(c.origin == "companion" and "no wheel for torch 2.7" in c.description for c in plan.changes)
    (wheel,) = plan.wheels
    assert wheel.filename == "flash_attn-2.8.0.post2+cu12torch2.7cxx11abiTRUE-cp310-cp310-linux_x86_64.whl"
    assert plan.steps[0].command == 'pip install "torch==2.7.1"'


def test_pins_respect_the_python_version(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    cat = _catalogue(tmp_path, HEAD + CUDNN_RULE)
    facts, workload = case_inputs({"packages": {"torch": "2.4.1"}, "cudnn": {"version": "9.1.0"}, "python": {"version": "3.8.18"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert pins(plan) == () and plan.unresolved == ("OLD-CUDNN",)
    assert any("torch==2.7.1 does not install on Python 3.8" in n for n in plan.notes)


def test_cudnn_wheel_follows_torch_cuda_major_and_conflicts_are_flagged(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    cat = _catalogue(
        tmp_path,
        HEAD
        + _rule("CUDNN-9-21", '{fact: cudnn.version, lt: "9.21"}', '[{description: newer cuDNN, pins: ["nvidia-cudnn-cu12==9.21.0.82"]}]',
                '{packages: {torch: "2.11.0"}, cudnn: {version: "9.19.0"}}', '{packages: {torch: "2.11.0"}, cudnn: {version: "9.21.0"}}'),
    )
    facts, workload = case_inputs({"packages": {"torch": "2.11.0", "nvidia-cudnn-cu13": "9.19.0.56"}, "torch": {"version": "2.11.0", "cuda": "13.0"}, "cudnn": {"version": "9.19.0"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert pins(plan) == ("nvidia-cudnn-cu13==9.21.0.82",), "torch 2.11 is a CUDA 13 build"
    assert any("becomes nvidia-cudnn-cu13==9.21.0.82" in n for n in plan.notes)
    assert plan.conflicts and "torch 2.11.0 requires nvidia-cudnn-cu13==9.19.0.56" in plan.conflicts[0]
    torch_alt = plan.alternatives[0]
    assert torch_alt.pins and str(torch_alt.pins[0]).startswith("torch==") and "pip installs it without complaint" in torch_alt.why


def test_requirements_of_a_release_come_with_it(cat, rel) -> None:  # type: ignore[no-untyped-def]
    # Qwen2-MoE keeps its FlashAttention2 class until transformers 5.0, so no newer transformers
    # clears XTuner 0.1.x's patch: a downgrade or XTuner 0.2.0 (which pins transformers 4.48.0).
    facts, workload = case_inputs(
        {"packages": {"xtuner": "0.1.23", "transformers": "4.48.3", "flash-attn": "2.6.3"}, "imports": {"flash_attn": {"status": "ok"}},
         "python": {"version": "3.10.14"}, "workload": {"varlen": False, "model_type": "qwen2_moe"}}
    )
    plan = plan_fixes(rel, cat, facts, workload)
    assert pins(plan) == ("transformers==4.42.4",)
    moves = [pins(a) for a in plan.alternatives if any(p.name == "xtuner" for p in a.pins)]
    assert moves and all("transformers==4.48.0" in pins for pins in moves), "xtuner 0.2.0 pins transformers==4.48.0"


def test_no_findings_no_plan(cat, rel) -> None:  # type: ignore[no-untyped-def]
    facts, workload = case_inputs({"packages": {"torch": "2.7.1"}, "gpu": "8.0"})
    plan = plan_fixes(rel, cat, facts, workload)
    assert plan.targets == () and pins(plan) == () and not plan.unresolved and plan.verified


def test_distance_weighs_major_over_minor_over_patch() -> None:
    order = ["2.5.8", "2.5.9.post1", "2.6.0.post1", "2.6.1", "2.6.2", "2.6.3"]
    assert distance("2.6.3", "2.5.9.post1", order) < distance("2.6.3", "2.5.8", order)
    assert distance("2.6.3", "2.5.8", order) < distance("1.13.0", "2.1.0")
    assert distance("2.6.3", "2.6.1", order) < distance("2.6.3", "2.5.9.post1", order)


def test_a_pin_that_is_not_a_release_is_never_emitted(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    """TransformerEngine 2.0 shipped on GitHub and NGC only: PyPI jumps from 1.13.0 to 2.1.0."""
    cat = _catalogue(
        tmp_path,
        HEAD
        + _rule("OLD-TE", '{package: transformer-engine, version: "<2.0"}', '[{description: upgrade TE, pins: ["transformer-engine==2.0.0"]}]',
                '{packages: {transformer-engine: "1.13.0"}}', '{packages: {transformer-engine: "2.1.0"}}'),
    )
    facts, workload = case_inputs({"packages": {"transformer-engine": "1.13.0"}, "python": {"version": "3.10.14"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert pins(plan) == ("transformer-engine[pytorch]==2.1.0",), "the nearest real release in the fix's direction (with TE's torch extension)"
    assert any("transformer-engine==2.0.0 is not a release on PyPI" in n for n in plan.notes)
    assert all("transformer-engine==2.0.0" not in pins(a) for a in plan.alternatives)


def test_the_same_inputs_are_planned_once_per_process(cat, rel) -> None:  # type: ignore[no-untyped-def]
    """`check` and `fix` in one process plan the same snapshot once; other inputs, or another
    catalogue, are planned afresh."""
    from doctor.fix import plan as planner

    case = {"packages": {"transformer-engine": "1.13.0", "flash-attn": "2.6.3", "torch": "2.4.1"}, "python": {"version": "3.10.14"},
            "gpu": "8.0", "workload": {"context_parallel": {"size": 2, "comm_type": "p2p"}}}
    facts, workload = case_inputs(case)
    first = plan_fixes(rel, cat, facts, workload)
    again_facts, again_workload = case_inputs(case)  # equal values, other objects
    assert plan_fixes(rel, cat, again_facts, again_workload) is first
    assert "flash-attn==2.5.9.post1" in pins(first)
    other_facts, _ = case_inputs({**case, "packages": {**case["packages"], "flash-attn": "2.5.8"}})
    other = plan_fixes(rel, cat, other_facts, workload)
    assert other is not first and "flash-attn==2.5.9.post1" not in pins(other)
    # another catalogue object (a load of the same bytes returns this process's catalogue, so copy it)
    fresh = plan_fixes(rel, replace(cat), facts, workload)
    assert fresh is not first and fresh == first  # planned again, same result
    for _ in range(planner._PLANS_MAX + 2):  # the memo stays small
        plan_fixes(rel, cat, facts, replace(workload, seq_len_q=workload.seq_len_q + _ + 1))
    assert len(planner._PLANS) <= planner._PLANS_MAX


def test_an_alternative_that_moves_torch_past_every_flash_attn_wheel_says_to_rebuild_it(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    """The planner notes that no flash-attn release has a wheel for the new torch; an alternative
    (not the plan) with that torch move shows the note as advice instead of dropping it."""
    cat = _catalogue(
        tmp_path,
        HEAD
        + _rule("OLD-CUDNN", '{all: [{fact: cudnn.version, lt: "9.5"}, {env: X_OFF, is_set: false}]}',
                '[{description: switch it off, env: {X_OFF: "1"}}, {description: move torch, pins: ["torch==2.9.1"]}]',
                '{packages: {torch: "2.4.1"}, cudnn: {version: "9.1.0"}}', '{packages: {torch: "2.7.1"}, cudnn: {version: "9.5.1"}}'),
    )
    facts, workload = case_inputs({"packages": {"torch": "2.4.1", "flash-attn": "2.6.3"}, "torch": {"version": "2.4.1", "cuda": "12.1", "cxx11_abi": False},
                                   "cudnn": {"version": "9.1.0"}, "python": {"version": "3.10.14"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert plan.pins == ()  # the environment switch is the plan
    (alt,) = [a for a in plan.alternatives if pins(a.fix) == ("torch==2.9.1",)]
    assert alt.fix.config == ("no flash-attn release has a prebuilt wheel for torch 2.9: rebuild flash-attn 2.6.3 from source after moving torch",)


def test_a_fix_with_when_is_planned_only_where_it_may_apply(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    # c478de8: a fix with `when:` false is not offered; the planner (attn-doctor fix, and the
    # change `check` leads a finding with) read rule.fixes directly and planned it anyway, and
    # generated releases in its direction too. Where the platform is not known, the Linux-only
    # pin is planned with a note that says what it is for and what could not be checked
    cat = _catalogue(
        tmp_path,
        HEAD
        + _rule("NEW-FA", '{package: flash-attn, version: ">=2.6"}',
                '[{description: pin below 2.6 (Linux wheels only), pins: ["flash-attn==2.5.8"], when: {fact: platform.os, eq: linux}}]',
                '{packages: {flash-attn: "2.6.3"}}', '{packages: {flash-attn: "2.5.6"}}'),
    )
    case: Dict[str, Any] = {"packages": {"flash-attn": "2.6.3", "torch": "2.4.1"}, "python": {"version": "3.10.1"}}
    facts, workload = case_inputs({**case, "platform": {"os": "Linux 6.8.0", "arch": "x86_64"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert pins(plan)[0].startswith("flash-attn==2.5.")
    assert not [s for s in plan.steps if "may not apply" in s.text]
    facts, workload = case_inputs({**case, "platform": {"os": "Windows 10", "arch": "AMD64"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert not plan.changes and "NEW-FA" not in plan.cleared
    facts, workload = case_inputs(case)
    plan = plan_fixes(rel, cat, facts, workload)
    notes = [s.text for s in plan.steps if s.kind == "note" and "NEW-FA" in s.rule_ids]
    assert notes and "may not apply here" in notes[0] and "platform.os = linux" in notes[0], notes


def test_a_pin_pypi_has_no_wheel_for_on_this_platform_is_not_planned(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    # PyPI's newest torch for Intel macOS is 2.2.2: a rule that pins torch 2.6.0 is not planned
    # there (with a note), and the planner looks for a torch that has a wheel instead
    cat = _catalogue(
        tmp_path,
        HEAD
        + _rule("OLD-TORCH", '{package: torch, version: "<2.1"}', '[{description: upgrade torch, pins: ["torch==2.6.0"]}]',
                '{packages: {torch: "2.0.1"}}', '{packages: {torch: "2.6.0"}}'),
    )
    case: Dict[str, Any] = {"packages": {"torch": "2.0.1"}, "torch": {"version": "2.0.1"}, "python": {"version": "3.10.1"}}
    facts, workload = case_inputs({**case, "platform": {"os": "Darwin 23.6.0", "arch": "x86_64"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert "torch==2.6.0" not in pins(plan)
    assert all(rel.platform_ok("torch", p.split("==")[1], "darwin-x86_64") for p in pins(plan) if p.startswith("torch=="))
    assert any("no torch==2.6.0 wheel for darwin-x86_64" in n for n in plan.notes), plan.notes
    assert pins(plan), "a torch that has an Intel-mac wheel still clears it"
    facts, workload = case_inputs({**case, "platform": {"os": "Darwin 23.6.0", "arch": "arm64"}})
    assert not [n for n in plan_fixes(rel, cat, facts, workload).notes if "wheel for" in n]


def test_a_torch_pin_whose_pypi_wheel_here_is_cpu_only_is_not_planned(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    # PyPI's aarch64 torch 2.8.0 is a CPU build (nvidia-* requirements marked x86_64, no
    # libtorch_cuda.so): not planned on aarch64 Linux (with a note), and no torch below 2.11 instead
    cat = _catalogue(
        tmp_path,
        HEAD
        + _rule("OLD-TORCH", '{package: torch, version: "<2.1"}', '[{description: upgrade torch, pins: ["torch==2.8.0"]}]',
                '{packages: {torch: "2.0.1"}}', '{packages: {torch: "2.8.0"}}'),
    )
    case: Dict[str, Any] = {"packages": {"torch": "2.0.1"}, "torch": {"version": "2.0.1", "cuda": "11.8"}, "python": {"version": "3.11.9"}}
    facts, workload = case_inputs({**case, "platform": {"os": "Linux 6.8.0", "arch": "aarch64", "libc": "glibc 2.39"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert "torch==2.8.0" not in pins(plan)
    assert all(rel.cuda_build_ok("torch", p.split("==")[1], "linux-aarch64") for p in pins(plan) if p.startswith("torch=="))
    assert any("torch==2.8.0 for linux-aarch64 is a CPU-only build" in n for n in plan.notes), plan.notes
    facts, workload = case_inputs({**case, "platform": {"os": "Linux 6.8.0", "arch": "x86_64", "libc": "glibc 2.39"}})
    assert not [n for n in plan_fixes(rel, cat, facts, workload).notes if "CPU-only" in n]


def test_torchvision_and_torchaudio_follow_a_torch_move(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    """torchvision/torchaudio wheels pin torch exactly (their Requires-Dist, read into the release
    catalogue): a plan that moves torch moves them to the releases built for the new torch, in
    torch's own pip command, and pip's check over the real metadata then finds no conflict."""
    cat = _catalogue(tmp_path, HEAD + CUDNN_RULE)
    case: Dict[str, Any] = {
        "packages": {"torch": "2.4.1", "torchvision": "0.19.1", "torchaudio": "2.4.1"},
        "torch": {"version": "2.4.1", "cuda": "12.1"},
        "cudnn": {"version": "9.1.0"},
        "python": {"version": "3.10.14"},
    }
    facts, workload = case_inputs(case)
    plan = plan_fixes(rel, cat, facts, workload)
    assert pins(plan) == ("torch==2.7.1", "torchaudio==2.7.1", "torchvision==0.22.1")
    assert plan.steps[0].command == 'pip install "torch==2.7.1" "torchvision==0.22.1" "torchaudio==2.7.1"'
    assert not any("torchvision" in s.command for s in plan.steps[1:] if s.command.startswith("pip"))
    assert plan.steps[-1].command.endswith("--assume torchvision==0.22.1")  # the re-check sees them too
    assert not plan.conflicts


def test_torch_companions_pick_the_release_built_for_that_torch(rel) -> None:  # type: ignore[no-untyped-def]
    from doctor.fix.companions import torch_companions, with_torch_companions
    from doctor.model import Fix, Pin

    # an installed companion that already accepts the new torch stays; one that does not moves
    assert torch_companions(rel, {"torchvision": "0.24.1"}, "2.9.1") == ([], [])
    assert torch_companions(rel, {"torchvision": "0.24.0+cu128"}, "2.9.1+cu128")[0] == [Pin("torchvision", "0.24.1")]
    assert torch_companions(rel, {"torchvision": "0.25.0", "torchaudio": "2.10.0"}, "2.7.1")[0] == [Pin("torchvision", "0.22.1"), Pin("torchaudio", "2.7.1")]
    # xformers up to 0.0.30 pins torch exactly too; 0.0.31 on asks only for a torch floor
    assert torch_companions(rel, {"xformers": "0.0.28.post2"}, "2.5.1")[0] == [Pin("xformers", "0.0.29.post1")]
    assert torch_companions(rel, {"xformers": "0.0.33.post2"}, "2.9.1")[0] == []
    # torchaudio 2.11 on names no torch: its own number says which torch it is built for
    assert torch_companions(rel, {"torchaudio": "2.10.0"}, "2.11.0")[0] == [Pin("torchaudio", "2.11.0")]
    assert torch_companions(rel, {"torchaudio": "2.11.0"}, "2.7.1")[0] == [Pin("torchaudio", "2.7.1")]
    # no torchvision release is built for a torch PyPI has no torchvision for: advice, no pin
    got, advice = torch_companions(rel, {"torchvision": "0.25.0"}, "1.13.1")
    assert got == [] and advice and "no torchvision release for torch 1.13.1" in advice[0]
    # a fix without a torch pin, or with no companion installed, is unchanged
    fix = Fix("move torch", pins=(Pin("torch", "2.7.1"),))
    assert with_torch_companions(fix, {"torch": "2.10.0"}, rel) == fix
    assert with_torch_companions(Fix("x", pins=(Pin("flash-attn", "2.8.3"),)), {"torchvision": "0.25.0"}, rel).pins == (Pin("flash-attn", "2.8.3"),)
    moved = with_torch_companions(fix, {"torch": "2.10.0", "torchvision": "0.25.0"}, rel)
    assert moved.pins == (Pin("torch", "2.7.1"), Pin("torchvision", "0.22.1")) and "torchvision 0.22.1" in moved.description


def test_check_drops_a_rule_pin_that_breaks_an_installed_package(cat) -> None:  # type: ignore[no-untyped-def]
    """A rule's flash-attn pin above transformer-engine-torch 1.10's flash-attn<=2.4.2 is what pip
    would report as broken after installing it: the re-check does not call it verified (sample-23
    row 29), while a pin inside the cap is."""
    from doctor.fix.recheck import uninstallable
    from doctor.model import Fix, Pin

    facts, _ = case_inputs({
        "packages": {"transformers": "4.44.2", "flash-attn": "2.2.5", "torch": "2.1.2", "transformer-engine": "1.10.0", "transformer-engine-torch": "1.10.0"},
        "torch": {"version": "2.1.2", "cuda": "12.1"},
        "python": {"version": "3.10.12"},
    })
    broken = uninstallable(facts, Fix("x", pins=(Pin("flash-attn", "2.7.4.post1"),)))
    assert broken and "transformer-engine-torch 1.10.0 requires flash-attn" in broken[0]
    assert uninstallable(facts, Fix("x", pins=(Pin("flash-attn", "2.3.1.post1"),))) == ()


def _check_lead(rel, cat: Catalogue, case: Dict[str, Any], rule_id: str):  # type: ignore[no-untyped-def]
    """The fix plan for a case, and the first fix `check` shows for `rule_id` (after the plan is
    laid over the findings, as `check` does)."""
    from doctor import app as core
    from doctor.rules.evaluate import diagnose

    facts, workload = case_inputs(case)
    inputs = core.Inputs(facts=facts, workload=workload, catalogue=cat)
    diagnosis = diagnose(cat, facts, workload)
    plan = plan_fixes(rel, cat, facts, workload, diagnosis)
    report = core.with_planned_fixes(core.check(inputs, diagnosis=diagnosis), inputs, diagnosis)
    return plan, next(f for f in report.findings if f.rule_id == rule_id).fixes[0]


def test_check_shows_the_plan_part_with_the_changes_it_needs_or_not_at_all(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    # Audit 28 row 22: the plan upgraded transformers 4.44.2 -> 4.55.0 over torch 2.0.1 and moved
    # torch because 4.55 disables a torch below 2.1; `check` led the finding with the transformers
    # pin alone, which re-checked brings that error up ("the plan of `attn-doctor fix`", not
    # verified). The change the plan makes for what its part brings up now belongs to that part.
    cat = _catalogue(
        tmp_path,
        HEAD
        + _rule("OLD-TF", '{package: transformers, version: "<4.52"}', '[{description: upgrade transformers, pins: ["transformers==4.55.0"]}]',
                '{packages: {transformers: "4.44.2"}}', '{packages: {transformers: "4.55.0"}}')
        + _rule("TF-TORCH-FLOOR", '{all: [{package: transformers, version: ">=4.52"}, {package: torch, version: "<2.1"}]}',
                '[{description: move torch, pins: ["torch==2.1.2"]}]',
                '{packages: {transformers: "4.55.0", torch: "2.0.1"}}', '{packages: {transformers: "4.55.0", torch: "2.1.2"}}'),
    )
    plan, lead = _check_lead(rel, cat, {"packages": {"transformers": "4.44.2", "torch": "2.0.1"}, "torch": {"version": "2.0.1", "cuda": "11.8"},
                                        "python": {"version": "3.10.12"}}, "OLD-TF")
    assert "OLD-TF" in plan.cleared and any(p.startswith("torch==") for p in pins(plan)), pins(plan)
    assert lead.planned and lead.verified, lead
    assert {p.name for p in lead.pins} >= {"transformers", "torch"}, lead.pins


@pytest.mark.parametrize("third_fixes", ["[]", '[{description: move fa, pins: ["flash-attn==2.5.8"]}]'])
def test_check_shows_the_whole_plan_where_it_clears_what_its_part_brings_up_under_another_finding(tmp_path: Path, rel, third_fixes: str) -> None:  # type: ignore[no-untyped-def]
    # check-R5 of sample 28: the transformers upgrade brings up TF-NEEDS-FA, which the plan clears
    # with the flash-attn pin it filed under OLD-FA (TF-NEEDS-FA offers nothing of its own, or the
    # same pin). `check` showed no plan fix for OLD-TF while `fix` says the plan clears it; the
    # rest of the plan, re-checked clean as a whole, now belongs to OLD-TF's way out.
    cat = _catalogue(
        tmp_path,
        HEAD
        + _rule("OLD-TF", '{package: transformers, version: "<4.52"}', '[{description: upgrade transformers, pins: ["transformers==4.55.0"]}]',
                '{packages: {transformers: "4.44.2"}}', '{packages: {transformers: "4.55.0"}}')
        + _rule("OLD-FA", '{all: [{package: flash-attn, version: "<2.5"}, {package: flash-attn, installed: true}]}',
                '[{description: move fa, pins: ["flash-attn==2.5.8"]}]', '{packages: {flash-attn: "2.3.3"}}', '{packages: {flash-attn: "2.5.8"}}')
        + _rule("TF-NEEDS-FA", '{all: [{package: transformers, version: ">=4.52"}, {package: flash-attn, version: "<2.4"}]}', third_fixes,
                '{packages: {transformers: "4.55.0", flash-attn: "2.3.3"}}', '{packages: {transformers: "4.55.0", flash-attn: "2.5.8"}}'),
    )
    plan, lead = _check_lead(rel, cat, {"packages": {"transformers": "4.44.2", "torch": "2.4.1", "flash-attn": "2.3.3"},
                                        "torch": {"version": "2.4.1", "cuda": "12.1", "cxx11_abi": False}, "python": {"version": "3.10.12"}}, "OLD-TF")
    assert "OLD-TF" in plan.cleared, plan.cleared
    assert lead.planned and lead.verified, lead
    assert {p.name for p in lead.pins} >= {"transformers", "flash-attn"}, lead.pins


def test_a_flash_attn_pin_that_would_need_a_build_against_a_cxx20_torch_is_not_planned(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    """No flash-attn release has a wheel for torch 2.14, and a source build fails there (flash-attn
    compiles with -std=c++17, torch 2.14's headers need C++20): a fix that moves flash-attn is not
    planned on torch 2.14 (nor any release generated in its direction), and the plan says why;
    on torch 2.8 the same fix installs a wheel and is planned."""
    cat = _catalogue(
        tmp_path,
        HEAD
        + _rule("OLD-FA", '{package: flash-attn, version: "<2.7"}', '[{description: upgrade flash-attn, pins: ["flash-attn==2.8.3"]}]',
                '{packages: {flash-attn: "2.6.3"}}', '{packages: {flash-attn: "2.8.3"}}'),
    )
    base: Dict[str, Any] = {"python": {"version": "3.11.9"}, "platform": {"os": "Linux 6.8.0", "arch": "x86_64", "libc": "glibc 2.39"}}
    facts, workload = case_inputs({**base, "packages": {"torch": "2.14.0", "flash-attn": "2.6.3"},
                                   "torch": {"version": "2.14.0", "cuda": "13.0", "cxx11_abi": True}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert not [p for p in pins(plan) if p.startswith("flash-attn")]
    assert not [p for a in plan.alternatives for p in pins(a.fix) if p.startswith("flash-attn")]
    assert any("cannot be built against it" in n and "C++20" in n for n in plan.notes), plan.notes
    facts, workload = case_inputs({**base, "packages": {"torch": "2.8.0", "flash-attn": "2.6.3"},
                                   "torch": {"version": "2.8.0", "cuda": "12.8", "cxx11_abi": True}})
    assert "flash-attn==2.8.3" in pins(plan_fixes(rel, cat, facts, workload))


def test_no_torch_pin_is_planned_over_a_rocm_torch(tmp_path: Path, rel) -> None:  # type: ignore[no-untyped-def]
    # `fix` installs a torch pin from PyPI unless the installed torch is a +cuXXX build; PyPI's
    # Linux torch is a CUDA build, so over a ROCm torch the pin would lose the AMD GPU: no torch
    # pin at all there (a note says to use PyTorch's ROCm index), the same on a CUDA torch
    cat = _catalogue(
        tmp_path,
        HEAD
        + _rule("OLD-TORCH", '{package: torch, version: "<2.1"}', '[{description: upgrade torch, pins: ["torch==2.8.0"]}]',
                '{packages: {torch: "2.0.1"}}', '{packages: {torch: "2.8.0"}}'),
    )
    linux = {"os": "Linux 6.8.0", "arch": "x86_64", "libc": "glibc 2.39"}
    case: Dict[str, Any] = {"packages": {"torch": "2.0.1"}, "python": {"version": "3.11.9"}, "platform": linux}
    facts, workload = case_inputs({**case, "torch": {"version": "2.0.1+rocm5.4.2", "hip": "5.4.22803"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert not [p for p in pins(plan) if p.startswith("torch==")], pins(plan)
    assert any("torch==2.8.0 from PyPI is no ROCm build" in n for n in plan.notes), plan.notes
    assert not rel.cuda_build_ok("torch", "2.8.0", "linux-x86_64", "2.0.1+rocm5.4.2")
    assert not rel.cuda_build_ok("torch", "2.8.0", "linux-x86_64", "2.0.1", rocm=True)
    facts, workload = case_inputs({**case, "torch": {"version": "2.0.1+cu118", "cuda": "11.8"}})
    assert [p for p in pins(plan_fixes(rel, cat, facts, workload)) if p.startswith("torch==")]
    # an Intel XPU torch (+xpu) the same: PyPI's torch would replace it
    facts, workload = case_inputs({**case, "torch": {"version": "2.0.1+xpu"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert not [p for p in pins(plan) if p.startswith("torch==")], pins(plan)
    assert any("no XPU build" in n for n in plan.notes), plan.notes
    # an Ascend NPU torch (torch-npu beside it): torch-npu is built for one torch release, so
    # moving torch alone breaks torch_npu; not planned, and the re-check says why
    npu_case = {**case, "packages": {"torch": "2.0.1", "torch-npu": "2.1.0.post8"}}
    facts, workload = case_inputs({**npu_case, "torch": {"version": "2.0.1+cpu"}})
    plan = plan_fixes(rel, cat, facts, workload)
    assert not [p for p in pins(plan) if p.startswith("torch==")], pins(plan)
    assert any("would leave torch-npu without" in n for n in plan.notes), plan.notes
    assert not rel.cuda_build_ok("torch", "2.8.0", "linux-x86_64", "2.0.1", npu=True)
    from doctor.fix.recheck import uninstallable

    fix = cat.rules[0].fixes[0]
    assert any("torch-npu" in why for why in uninstallable(facts, fix))
