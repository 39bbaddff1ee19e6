"""The text report of `attn-doctor probe`: golden output and what a reader must see."""

from __future__ import annotations

import os
from pathlib import Path


from doctor.report.probe_text import render_probe
from doctor.snapshot import load_snapshot

DATA = Path(__file__).parent / "data"
GOLDEN = Path(__file__).parent / "golden"


def _doc() -> dict:
    return load_snapshot(DATA / "a100_snapshot.json")


def test_matches_golden_file() -> None:
    text = render_probe(_doc(), color=False, width=100)
    golden = GOLDEN / "a100_probe.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_a_reader_sees_the_problems() -> None:
    text = render_probe(_doc(), color=False, width=200)
    assert "✗ cuDNN mismatch:\n    - torch loaded cuDNN 8.9.2 from /usr/lib/x86_64-linux-gnu/libcudnn.so.8" in text
    assert "flash_attn_2_cuda: error  C++ ABI mismatch (wheel built with cxx11abi=TRUE, torch uses FALSE)" in text
    assert "+cu123torch2.4cxx11abiFALSE-cp310-cp310-linux_x86_64.whl" in text
    assert "NVIDIA A100-SXM4-80GB  8.0 (sm_80)" in text
    assert "driver 550.54.15, supports CUDA up to 12.4" in text
    assert "HF_TOKEN              <redacted>" in text


def test_no_ansi_without_colour_and_ansi_with_it() -> None:
    assert "\x1b[" not in render_probe(_doc(), color=False, width=100)
    assert "\x1b[" in render_probe(_doc(), color=True, width=100)


def test_respects_width() -> None:
    for width in (60, 100):
        lines = render_probe(_doc(), color=False, width=width).splitlines()
        assert max(len(line) for line in lines) <= width


def test_partial_snapshot_says_what_is_unknown() -> None:
    text = render_probe({"packages": {"torch": "2.4.0"}, "unknown": {"gpus": "no GPU info in this file"}}, color=False, width=100)
    assert "GPUs unknown: no GPU info in this file" in text
    assert "Environment switches\n  unknown: not in the snapshot" in text
    assert "flash_attn: unknown" in text and "not in the snapshot" in text


def test_static_probe_marks_loaded_facts_unknown() -> None:
    doc = _doc()
    doc["torch"].update(cxx11_abi=None, cuda_available=None, device_count=None, arch_list=None)
    doc["cudnn"].update(loaded=None, loaded_path=None)
    doc["imports"]["flash_attn"] = None
    del doc["imports"]["flash_attn"]
    doc["unknown"] = {
        "torch.cuda_available": "not probed: static mode (--static), torch was not imported",
        "cudnn.loaded": "not probed: static mode (--static), torch was not imported",
        "imports.flash_attn": "not probed: static mode (--static), torch was not imported",
    }
    text = render_probe(doc, color=False, width=200)
    assert "not imported (loaded facts unknown)" in text
    assert "cuDNN loaded      unknown: not probed: static mode" in text
    assert "flash_attn: unknown" in text
    assert "Unknown facts (could not be probed)" in text


def test_long_environment_values_are_cut_in_text_only() -> None:
    doc = _doc()
    doc["env"]["NVIDIA_REQUIRE_CUDA"] = "cuda>=13.0 " + " ".join(f"brand=tesla,driver>={v},driver<{v + 1}" for v in range(500, 540))
    text = render_probe(doc, color=False, width=100)
    assert "characters; see --format json)" in text
    assert "brand=tesla,driver>=539" not in text
