"""Sample 18 row 13: TransformerEngine writes window_size (-1, 0) for every causal mask to its
NVTE_DEBUG log ("Running with config=..."). That is plain causal attention, not a sliding window:
flash-attn < 2.3 runs it with causal=True, and TE's own filter counts a window only when
window_size[0] != -1 or window_size[1] not in (-1, 0) (attention.py@v1.12:725). Read from such a
log, FlashAttention-2 must stay available, and FA-NO-KERNEL-FOR-WORKLOAD must stay quiet; a real
window (127, 0) from the same log still turns it off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

from doctor.cli import main

# TE 1.12 (the first covered release that logs flash_attn_version as a string; 1.9-1.11 log the
# packaging Version object) with flash-attn 2.2.5, inside its 2.1.1-2.6.3 window, on an A100
_LOG = (
    "[DEBUG    | DotProductAttention]: Running with config={'transformer_engine_version': '1.12.0', "
    "'compute_capability': 'sm80', 'flash_attn_version': '2.2.5', 'flash_attn_3_version': 'not installed', "
    "'cudnn_version': '9.1.0', 'qkv_type': <class 'torch.Tensor'>, 'qkv_dtype': torch.bfloat16, "
    "'qkv_layout': 'sbhd_sbhd_sbhd', 'batch_size': 1, 'num_heads': 32, 'num_gqa_groups': 8, "
    "'max_seqlen_q': 4096, 'max_seqlen_kv': 4096, 'head_dim_qk': 128, 'head_dim_v': 128, "
    "'attn_mask_type': 'causal', 'window_size': WINDOW, 'alibi_slopes_shape': None, "
    "'core_attention_bias_type': 'no_bias', 'core_attention_bias_shape': None, "
    "'core_attention_bias_requires_grad': False, 'pad_between_seqs': False, 'attention_dropout': 0.0, "
    "'context_parallel': False, 'deterministic': False, 'is_training': True, 'fp8': False, "
    "'fp8_meta': {'fp8_checkpoint': False, 'fp8_group': None}, 'inference_params': None}\n"
)


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], window: str) -> Tuple[Dict[str, Any], Dict[str, str]]:
    log = tmp_path / "te-debug.log"
    log.write_text(_LOG.replace("WINDOW", window), encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["check", "--no-kernels", "--format", "json", "--config", str(log)])
    doc = json.loads(capsys.readouterr().out)
    results = {r["rule_id"]: r["status"] for r in doc["rules"]}
    return doc, results


def test_a_causal_runs_minus_one_zero_is_no_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, results = _check(tmp_path, capsys, "(-1, 0)")
    assert doc["workload"]["window_size"] == [-1, 0] and doc["workload"]["mask"] == "causal"
    assert results["FA2-SLIDING-WINDOW-NEEDS-2-3"] == "passed"
    fa2 = next(b for b in doc["backends"] if b["id"] == "flash_attn.fa2")
    assert fa2["available"] is True
    fired = {f["rule_id"] for f in doc["findings"] if f["status"] == "fired"}
    assert "FA-NO-KERNEL-FOR-WORKLOAD" not in fired


def test_a_real_window_from_the_same_log_still_needs_2_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, results = _check(tmp_path, capsys, "(127, 0)")
    assert results["FA2-SLIDING-WINDOW-NEEDS-2-3"] == "fired"
    fa2 = next(b for b in doc["backends"] if b["id"] == "flash_attn.fa2")
    assert fa2["available"] is False
