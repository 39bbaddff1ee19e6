"""A pin whose own Requires-Dist excludes an installed package makes pip move that package too
(`pip install ms-swift==3.7.0` over transformers 4.57.1 takes transformers down to the newest
release below 4.56). The re-check evaluates the rules with it moved, and `check` says so."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

import yaml
from typer.testing import CliRunner

from doctor.cli import app
from doctor.fix.recheck import apply_fix, moved_text, pip_moves, recheck
from doctor.model import Fix, Pin
from doctor.rules.cases import case_inputs, case_snapshot
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue

LINUX = {"os": "Linux 6.8.0", "arch": "x86_64", "libc": "glibc 2.35"}
SWIFT_WORKLOAD = {"framework": "ms-swift", "model_type": "qwen2_5_vl", "packing": "padding_free", "attn_implementation": "flash_attention_2"}


def _cli(tmp_path, case: Dict[str, Any], workload: Optional[Dict[str, Any]], *args: str) -> str:  # type: ignore[no-untyped-def]
    """The output of `attn-doctor ARGS --env SNAP [--workload WL]` for a rule-test-style case."""
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(case_snapshot(case)))
    argv = [*args, "--env", str(snap)]
    if workload is not None:
        wl = tmp_path / "wl.yaml"
        wl.write_text(yaml.safe_dump(workload))
        argv += ["--workload", str(wl)]
    return CliRunner().invoke(app, argv).output


SWIFT = {
    "packages": {"ms-swift": "3.6.0", "transformers": "4.57.1", "torch": "2.6.0"},
    "torch": {"version": "2.6.0", "cuda": "12.4"},
    "python": {"version": "3.11.7"},
    "gpu": "9.0",
}


def test_a_pins_own_cap_moves_the_installed_package_and_the_recheck_sees_it() -> None:
    facts, wl = case_inputs(SWIFT)
    fix = Fix("upgrade ms-swift", pins=(Pin("ms-swift", "3.7.0"),))
    # ms-swift 3.7.0 requires transformers<4.56: pip takes the newest release below it
    assert [(p.name, p.version) for p in pip_moves(facts, fix)] == [("transformers", "4.55.4")]
    assert moved_text(facts, fix) == ("transformers 4.57.1 -> 4.55.4",)
    after, _ = apply_fix(facts, wl, fix)
    assert after.packages["transformers"] == "4.55.4" and after.packages["ms-swift"] == "3.7.0"
    cat = load_catalogue()
    r = recheck(cat, facts, wl, fix, (), diagnose(cat, facts, wl))
    assert r.moves == ("transformers 4.57.1 -> 4.55.4",)


def test_a_pin_the_installed_packages_satisfy_moves_nothing() -> None:
    facts, _ = case_inputs(SWIFT)
    assert pip_moves(facts, Fix("peft", pins=(Pin("transformers", "4.57.1"),))) == ()
    assert pip_moves(facts, Fix("env only", env={"NVTE_FLASH_ATTN": "0"})) == ()


def test_a_move_only_through_a_package_the_list_does_not_show_is_not_counted() -> None:
    # unsloth 2025.1.6 accepts transformers 4.46.3; only the newest trl (not in this partial
    # package list, where a real install would have one) would want a newer transformers
    facts, _ = case_inputs({"packages": {"unsloth": "2024.12.4", "torch": "2.4.1", "transformers": "4.46.3"}, "gpu": "8.0"})
    assert pip_moves(facts, Fix("unsloth", pins=(Pin("unsloth", "2025.1.6"),))) == ()


def test_check_prints_what_pip_also_moves(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """TE-FA-BLOCK-TABLE-CP's `transformer-engine[pytorch]==1.10.0` pin: its
    transformer-engine-torch 1.10.0 caps flash-attn at 2.4.2, so pip takes the installed 2.5.8
    down; `check` shows the move in text and JSON beside the fix."""
    case = {"packages": {"transformer-engine": "1.9.0.post1", "transformer-engine-torch": "1.9.0", "flash-attn": "2.5.8"},
            "gpu": "8.0", "cudnn": {"version": "8.9.7"}}
    workload = {"context_parallel": {"size": 2, "comm_type": "p2p"}}
    text = " ".join(_cli(tmp_path, case, workload, "check", "--no-kernels").split())
    assert "pip also moves flash-attn 2.5.8 -> 2.4.2" in text
    doc = json.loads(_cli(tmp_path, case, workload, "check", "--no-kernels", "--format", "json"))
    finding = next(f for f in doc["findings"] if f["rule_id"] == "TE-FA-BLOCK-TABLE-CP")
    moves = [m for x in finding["fixes"] for m in x["moves"]]
    assert "flash-attn 2.5.8 -> 2.4.2" in moves, finding["fixes"]


def test_assume_moves_what_pip_would_move(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`check --assume ms-swift==3.7.0` evaluates what `pip install ms-swift==3.7.0` leaves:
    transformers 4.55.4, said in a note (the re-check command `fix` prints relies on this)."""
    out = _cli(tmp_path, SWIFT, None, "check", "--no-kernels", "--assume", "ms-swift==3.7.0")
    assert "pip would also move transformers 4.57.1 -> 4.55.4" in " ".join(out.split())


def test_no_moves_where_the_catalogues_markers_do_not_apply() -> None:
    """The release catalogue's Requires-Dist markers are read for Linux x86-64: on macOS pip
    may not move anything (axolotl 0.15.0 pins torch on Linux only), so nothing is claimed."""
    mac = {**SWIFT, "platform": {"os": "Darwin 23.6.0", "arch": "arm64"}}
    facts, _ = case_inputs(mac)
    assert pip_moves(facts, Fix("upgrade ms-swift", pins=(Pin("ms-swift", "3.7.0"),))) == ()


def test_a_probed_snapshot_counts_moves_through_packages_the_pins_bring_in() -> None:
    """A probe lists every installed distribution (and their Requires-Dist): a package the pin
    newly brings in is really new, and what it moves is pip's move too."""
    base = {"packages": {"unsloth": "2024.12.4", "torch": "2.4.1", "transformers": "4.46.3"}, "gpu": "8.0",
            "platform": LINUX}
    fix = Fix("unsloth", pins=(Pin("unsloth", "2025.1.6"),))
    partial, _ = case_inputs(base)
    probed, _ = case_inputs({**base, "requires": {"unsloth": ["torch>=2.4.0", "transformers>=4.46.1"]}})
    assert pip_moves(partial, fix) == ()
    moved = {p.name for p in pip_moves(probed, fix)}
    assert "transformers" in moved  # through the newest trl the pin brings in


def test_fix_costs_and_names_what_pip_moves(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ms-swift 3.6.1 clears SWIFT-QWEN-VL-PACKING-TRANSFORMERS-4-53 only because pip also takes
    transformers 4.57.1 down to 4.52.4: the plan counts that move (so it does not take 3.6.1 for
    one change when it is two), and a plan with such a pin names the move in its notes."""
    case = {**SWIFT, "packages": {**SWIFT["packages"], "flash-attn": "2.7.4.post1"},
            "platform": LINUX}
    doc = json.loads(_cli(tmp_path, case, SWIFT_WORKLOAD, "fix", "--format", "json"))
    assert "SWIFT-QWEN-VL-PACKING-TRANSFORMERS-4-53" in doc["cleared"]
    # not the ms-swift 3.6.1 upgrade, which works only through pip's transformers move
    assert "ms-swift==3.6.1" not in doc["pins"], doc["pins"]
    # the plan says what pip moves where its own pins make pip move something
    from doctor.fix.plan import _moves_note

    facts, _ = case_inputs(case)
    assert _moves_note(facts, {"ms-swift": "3.6.1"}) == (
        "pip also moves transformers 4.57.1 -> 4.52.4: the plan's pins require it, and the plan was re-checked with it moved",
    )
    assert _moves_note(facts, {"transformers": "4.52.4"}) == ()


def test_moves_on_linux_aarch64_read_markers_for_it() -> None:
    """ms-swift 3.7.0's transformers<4.56 carries no marker: pip moves transformers on a Grace
    (Linux aarch64) host too."""
    arm = {**SWIFT, "platform": {"os": "Linux 6.8.0", "arch": "aarch64", "libc": "glibc 2.35"}}
    facts, _ = case_inputs(arm)
    assert moved_text(facts, Fix("upgrade ms-swift", pins=(Pin("ms-swift", "3.7.0"),))) == ("transformers 4.57.1 -> 4.55.4",)


def test_a_workload_setting_the_workload_already_has_costs_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With trl 0.24.0 installed, ms-swift 3.6.1 would make pip move trl and transformers, while
    ms-swift 3.12.6 (with --attn_impl flash_attn, which the workload already states) moves
    nothing: the plan takes 3.12.6 (check-R9 of sample 29)."""
    case = {**SWIFT, "packages": {**SWIFT["packages"], "flash-attn": "2.7.4.post1", "trl": "0.24.0"},
            "platform": LINUX}
    doc = json.loads(_cli(tmp_path, case, SWIFT_WORKLOAD, "fix", "--format", "json"))
    assert doc["pins"] == ["ms-swift==3.12.6"], doc["pins"]
