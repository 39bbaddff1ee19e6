"""A fix that applies only somewhere (`fixes[].when:`) is offered only there, and the platform
facts it is usually keyed on read what the probe and snapshots record."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.errors import RuleError
from doctor.model import PlatformInfo
from doctor.rules.cases import run_rule_cases
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import Catalogue, load_catalogue
from doctor.snapshot import facts_from_snapshot
from doctor.workload import default_workload

RULE = """
rules:
  - id: MY-WHEEL
    severity: warning
    title: t
    message: m
    when: {package: flash-attn, version: "<2.8"}
    fixes:
      - description: any platform
        pins: ["flash-attn==2.8.3"]
      - description: the Linux x86-64 wheel
        when: {all: [{fact: platform.os, eq: linux}, {fact: platform.arch, eq: x86_64}]}
        pins: ["flash-attn==2.8.3.post1"]
    sources: [https://github.com/Dao-AILab/flash-attention/releases/tag/v2.8.3]
    tests:
      fires:
        - {packages: {flash-attn: "2.7.4"}, platform: {os: "Linux 6.8.0", arch: x86_64}, offers: [0, 1]}
        - {packages: {flash-attn: "2.7.4"}, platform: {os: "Windows 10", arch: AMD64}, offers: [0]}
        - {packages: {flash-attn: "2.7.4"}, offers: [0, 1]}
      passes: [{packages: {flash-attn: "2.8.3"}}]
"""


def _cat(tmp_path: Path, text: str = RULE) -> Catalogue:
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return load_catalogue([p], builtin=False, use_cache=False)


def _offered(cat: Catalogue, platform: dict) -> list:
    doc = {"packages": {"flash-attn": "2.7.4"}, "env": {}}
    if platform:
        doc["platform"] = platform
    d = diagnose(cat, facts_from_snapshot(doc, source="t"), default_workload())
    (finding,) = [f for f in d.findings if f.rule_id == "MY-WHEEL"]
    return [(f.description, f.unsure) for f in finding.fixes]


def test_fix_is_offered_only_where_its_condition_holds(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    assert _offered(cat, {"os": "Linux 6.8.0", "arch": "x86_64", "libc": "glibc 2.35"}) == [
        ("any platform", ()),
        ("the Linux x86-64 wheel", ()),
    ]
    assert _offered(cat, {"os": "Windows 10", "arch": "AMD64"}) == [("any platform", ())]
    assert _offered(cat, {"os": "Linux 6.8.0", "arch": "aarch64"}) == [("any platform", ())]


def test_undecided_fix_is_kept_and_says_why(tmp_path: Path) -> None:
    (first, second) = _offered(_cat(tmp_path), {})
    assert first == ("any platform", ())
    assert second[0] == "the Linux x86-64 wheel"
    assert second[1] and all(m.startswith("platform.") for m in second[1])


def test_offers_in_test_cases_are_checked(tmp_path: Path) -> None:
    cat = _cat(tmp_path)
    assert [o.ok for o in run_rule_cases(cat)] == [True, True, True, True]
    wrong = _cat(tmp_path, RULE.replace("arch: AMD64}, offers: [0]", "arch: AMD64}, offers: [0, 1]"))
    bad = [o for o in run_rule_cases(wrong) if not o.ok]
    assert len(bad) == 1 and "expected fixes [0, 1] offered, got [0]" in bad[0].describe()


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda s: s.replace("fact: platform.arch", "fact: platform.cpu"), "unknown fact 'platform.cpu'"),
        (lambda s: s.replace("offers: [0, 1]}\n        - {packages: {flash-attn: \"2.7.4\"}, platform: {os: \"Windows",
                             "offers: [0, 2]}\n        - {packages: {flash-attn: \"2.7.4\"}, platform: {os: \"Windows"),
         "fix index 2 but the rule has 2 fix(es)"),
        (lambda s: s.replace('passes: [{packages: {flash-attn: "2.8.3"}}]', 'passes: [{packages: {flash-attn: "2.8.3"}, offers: [0]}]'),
         "`offers` in a passes case"),
    ],
)
def test_bad_fix_conditions_and_offers_are_named(tmp_path: Path, edit, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuleError) as exc:
        _cat(tmp_path, edit(RULE))
    text = exc.value.one_line()
    assert text.startswith(f"{tmp_path / 'r.yaml'}:") and "MY-WHEEL" in text and needle in text, text


@pytest.mark.parametrize(
    "os_,arch,libc,want",
    [
        ("Linux 5.15.0-1056-aws", "x86_64", "glibc 2.35", ("linux", "x86_64", "2.35")),
        ("Windows 10", "AMD64", None, ("windows", "x86_64", None)),
        ("Darwin 24.1.0", "arm64", None, ("darwin", "aarch64", None)),
        ("Linux 6.1.0", "aarch64", "musl 1.2.4", ("linux", "aarch64", None)),
        ("Linux 5.4.0", "x86_64", "2.31", ("linux", "x86_64", "2.31")),  # a bare version is glibc's
        ("Linux 6.1.0", "x86_64", "1.2.4", ("linux", "x86_64", None)),  # a bare 1.x is not glibc's
        (None, None, None, (None, None, None)),
        ("win32", "x64", None, ("windows", "x86_64", None)),
        ("macOS 15.1", "arm64", None, ("darwin", "aarch64", None)),
    ],
)
def test_platform_facts_read_the_snapshot_words(os_, arch, libc, want) -> None:  # type: ignore[no-untyped-def]
    p = PlatformInfo(os_, arch, libc)
    assert (p.system, p.machine, p.glibc) == want


def test_probe_records_platform_that_rules_read() -> None:
    from doctor.probe.hostinfo import probe

    import platform as pyplatform

    host = probe()
    info = PlatformInfo(host.os, host.arch, host.libc)
    assert info.system == pyplatform.system().lower()
    machine = pyplatform.machine().lower()
    assert info.machine == {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def test_undecided_fix_note_says_what_it_is_for(tmp_path: Path) -> None:
    from dataclasses import replace

    from doctor.rules.evaluate import unsure_note

    cat = _cat(tmp_path)
    d = diagnose(cat, facts_from_snapshot({"packages": {"flash-attn": "2.7.4"}, "env": {}}, source="t"), default_workload())
    (finding,) = [f for f in d.findings if f.rule_id == "MY-WHEEL"]
    note = unsure_note(finding.fixes[1])
    assert note.startswith("it is for platform.os = linux and platform.arch = x86_64; could not check platform.")
    assert unsure_note(replace(finding.fixes[1], unsure=("gpu.sm: no GPU found",))).endswith("could not check gpu.sm: no GPU found")


def test_a_diagnosis_gives_back_the_context_fix_conditions_are_judged_in() -> None:
    # the fix planner judges a fix's `when:` after check did: with the same backends and call
    # path, a condition on the selected backend (two rules' fixes have one) decides the same way
    from doctor.rules.conditions import evaluate
    from doctor.workload import build

    cat = load_catalogue()
    doc = {"packages": {"transformers": "4.57.1", "torch": "2.7.1", "flash-attn": "2.8.3"}, "env": {},
           "torch": {"version": "2.7.1", "cuda": "12.6"}, "gpus": [{"index": 0, "name": "H100", "compute_capability": "9.0"}]}
    facts = facts_from_snapshot(doc, source="t")
    for impl, want in (("flash_attention_2", True), ("sdpa", False)):
        workload = build({"framework": "transformers", "attn_implementation": impl}, base=default_workload(), source="t")
        ctx = diagnose(cat, facts, workload).context(facts, workload)
        assert evaluate({"backend": "transformers.flash_attention_2", "selected": True}, ctx).value is want, impl


@pytest.mark.parametrize(
    "platform,known,value",
    [
        ({"os": "Linux 6.8.0", "arch": "x86_64", "libc": "glibc 2.39"}, True, "2.39"),
        ({"os": "Linux 6.1.0", "arch": "aarch64", "libc": "musl"}, True, None),
        ({"os": "Windows 10", "arch": "AMD64"}, True, None),
        # a Linux snapshot that does not say which C library: not glibc is not known
        ({"os": "Linux 6.8.0", "arch": "x86_64"}, False, None),
    ],
)
def test_platform_libc_is_unknown_where_the_snapshot_does_not_say(platform, known, value) -> None:  # type: ignore[no-untyped-def]
    from doctor.rules.conditions import resolve

    facts = facts_from_snapshot({"platform": platform}, source="t")
    got = resolve("platform.libc", facts, default_workload())
    assert (got.known, got.value if got.known else None) == (known, value)


# --------------------------------------------------------------------------- available_but_for
# `{backend: B, available_but_for: [RULE, ...]}`: B is out, and only those of its rules put it
# out (sample 27 row 15: TE-FLASH-FA3-CP-FA2-LAYOUT's NVTE_FLASH_ATTN=0 fix helps only where
# NVTE_FUSED_ATTN=0 alone keeps FusedAttention out).

_BUT_FOR = {"backend": "te.fused", "available_but_for": ["TE-ENV-FUSED-OFF"]}


def _but_for(cudnn: str, env: dict) -> object:
    from doctor.rules.cases import case_inputs
    from doctor.rules.conditions import evaluate

    cat = load_catalogue(use_cache=False)
    case = {
        "packages": {"transformer-engine": "2.12.0", "flash-attn-3": "3.0.0b1"},
        "gpu": "9.0",
        "cudnn": {"version": cudnn},
        "env": env,
        "workload": {"head_dim": 128, "dtype": "bf16", "context_parallel": {"size": 2, "comm_type": "p2p", "impl": "te"}},
    }
    facts, wl = case_inputs(case)
    d = diagnose(cat, facts, wl)
    return evaluate(_BUT_FOR, d.context(facts, wl)).value


def test_available_but_for_only_the_env_rule() -> None:
    assert _but_for("9.12.0", {"NVTE_FUSED_ATTN": "0"}) is True


def test_available_but_for_false_when_available() -> None:
    assert _but_for("9.12.0", {}) is False


def test_available_but_for_false_when_a_filter_keeps_it_out_too() -> None:
    # TE 2.12 refuses cuDNN 9.10.0 for F16 (common/fused_attn/fused_attn.cpp:440-441)
    assert _but_for("9.10.0", {"NVTE_FUSED_ATTN": "0"}) is False
    assert _but_for("9.10.0", {}) is False


def test_available_but_for_undecided_when_another_filter_could_not_be_read() -> None:
    # NVTE_FUSED_ATTN=0 fires, and the cuDNN version that decides TE 2.12's 9.10.0 filter is
    # unknown: lifting the variable may or may not bring FusedAttention back (check-R2 of sample 27)
    from doctor.rules.cases import case_inputs
    from doctor.rules.conditions import evaluate

    cat = load_catalogue(use_cache=False)
    facts, wl = case_inputs({
        "packages": {"transformer-engine": "2.12.0", "flash-attn-3": "3.0.0b1"},
        "gpu": "9.0",
        "env": {"NVTE_FUSED_ATTN": "0"},
        "workload": {"head_dim": 128, "dtype": "bf16", "context_parallel": {"size": 2, "comm_type": "p2p", "impl": "te"}},
    })
    d = diagnose(cat, facts, wl)
    got = evaluate(_BUT_FOR, d.context(facts, wl))
    assert got.value is None and any("cudnn" in m.lower() for m in got.missing)


def test_available_but_for_names_a_rule_of_that_backend(tmp_path: Path) -> None:
    src = (Path(__file__).resolve().parents[2] / "rules").resolve()
    import shutil

    dst = tmp_path / "rules"
    shutil.copytree(src, dst)
    f = dst / "backends" / "te_flash.yaml"
    text = f.read_text(encoding="utf-8")
    assert "available_but_for: [TE-ENV-FUSED-OFF]" in text
    f.write_text(text.replace("available_but_for: [TE-ENV-FUSED-OFF]", "available_but_for: [TE-FLASH-FP32]", 1), encoding="utf-8")
    with pytest.raises(RuleError, match="not a rule that disables 'te.fused'"):
        load_catalogue([dst], builtin=False, use_cache=False)
