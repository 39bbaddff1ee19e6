"""Where TE stops before it weighs any backend (TE 2.0+'s thd mask assert in
DotProductAttention.forward), no TE backend rule gives a reason: the backend table must not
report a filter TE never runs (the framework's `filters_reached_unless:`, loader._guard_filters)."""

from __future__ import annotations

from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue

THD = {
    "packages": {"transformer-engine": "2.8.0", "torch": "2.8.0"},
    "torch": {"version": "2.8.0+cu128", "cuda": "12.8"},
    "gpu": "7.5",
    "cudnn": {"version": "9.8.0"},
    "workload": {"qkv_format": "thd", "dtype": "fp8", "window_size": [128, 0]},
}


def _te_reasons(mask: str, **workload: object) -> tuple:
    cat = load_catalogue()
    facts, wl = case_inputs({**THD, "workload": {**THD["workload"], "mask": mask, **workload}})
    d = diagnose(cat, facts, wl)
    te = [r.id for r in cat.rules if (r.disables or "").startswith("te.")]
    return d, [rid for rid in te if d.result(rid).status == "fired"]


def test_no_te_backend_reason_where_the_thd_mask_assert_stops_the_run() -> None:
    # bf16: with FP8 on this Turing GPU the autocast's sm89 assert would stop the run first
    d, fired = _te_reasons("causal", dtype="bf16")
    assert d.result("TE-THD-NEEDS-PADDING-MASK").status == "fired"
    assert fired == []


def test_te_backend_reasons_stay_where_te_gets_to_weigh_its_backends() -> None:
    d, fired = _te_reasons("padding_causal", dtype="bf16")
    assert d.result("TE-THD-NEEDS-PADDING-MASK").status != "fired"
    # a Turing GPU: FlashAttention (sm80+) is out for its reason
    assert "TE-FLASH-SM-LT-80" in fired


def test_no_te_backend_reason_where_the_fp8_autocast_refuses_the_gpu() -> None:
    # FP8 on a Turing GPU: TE's autocast asserts compute capability 8.9 on entry, before any
    # forward, so FlashAttention's sm80 floor and FusedAttention's FP8 filters are never weighed
    d, fired = _te_reasons("padding_causal", dtype="fp8")
    assert d.result("TE-FP8-NEEDS-SM89").status == "fired"
    assert fired == []


def test_rules_show_and_standings_read_the_rule_as_written() -> None:
    r = load_catalogue().rule("TE-FLASH-SM-LT-80")
    # the rule as written says nothing of thd; the loader's guard (the expanded condition) does
    assert r.when_written is not None and "thd" not in str(r.when_written)
    assert "thd" in str(r.when) and r.when["all"][0] == r.when_written


def _te1_reasons(flash_attn: str) -> tuple:
    cat = load_catalogue()
    facts, wl = case_inputs({
        "packages": {"transformer-engine": "1.10.0", "flash-attn": flash_attn},
        "gpu": "7.5",
        "cudnn": {"version": "9.1.0"},
        "workload": {"window_size": [4095, 0], "dtype": "fp32"},
    })
    d = diagnose(cat, facts, wl)
    te = [r.id for r in cat.rules if (r.disables or "").startswith("te.")]
    return d, [rid for rid in te if d.result(rid).status == "fired"]


def test_te1_flash_attn_version_assert_leaves_only_its_own_reason() -> None:
    # TE 1.10 with flash-attn 2.6.3 asserts in DotProductAttention.__init__ (sample 47 row 14):
    # no filter (Turing, fp32, the window) is weighed; the rule that states the assert stays
    d, fired = _te1_reasons("2.6.3")
    assert d.result("TE-FA2-VERSION-ASSERT").status == "fired"
    assert fired == ["TE-FLASH-FA2-WINDOW-TE1"]


def test_te1_filters_stay_where_flash_attn_is_in_te1_window() -> None:
    d, fired = _te1_reasons("2.5.8")
    assert d.result("TE-FA2-VERSION-ASSERT").status != "fired"
    assert "TE-FLASH-SM-LT-80" in fired and "TE-FLASH-FA2-WINDOW-TE1" not in fired


def test_only_the_rule_that_states_a_stop_goes_unguarded() -> None:
    # a backend rule that excludes a stop itself (`not: mcore_nvte_env_assert` in TE's NVTE_* env
    # rules) keeps the guard for the other stops; only TE-FLASH-FA2-WINDOW-TE1, whose `when` is TE
    # 1.9-1.11's flash-attn assert, is left as written
    cat = load_catalogue()
    te = [r for r in cat.rules if (r.disables or "").startswith("te.")]
    unguarded = sorted(r.id for r in te if r.when_written is None)
    assert unguarded == ["TE-FLASH-FA2-WINDOW-TE1"]
    assert cat.rule("TE-ENV-FLASH-OFF").when_written is not None
