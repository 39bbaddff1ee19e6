"""The five field reports the project started from (shared/seeds/, snapshots in
docs/examples/seeds/): each is caught before training with an error and a fix, and applying
that fix through `check --assume/--assume-env` leaves no error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from doctor.cli import main

SEEDS = Path(__file__).resolve().parent.parent / "docs" / "examples" / "seeds"
EXPECTED = {
    "000-te-cp-flash-attn-softcap": "TE-CP-FLASH-ATTN-SOFTCAP",
    "001-te-cp-allgather-cudnn": "TE-CP-ALLGATHER-CUDNN-LT-9-3",
    "002-xtuner-transformers": "XTUNER-01-TRANSFORMERS-FA-FORWARD",
    "003-te-mla-a100-no-backend": "TE-NO-BACKEND",
    "004-te-fused-strided-gqa": "TE-FUSED-STRIDED-GQA-QKV",
}


def run_check(capsys: pytest.CaptureFixture[str], *args: str) -> Tuple[int, Dict[str, Any]]:
    with pytest.raises(SystemExit) as exc:
        main(["check", "--no-kernels", "--format", "json", *args])
    out = capsys.readouterr().out
    return int(exc.value.code), json.loads(out)


@pytest.mark.parametrize("seed", sorted(EXPECTED))
def test_seed_is_caught_and_its_fix_clears_it(seed: str, capsys: pytest.CaptureFixture[str]) -> None:
    snap, wl = SEEDS / f"{seed}.snapshot.json", SEEDS / f"{seed}.workload.yaml"
    code, doc = run_check(capsys, "--env", str(snap), "--workload", str(wl))
    assert code == 1
    finding = next(f for f in doc["findings"] if f["rule_id"] == EXPECTED[seed])
    assert finding["severity"] == "error" and finding["status"] == "fired"
    applicable = [f for f in finding["fixes"] if f["verified"] and (f["pins"] or f["env"])]
    assert applicable, f"{seed}: no verified pin/env fix"
    fix = applicable[0]
    args: List[str] = []
    for pin in fix["pins"]:
        args += ["--assume", pin]
    for k, v in fix["env"].items():
        args += ["--assume-env", f"{k}={v}"]
    code2, doc2 = run_check(capsys, "--env", str(snap), "--workload", str(wl), *args)
    errors = [f["rule_id"] for f in doc2["findings"] if f["severity"] == "error" and f["status"] == "fired"]
    assert errors == [], f"{seed}: after {args} still {errors}"
    assert code2 == 0


def test_seed_003_does_not_offer_a_fix_that_leaves_no_backend(capsys: pytest.CaptureFixture[str]) -> None:
    snap = SEEDS / "003-te-mla-a100-no-backend.snapshot.json"
    wl = SEEDS / "003-te-mla-a100-no-backend.workload.yaml"
    _, doc = run_check(capsys, "--env", str(snap), "--workload", str(wl))
    finding = next(f for f in doc["findings"] if f["rule_id"] == "TE-NO-BACKEND")
    offered = [f["env"] for f in finding["fixes"] if not f["pins"]]
    assert {"NVTE_UNFUSED_ATTN": "1"} in offered
    # FlashAttention 2 cannot take MLA 192/128 on TE 2.3 and cuDNN has no d>128 on sm80:
    assert {"NVTE_FLASH_ATTN": "1"} not in offered
    assert {"NVTE_FUSED_ATTN": "1"} not in offered
    te = {b["id"]: b for b in doc["backends"] if b["framework"] == "transformer-engine"}
    assert all(b["available"] is False for b in te.values())
    assert any("head_dim" in r for r in te["te.fused"]["reasons"])
