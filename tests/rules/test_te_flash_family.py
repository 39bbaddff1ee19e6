"""TE's FlashAttention as a family: FA2, FA3 and FA4 filtered one by one, joined per release.

TE 2.2+ compute `use_flash_attention = fa2 or fa3 or fa4` after filtering each member
(dot_product_attention/utils.py@v2.10:1118, @v2.20.2); TE 1.12-2.1 switch FlashAttention off
without an accepted flash-attn, FA3 or not (attention.py@v1.13:902-904). The cases below are
the situations the TE oracle found the single-backend model wrong about
(docs/te-oracle/disagreements.md, before the split), each with TE's own answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from doctor.errors import RuleError
from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue, load_file


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalogue(use_cache=False)


def flash(cat: Any, te: str, gpu: str, pkgs: Dict[str, str], env: Optional[Dict[str, str]] = None, **wl: Any) -> Any:
    facts, workload = case_inputs({"packages": {"transformer-engine": te, **pkgs}, "gpu": gpu, "env": env or {}, "workload": wl})
    d = diagnose(cat, facts, workload)
    return next(b for b in d.backends if b.id == "te.flash")


def members(status: Any) -> Dict[str, Optional[bool]]:
    return {m.id: m.available for m in status.members}


def test_fa4_dropped_for_dropout_leaves_no_flash_on_blackwell(cat) -> None:  # type: ignore[no-untyped-def]
    # audit probe P2: TE 2.15, B200, flash-attn 2.6.3 (below the Blackwell minimum) + FA4, dropout
    st = flash(cat, "2.15.0", "10.0", {"flash-attn": "2.6.3", "flash-attn-4": "4.0.0b11"}, dropout=0.1)
    assert st.available is False
    assert members(st) == {"te.fa2": False, "te.fa3": False, "te.fa4": False}
    assert {"TE-FLASH-FA2-BLACKWELL-MIN", "TE-FLASH-FA4-DROPOUT"} <= set(st.rule_ids)
    text = "; ".join(st.reasons)
    assert "FlashAttention 2 (flash-attn) out" in text and "FlashAttention 4 (flash-attn-4) out" in text
    # without dropout FA4 serves
    assert flash(cat, "2.15.0", "10.0", {"flash-attn": "2.6.3", "flash-attn-4": "4.0.0b11"}).available is True


def test_fa4_below_sm90_from_te_2_19(cat) -> None:  # type: ignore[no-untyped-def]
    pkgs = {"flash-attn-4": "4.0.0b11", "nvidia-cutlass-dsl": "4.6.2"}
    assert flash(cat, "2.18.0", "8.9", pkgs).available is True
    assert flash(cat, "2.20.2", "8.9", pkgs).available is False
    assert flash(cat, "2.20.2", "9.0", pkgs).available is True


def test_fa3_head_dim_limit_of_te_2_2_to_2_7(cat) -> None:  # type: ignore[no-untyped-def]
    assert flash(cat, "2.5.0", "9.0", {"flash-attn-3": "3.0.0b1"}, head_dim=256).available is False
    assert flash(cat, "2.5.0", "9.0", {"flash-attn-3": "3.0.0b1"}, head_dim=128).available is True
    assert flash(cat, "2.8.0", "9.0", {"flash-attn-3": "3.0.0b1"}, head_dim=256).available is True


def test_te_1_x_needs_an_accepted_fa2_even_with_fa3(cat) -> None:  # type: ignore[no-untyped-def]
    st = flash(cat, "1.13.0", "9.0", {"flashattn-hopper": "3.0.0b1"})
    assert st.available is False and members(st)["te.fa3"] is True
    assert any("FlashAttention 2 (flash-attn) not installed" in r for r in st.reasons)
    # out of window: the window rule of 1.12-1.13 switches the whole family off
    st = flash(cat, "1.13.0", "9.0", {"flash-attn": "2.7.4.post1", "flashattn-hopper": "3.0.0b1"})
    assert st.available is False and "TE-FLASH-FA2-WINDOW-TE1-12" in st.rule_ids
    # from 2.2 FA3 alone serves
    assert flash(cat, "2.3.0", "9.0", {"flash-attn-3": "3.0.0b1"}).available is True


def test_fa3_serves_where_fa2_cannot_and_the_reverse(cat) -> None:  # type: ignore[no-untyped-def]
    # FA2 out of its window (TE 2.8 accepts <= 2.8.1), FA3 on sm90 serves
    st = flash(cat, "2.8.0", "9.0", {"flash-attn": "2.8.3", "flash-attn-3": "3.0.0b1"})
    assert st.available is True and members(st) == {"te.fa2": False, "te.fa3": True, "te.fa4": False}
    # dropout: FA3 out, FA2 serves
    st = flash(cat, "2.8.0", "9.0", {"flash-attn": "2.8.1", "flash-attn-3": "3.0.0b1"}, dropout=0.1)
    assert st.available is True and members(st)["te.fa3"] is False and members(st)["te.fa2"] is True


def test_sm90_prefers_fa3_over_fa4_before_checking_fa3(cat) -> None:  # type: ignore[no-untyped-def]
    # TE drops FA4 on sm90 when flash-attn-3 is installed, then drops FA3 for dropout: nothing left
    pkgs = {"flash-attn-3": "3.0.0b1", "flash-attn-4": "4.0.0b11"}
    assert flash(cat, "2.15.0", "9.0", pkgs, dropout=0.1).available is False
    assert flash(cat, "2.15.0", "9.0", {"flash-attn-4": "4.0.0b11"}, head_dim=64).available is True


def test_te_1_13_fp8_inference_keeps_fa2_after_fa3_drops_out(cat) -> None:  # type: ignore[no-untyped-def]
    # TE 1.13 skips the FA2 FP8 check while FA3 is in play, then drops FA3 for FP8 with padding
    st = flash(cat, "1.13.0", "10.0", {"flash-attn": "2.6.3", "flashattn-hopper": "3.0.0b1"}, dtype="fp8", training=False, mask="padding_causal")
    assert st.available is True and members(st) == {"te.fa2": True, "te.fa3": False, "te.fa4": False}


def test_family_wide_reason_still_lists_the_members(cat) -> None:  # type: ignore[no-untyped-def]
    st = flash(cat, "2.3.0", "8.0", {"flash-attn": "2.7.4.post1"}, env={"NVTE_FLASH_ATTN": "0"}, head_dim_qk=192, head_dim_v=128)
    assert st.available is False
    assert st.reasons[0].startswith("switched off by NVTE_FLASH_ATTN=0")
    assert any(r.startswith("FlashAttention 2 (flash-attn) out:") for r in st.reasons)


def _write(tmp_path: Path, compose: str) -> Path:
    p = tmp_path / "fw.yaml"
    p.write_text(
        f"""frameworks:
  - id: fw
    name: Fw
    installed: {{package: fw, installed: true}}
    backends:
      - id: fw.family
        name: Family
        members:
          - {{id: fw.a, name: A, installed: {{package: a, installed: true}}}}
          - {{id: fw.b, name: B, installed: {{package: b, installed: true}}}}
{compose}
    selection:
      - order: [fw.family]
    sources: [https://example.org/fw]
""",
        encoding="utf-8",
    )
    return p


def test_compose_must_name_members(tmp_path: Path) -> None:
    load_file(_write(tmp_path, "        compose:\n          - any_of: [fw.a, fw.b]"))
    from doctor.rules.loader import _check_catalogue

    fws, rules = load_file(_write(tmp_path, "        compose:\n          - any_of: [fw.a, fw.c]"))
    with pytest.raises(RuleError, match="not one of its members"):
        _check_catalogue(fws, rules)


def test_members_need_compose(tmp_path: Path) -> None:
    with pytest.raises(RuleError):
        load_file(_write(tmp_path, ""))


def test_a_finding_reads_one_members_availability(cat) -> None:  # type: ignore[no-untyped-def]
    # TE 2.1 on a B200 without FusedAttention runs the flashattn-hopper build (FA3) unless a
    # filter drops FA3 (dropout), and then FA2: the finding reads te.fa3's own availability
    base = {"packages": {"transformer-engine": "2.1.0", "flash-attn": "2.7.4.post1", "flashattn-hopper": "3.0.0b1"}, "gpu": "10.0", "env": {"NVTE_FUSED_ATTN": "0"}}
    rid = "TE-FLASH-FA3-HOPPER-BUILD-OFF-HOPPER"
    facts, workload = case_inputs(base)
    assert diagnose(cat, facts, workload).result(rid).status == "fired"
    facts, workload = case_inputs({**base, "workload": {"dropout": 0.1}})
    d = diagnose(cat, facts, workload)
    st = next(b for b in d.backends if b.id == "te.flash")
    assert st.selected and members(st)["te.fa3"] is False and members(st)["te.fa2"] is True
    assert d.result(rid).status == "passed"


def test_a_member_cannot_be_read_as_selected(tmp_path: Path) -> None:
    from doctor.rules.loader import _check_catalogue

    fws, _ = load_file(_write(tmp_path, "        compose:\n          - any_of: [fw.a, fw.b]"))
    rules_file = tmp_path / "r.yaml"
    rules_file.write_text(
        """rules:
  - id: X-MEMBER-SELECTED
    severity: error
    area: fw
    title: t
    message: m
    when: {backend: fw.a, selected: true}
    sources: [https://example.org/x]
    tests:
      fires: [{packages: {fw: "1", a: "1"}}]
      passes: [{packages: {fw: "1"}}]
""",
        encoding="utf-8",
    )
    _, rules = load_file(rules_file)
    with pytest.raises(RuleError, match="a member of"):
        _check_catalogue(fws, rules)


@pytest.mark.parametrize("stated, fires", [
    ({}, True),
    ({"framework": "megatron"}, True),
    ({"attn_implementation": "flash_attention_2"}, False),  # transformers runs flash-attn itself
    ({"framework": "torchtitan"}, False),  # never calls TE's attention
    ({"framework": "transformers", "model_type": "esm"}, False),
    # NVIDIA's TE-built checkpoints (bionemo-recipes, trust_remote_code) run TE's TransformerLayer
    # under transformers/PEFT whatever attn_implementation says
    ({"framework": "transformers", "model_type": "nv_esm"}, True),
    ({"framework": "peft", "attn_implementation": "sdpa", "model_type": "nv_esm"}, True),
])
def test_a_finding_about_te_selecting_a_backend_needs_te_on_the_path(cat, stated: Dict[str, str], fires: bool) -> None:  # type: ignore[no-untyped-def]
    # TE 2.16.1 with flash-attn-4 on an A100 would run FA4's missing sm8x backward, if TE ran
    facts, workload = case_inputs({"packages": {"transformer-engine": "2.16.1", "flash-attn-4": "4.0.0b11"}, "gpu": "8.0",
                                   "workload": {"training": True, "dtype": "bf16", **stated}})
    d = diagnose(cat, facts, workload)
    te = next(b for b in d.backends if b.id == "te.flash")
    assert te.selected  # TE's own choice is still modelled and shown
    assert ("TE-FLASH-FA4-SM8X-BACKWARD" in {f.rule_id for f in d.findings}) is fires


@pytest.mark.parametrize("stated, fires", [
    ({}, True),
    ({"framework": "megatron"}, True),
    ({"attn_implementation": "sdpa"}, False),  # transformers' SDPA path never builds TE's DotProductAttention
    ({"framework": "axolotl"}, False),
    # a TE-built remote-code model keeps TE's attention under transformers: the one test of
    # "TE on the path" (path.te_attention) serves findings that read packages, not only `selected`
    ({"framework": "transformers", "attn_implementation": "sdpa", "model_type": "nv_esm2"}, True),
])
def test_a_te_finding_that_reads_packages_needs_te_on_the_path(cat, stated: Dict[str, str], fires: bool) -> None:  # type: ignore[no-untyped-def]
    # TE 1.10 asserts flash-attn <= 2.5.8 when DotProductAttention is built
    facts, workload = case_inputs({"packages": {"transformer-engine": "1.10.0", "flash-attn": "2.6.3"}, "gpu": "8.0",
                                   "workload": {"training": True, "dtype": "bf16", **stated}})
    d = diagnose(cat, facts, workload)
    assert ("TE-FA2-VERSION-ASSERT" in {f.rule_id for f in d.findings}) is fires
    assert d.path.te_attention is fires
