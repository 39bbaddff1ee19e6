"""Golden backend-model cases from the rule audit (shared/reviews/rule-audit-2026-11-22.md §4):
12 workloads and 6 TransformerEngine probes whose expected selection, availability and
outcome were derived from TE's source at the release tag (cited per case). The doctor must
pick the backend TE picks, and raise exactly the findings TE's code makes true."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import pytest

from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue

CAT = load_catalogue(use_cache=False)
TE = "NVIDIA/TransformerEngine"


def case(te: str, sm: str, cudnn: str, fa: Optional[str] = None, torch: str = "2.4.1", extra: Optional[Dict[str, str]] = None,
         env: Optional[Dict[str, str]] = None, **workload: Any) -> Dict[str, Any]:
    packages = {"transformer-engine": te, "torch": torch, **(extra or {})}
    if fa:
        packages["flash-attn"] = fa
    return {"packages": packages, "gpu": sm, "cudnn": {"version": cudnn}, "env": env or {},
            "torch": {"version": torch, "cuda": "12.4", "cudnn_version": cudnn}, "workload": workload}


# (id, case, TE's selection, findings that must fire, findings that must not, citation)
# P6/P7 are transformers probes: see test_transformers_audit_probes below.
GOLDEN: List[Tuple[str, Dict[str, Any], Optional[str], Tuple[str, ...], Tuple[str, ...], str]] = [
    ("W1", case("1.11.0", "8.0", "9.1.0", "2.6.3", num_heads=32, num_kv_heads=8, mask="causal", seq_len=4096),
     "te.flash", (), (), f"{TE}@v1.11:transformer_engine/pytorch/attention.py:818-829 (fused preferred only on sm90)"),
    ("W2", case("1.11.0", "9.0", "9.1.0", "2.6.3", head_dim=64, num_heads=16, num_kv_heads=16, mask="causal",
                context_parallel={"size": 2, "comm_type": "p2p"}),
     "te.fused", (), ("TE-CP-FLASH-ATTN-SOFTCAP",), f"{TE}@v1.11:transformer_engine/pytorch/attention.py:818-829,457-461"),
    ("W3", case("1.11.0", "9.0", "9.1.0", head_dim_qk=192, head_dim_v=128, num_heads=16, num_kv_heads=16),
     "te.fused", (), (), f"{TE}@v1.11:transformer_engine/pytorch/attention.py:402; common/fused_attn/fused_attn.cpp:137"),
    ("W5", case("2.3.0", "8.0", "9.8.0", "2.7.4.post1", torch="2.6.0", head_dim=256, num_heads=32, num_kv_heads=8),
     "te.flash", (), (), f"{TE}@v2.3:transformer_engine/common/fused_attn/fused_attn.cpp:235"),
    ("W7", case("2.3.0", "9.0", "9.8.0", torch="2.6.0", qkv_format="thd", mask="padding_causal_bottom_right",
                context_parallel={"size": 2, "comm_type": "p2p"}),
     None, ("TE-NO-BACKEND",), (), f"{TE}@v2.3:transformer_engine/pytorch/attention/dot_product_attention/utils.py:546,559,586"),
    ("W8", case("2.3.0", "9.0", "9.8.0", torch="2.6.0", window_size=[4095, 0], mask="causal",
                context_parallel={"size": 2, "comm_type": "p2p"}),
     "te.fused", ("TE-CP-SLIDING-WINDOW-COMM-TYPE",), (), f"{TE}@v2.3:transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py:3511-3514"),
    ("W10", case("2.18.0", "9.0", "9.10.1", "2.8.3", torch="2.8.0", num_heads=32, num_kv_heads=8),
     "te.flash", (), (), f"{TE}@v2.18:transformer_engine/common/fused_attn/fused_attn.cpp:468-469"),
    ("W11", case("2.18.0", "12.0", "9.13.0", torch="2.8.0", env={"NVTE_FLASH_ATTN": "0"}, qkv_format="thd", mask="padding_causal"),
     "te.unfused", (), (), f"{TE}@v2.18:transformer_engine/pytorch/attention/dot_product_attention/utils.py:994-999"),
    ("W12", case("2.18.0", "9.0", "9.13.0", "2.8.3", torch="2.8.0", num_heads=32, num_kv_heads=1,
                 context_parallel={"size": 2, "comm_type": "a2a"}),
     "te.flash", (), (), f"{TE}@v2.18:transformer_engine/pytorch/attention/dot_product_attention/utils.py:1184-1191"),
    # flash-attn 2.6.3 (TE 1.11's maximum, v1.11 attention.py:94): TE 1.11 does not import without
    # flash-attn (TE-FA-REQUIRED-BEFORE-1-12), and then no finding about its choice is reached
    ("W4", case("1.11.0", "9.0", "9.3.0", "2.6.3", torch="2.4.1", window_size=[4095, 0], mask="causal",
                context_parallel={"size": 2, "comm_type": "all_gather"}),
     "te.fused", ("TE-CP-SLIDING-WINDOW-COMM-TYPE",), ("TE-CP-FLASH-ATTN-SOFTCAP",),
     f"{TE}@v1.11:transformer_engine/pytorch/attention.py:3999-4003 (sliding window + all_gather only without FusedAttention)"),
    ("W6", case("2.3.0", "9.0", "9.8.0", torch="2.6.0", dtype="fp8", fp8=True, mask="causal"),
     "te.fused", (), (), f"{TE}@v2.3:transformer_engine/pytorch/attention/dot_product_attention/utils.py:417,424; common/fused_attn/fused_attn.cpp:169"),
    ("W9", case("2.18.0", "10.0", "9.13.0", "2.8.3", torch="2.8.0", head_dim_qk=192, head_dim_v=128, qkv_format="thd", mask="padding_causal"),
     "te.fused", (), (), f"{TE}@v2.18:transformer_engine/pytorch/attention/dot_product_attention/utils.py:844,1554; common/fused_attn/fused_attn.cpp:330-332"),
    ("P1", case("1.13.0", "9.0", "9.1.0", "2.7.4.post1", extra={"flashattn-hopper": "3.0.0b1"}),
     "te.fused", (), (), f"{TE}@v1.13:transformer_engine/pytorch/attention.py:908-910 (FlashAttention unavailable, fused selected)"),
    ("P1b", case("1.13.0", "9.0", "9.1.0", "2.7.4.post1", extra={"flashattn-hopper": "3.0.0b1"}, env={"NVTE_FUSED_ATTN": "0"}),
     "te.unfused", (), (), f"{TE}@v1.13:transformer_engine/pytorch/attention.py:908-910 (FA2 out of window switches FlashAttention off)"),
    ("P2", case("2.15.0", "10.0", "9.13.0", "2.6.3", torch="2.8.0", extra={"flash-attn-4": "4.0.0b27", "nvidia-cutlass-dsl": "4.3.0"},
                env={"NVTE_FUSED_ATTN": "0"}, dropout=0.1),
     "te.unfused", (), (), f"{TE}@v2.15:transformer_engine/pytorch/attention/dot_product_attention/backends.py:100; utils.py:879"),
    ("P4", case("1.13.0", "9.0", "9.3.0", "2.6.3", window_size=[4095, 0], mask="causal", context_parallel={"size": 2, "comm_type": "all_gather"}),
     "te.fused", ("TE-CP-SLIDING-WINDOW-COMM-TYPE",), ("TE-CP-FLASH-ATTN-SOFTCAP",), f"{TE}@v1.13:transformer_engine/pytorch/attention.py:4331-4335"),
    # P3 and P5 were TE 1.8 / 1.7 (FusedAttention with NVTE_FLASH_ATTN=0 and no flash-attn
    # assert; FlashAttention because 1.7's fused backend wants seq % 64): TE older than 1.9 is
    # no longer judged (docs/rules.md, "Coverage"), so the doctor picks nothing and says so.
    ("P3", case("1.8.0", "8.0", "9.1.0", "2.6.3", env={"NVTE_FLASH_ATTN": "0"}),
     None, ("TE-OLDER-THAN-COVERED",), ("TE-FA2-VERSION-ASSERT",), "rules/backends/transformer_engine.yaml covers: TE >= 1.9"),
    ("P5", case("1.7.0", "9.0", "9.1.0", "2.5.8", seq_len=1000),
     None, ("TE-OLDER-THAN-COVERED",), (), "rules/backends/transformer_engine.yaml covers: TE >= 1.9"),
    ("P5b", case("1.9.0.post1", "9.0", "8.9.7", "2.5.8", seq_len=1000),
     "te.flash", (), (), f"{TE}@v1.9:transformer_engine/common/fused_attn/fused_attn.cpp:128 (seq len multiple of 64 before cuDNN 9)"),
]


def _selected(d: Any) -> Optional[str]:
    return dict(d.selections).get("transformer-engine")


@pytest.mark.parametrize("gid,given,selected,fires,quiet,cite", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_te_selection_matches_te_source(gid: str, given: Dict[str, Any], selected: Optional[str], fires: Tuple[str, ...], quiet: Tuple[str, ...], cite: str) -> None:
    facts, workload = case_inputs(given)
    d = diagnose(CAT, facts, workload)
    assert _selected(d) == selected, f"{gid}: TE selects {selected} ({cite}); doctor: {_selected(d)}"
    fired = {r.rule_id for r in d.results if r.status == "fired"}
    for rule in fires:
        assert rule in fired, f"{gid}: {rule} should fire ({cite})"
    for rule in quiet:
        assert rule not in fired, f"{gid}: {rule} must not fire ({cite})"


@pytest.mark.parametrize("pid,given,fires,cite", [
    ("P6", {"packages": {"transformers": "4.42.4", "flash-attn": "2.6.3", "torch": "2.3.1"}, "gpu": "8.0",
            "torch": {"version": "2.3.1", "cuda": "12.1"}, "workload": {"softcap": 50.0, "attn_implementation": "flash_attention_2", "model_type": "gemma2"}},
     "NUM-HF-GEMMA2-FA2-SOFTCAP-DROPPED", "huggingface/transformers@v4.42.4:src/transformers/models/gemma2/modeling_gemma2.py:438,462,467"),
    ("P7", {"packages": {"transformers": "5.2.0", "torch": "2.3.1"}, "gpu": "8.0", "torch": {"version": "2.3.1", "cuda": "12.1"}, "workload": {}},
     "HF-TORCH-TOO-OLD-FOR-TRANSFORMERS-5", "huggingface/transformers@v5.2.0:src/transformers/utils/import_utils.py:116"),
])
def test_transformers_audit_probes(pid: str, given: Dict[str, Any], fires: str, cite: str) -> None:
    facts, workload = case_inputs(given)
    fired = {r.rule_id for r in diagnose(CAT, facts, workload).results if r.status == "fired"}
    assert fires in fired, f"{pid}: {fires} should fire ({cite})"


def test_p1_flash_attention_is_unavailable_not_merely_unselected() -> None:
    facts, workload = case_inputs(case("1.13.0", "9.0", "9.1.0", "2.7.4.post1", extra={"flashattn-hopper": "3.0.0b1"}))
    flash = next(b for b in diagnose(CAT, facts, workload).backends if b.id == "te.flash")
    assert flash.available is False, f"{TE}@v1.13:transformer_engine/pytorch/attention.py:908-910"
