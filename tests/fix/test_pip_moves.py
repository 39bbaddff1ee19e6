"""A pin whose own Requires-Dist excludes an installed package makes pip move that package too
(`pip install ms-swift==3.7.0` over transformers 4.57.1 takes transformers down to the newest
release below 4.56). The re-check evaluates the rules with it moved, and `check` says so."""

from __future__ import annotations

from doctor.fix.recheck import apply_fix, moved_text, pip_moves, recheck
from doctor.model import Fix, Pin
from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue

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
    """axolotl 0.15.0 requires a newer torch than the 2.4.1 installed: `check` shows the move
    in text and JSON beside the downgrade it offers (RFA-0-1-8-NEEDS-TRANSFORMERS-4-51)."""
    import json

    import yaml
    from typer.testing import CliRunner

    from doctor.cli import app
    from doctor.rules.cases import case_snapshot

    case = {"packages": {"ring-flash-attn": "0.1.8", "transformers": "5.4.0", "axolotl": "0.16.0", "torch": "2.4.1"},
            "torch": {"version": "2.4.1"}, "platform": {"os": "Darwin 23.6.0", "arch": "arm64"}}
    snap, wl = tmp_path / "snap.json", tmp_path / "wl.yaml"
    snap.write_text(json.dumps(case_snapshot(case)))
    wl.write_text(yaml.safe_dump({"framework": "axolotl", "context_parallel": {"size": 4, "impl": "ring_flash_attn"}}))
    runner = CliRunner()
    text = runner.invoke(app, ["check", "--no-kernels", "--env", str(snap), "--workload", str(wl)]).output
    assert "pip also moves torch 2.4.1 -> 2.8.0" in " ".join(text.split())
    doc = json.loads(runner.invoke(app, ["check", "--no-kernels", "--env", str(snap), "--workload", str(wl), "--format", "json"]).output)
    finding = next(f for f in doc["findings"] if f["rule_id"] == "RFA-0-1-8-NEEDS-TRANSFORMERS-4-51")
    moves = {tuple(x["pins"]): x["moves"] for x in finding["fixes"]}
    assert any("torch 2.4.1 -> 2.8.0" in m for m in moves.values() for m in m), moves


def test_assume_moves_what_pip_would_move(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`check --assume ms-swift==3.7.0` evaluates what `pip install ms-swift==3.7.0` leaves:
    transformers 4.55.4, said in a note (the re-check command `fix` prints relies on this)."""
    import json

    from typer.testing import CliRunner

    from doctor.cli import app
    from doctor.rules.cases import case_snapshot

    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(case_snapshot(SWIFT)))
    out = CliRunner().invoke(app, ["check", "--no-kernels", "--env", str(snap), "--assume", "ms-swift==3.7.0"]).output
    assert "pip would also move transformers 4.57.1 -> 4.55.4" in " ".join(out.split())
