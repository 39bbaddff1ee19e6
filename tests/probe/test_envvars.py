"""Environment switches in the snapshot, with secrets removed."""

from __future__ import annotations

import json
from pathlib import Path

from probe_fakes import sources

from doctor.probe import collect
from doctor.probe.envvars import REDACTED, relevant, scrub

SECRETS = {
    "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123",
    "HUGGING_FACE_HUB_TOKEN": "hf_zyxwvutsrqponmlkjihgfedcba9876",
    "NCCL_IB_SECRET_KEY": "s3cr3t-nccl",
    "TORCH_AUTH_COOKIE": "cookie-value-123",
}
LEAKY = {
    "HF_ENDPOINT": "https://alice:pa55word@hub.internal.example/api",
    "TRANSFORMERS_CACHE_URL": "https://cache.example/models?x=1&access_token=tok-98765&y=2",
    "CUDA_NOTE": "uses hf_QWERTYUIOPASDFGHJKLZXCVBNM12 for pulls",
}


def test_relevant_variables_are_kept_and_others_dropped() -> None:
    env = relevant(
        {
            "NVTE_FLASH_ATTN": "0",
            "CUDA_VISIBLE_DEVICES": "0,1",
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
            "FLASH_ATTENTION_FORCE_BUILD": "TRUE",
            "HOME": "/root",
            "AWS_SECRET_ACCESS_KEY": "nope",
            "EDITOR": "vim",
        }
    )
    assert env == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "FLASH_ATTENTION_FORCE_BUILD": "TRUE",
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
        "NVTE_FLASH_ATTN": "0",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }


def test_secret_names_are_redacted() -> None:
    env = relevant(SECRETS)
    assert env == {k: REDACTED for k in SECRETS}


def test_credentials_inside_values_are_scrubbed() -> None:
    env = relevant(LEAKY)
    assert env["HF_ENDPOINT"] == "https://<redacted>@hub.internal.example/api"
    assert env["TRANSFORMERS_CACHE_URL"] == "https://cache.example/models?x=1&access_token=<redacted>&y=2"
    assert env["CUDA_NOTE"] == "uses <redacted> for pulls"


def test_scrub_leaves_ordinary_values_alone() -> None:
    for value in ("/usr/local/cuda/lib64:/opt/lib", "https://huggingface.co", "expandable_segments:True", "0,1,2,3"):
        assert scrub(value) == value


def test_no_secret_appears_anywhere_in_the_snapshot(site: Path) -> None:
    environ = {"PATH": "/nonexistent", **SECRETS, **LEAKY, "LD_LIBRARY_PATH": "/x:/y"}
    doc = collect(loaded=False, sources=sources(site, environ=environ))
    text = json.dumps(doc)
    for secret in ("hf_abcdefghijklmnopqrstuvwxyz0123", "hf_zyxwvutsrqponmlkjihgfedcba9876", "s3cr3t-nccl",
                   "cookie-value-123", "pa55word", "alice", "tok-98765", "hf_QWERTYUIOPASDFGHJKLZXCVBNM12"):
        assert secret not in text, secret
    assert doc["env"]["HF_TOKEN"] == REDACTED
    assert doc["env"]["LD_LIBRARY_PATH"] == "/x:/y"


def _env_names(cond: object) -> set:
    """Every `env:` name a condition tree reads."""
    if isinstance(cond, dict):
        names = {cond["env"]} if "env" in cond else set()
        for value in cond.values():
            names |= _env_names(value)
        return names
    if isinstance(cond, list):
        return set().union(*(_env_names(c) for c in cond)) if cond else set()
    return set()


def test_every_variable_a_rule_reads_is_collected() -> None:
    # A rule that reads env.X can only see X if the probe keeps it; otherwise the fact is
    # always unset and, e.g., LLaMA-Factory's DISABLE_VERSION_CHECK=1 would never quiet
    # the LF-*-DEPENDENCY-WINDOW errors.
    from doctor.probe.envvars import is_relevant
    from doctor.rules.loader import load_catalogue

    read = set().union(*(_env_names(r.when) for r in load_catalogue(use_cache=False).rules))
    assert "DISABLE_VERSION_CHECK" in read
    assert sorted(n for n in read if not is_relevant(n)) == []
    assert relevant({"DISABLE_VERSION_CHECK": "1"}) == {"DISABLE_VERSION_CHECK": "1"}
    # ROCm torch 2.7's opt-in for AOTriton's experimental GPUs (SDPA-FLASH-SM86-TRAINING-HEAD-DIM)
    assert "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL" in read
    # XTuner 0.1.20-0.1.23's package __init__ imports xtuner.utils (deepspeed) with these set (XTUNER-11)
    for name in ("HF_USE_CEPH", "HF_CEPH_HUB", "DS_CEPH_DIR"):
        assert name in read
        assert relevant({name: "1"}) == {name: "1"}
    on = {"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1"}
    assert relevant(on) == on
