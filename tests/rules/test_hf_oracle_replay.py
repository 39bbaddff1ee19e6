"""transformers' own attention-implementation check, recorded by tools/hf_oracle.py, replayed offline.

docs/hf-oracle/cases.jsonl holds, per transformers release and model_type and
attn_implementation, what `AutoModel.from_config(cfg, attn_implementation=...)` of that release
did on a CPU with flash-attn / FA3 made to look installed (so only the model's own flag check
could refuse). The doctor's `path.model_supports` must give the same verdict on every case it
models, except the ones docs/hf-oracle/disagreements.md explains (listed in EXPLAINED below).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "docs" / "hf-oracle" / "cases.jsonl"
# (version, model_type, impl) the doctor is known to answer differently, each explained in
# docs/hf-oracle/disagreements.md.
EXPLAINED: set = set()


@pytest.fixture(scope="module")
def oracle():
    spec = importlib.util.spec_from_file_location("hf_oracle", REPO / "tools" / "hf_oracle.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def replay(oracle):
    records, skipped, releases = oracle.load_cases(CASES)
    return records, releases, oracle.score(records)


def test_recorded_answers_cover_releases_families_and_implementations(replay):
    records, releases, _ = replay
    assert len(releases) >= 7
    assert {"4.44.2", "4.57.1", "5.0.0"} <= set(releases)
    families = {r["model_type"] for r in records if r["kernels"]["result"] != "absent"}
    assert {"llama", "mistral", "mixtral", "qwen2", "gemma2", "gpt2", "phi3", "deepseek_v3"} <= families
    assert {r["impl"] for r in records} == {"eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"}
    # Both verdicts occur: the oracle is not trivially "everything is accepted".
    results = {r["kernels"]["result"] for r in records}
    assert {"ok", "model"} <= results


def test_gpt2_flex_attention_is_refused_by_transformers_itself(replay):
    records, _, _ = replay
    gpt2_flex = [r for r in records if r["model_type"] == "gpt2" and r["impl"] == "flex_attention" and r["kernels"]["result"] != "absent"]
    assert gpt2_flex and all(r["kernels"]["result"] in ("model", "unknown") for r in gpt2_flex)


def test_doctor_agrees_with_every_recorded_transformers_verdict(replay):
    _, _, result = replay
    wrong = [d for d in result["disagreements"] if (d["version"], d["model_type"], d["impl"]) not in EXPLAINED]
    lines = [f"transformers {d['version']} {d['model_type']} {d['impl']}: doctor {d['doctor']}, transformers {d['transformers']} ({d['kind']})" for d in wrong]
    assert not wrong, f"{len(wrong)} recorded transformers verdicts the doctor now contradicts:\n" + "\n".join(lines[:30])


# Refusals the oracle found that the class flags do not show (doctor/releases/model_support.py
# REFUSED_BY_MODEL): the finding fires inside the range and stays quiet outside it.
FIRES = [
    ("5.0.0", "gpt_oss", "flash_attention_2"),  # GptOssConfig accepts only the vllm-flash-attn3 hub kernel
    ("5.0.0rc2", "gpt_oss", "flash_attention_2"),  # the setter is in the rc2 wheel already
    ("5.2.0", "gpt_oss", "flash_attention_3"),
    ("4.57.1", "qwen2_moe", "flash_attention_3"),  # merged flag passes, QWEN2MOE_ATTENTION_CLASSES has no key
    ("5.22.2", "falcon", "flash_attention_3"),
    ("4.48.0", "olmoe", "flex_attention"),  # flex flag set, OLMOE_ATTENTION_CLASSES has no flex key
]
PASSES = [
    ("5.3.0", "gpt_oss", "flash_attention_2"),  # from 5.3 the request is redirected to the hub kernel
    ("5.0.0rc1", "gpt_oss", "flash_attention_2"),  # rc0/rc1 have no GptOssConfig setter yet
    ("4.57.1", "qwen2_moe", "flash_attention_2"),
    ("5.0.0", "qwen2_moe", "flash_attention_3"),  # 5.0 moved qwen2_moe to the attention-function registry
    ("5.23.0", "falcon", "flash_attention_3"),  # 5.23 maps every flash request to the FA2 class
    ("4.48.0", "olmoe", "sdpa"),
]


@functools.lru_cache(maxsize=1)
def _catalogue():
    from doctor.rules.loader import load_catalogue

    return load_catalogue(use_cache=False)


def _status(version, model_type, impl):
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose

    case = {"packages": {"transformers": version, "torch": "2.8.0"}, "gpu": "9.0",
            "workload": {"model_type": model_type, "attn_implementation": impl}}
    if impl == "flash_attention_3":
        # a usable FlashAttention-3: without it transformers' availability check raises before
        # the model's attention-class dict is read (HF-NO-ATTENTION-IMPLEMENTATION)
        case["packages"]["flash-attn-3"] = "3.0.0b1"
        case["imports"] = {"flash_attn_3": {"status": "present"}}
    facts, workload = case_inputs(case)
    return diagnose(_catalogue(), facts, workload).result("HF-MODEL-HAS-NO-SUCH-ATTENTION").status


@pytest.mark.parametrize("version,model_type,impl", FIRES)
def test_model_refusal_found_by_the_oracle_fires(version, model_type, impl):
    assert _status(version, model_type, impl) == "fired"


@pytest.mark.parametrize("version,model_type,impl", PASSES)
def test_model_refusal_found_by_the_oracle_stays_quiet_outside_its_range(version, model_type, impl):
    assert _status(version, model_type, impl) != "fired"
