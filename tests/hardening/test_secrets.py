"""D6: secret values never leave the machine: a corpus of token shapes, put in innocently named
variables, goes through every command and format, and none of it survives anywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pytest
from harden_util import SEED003, WORKLOAD003

from doctor.probe.envvars import REDACTED, scrub

# Synthetic tokens in the shapes real ones have (none of them is a real credential).
TOKENS: Dict[str, str] = {
    "github_classic": "ghp_Zq8W1rT5yU3iO7pA9sD2fG4hJ6kL0xC3vB5n",
    "github_short": "ghp_SECRETVALUE4",
    "github_oauth": "gho_q1W2e3R4t5Y6u7I8o9P0a1S2d3F4g5H6j7K8",
    "github_pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH",
    "hf": "hf_kQxWvTnLpRsZyMaBcDeFgHiJkLmNoPqRsTu",
    "hf_short": "hf_SECRETVALUE13",
    "aws_key_id": "AKIAZ7Q3R5T1Y9U2I4O6",
    "aws_sts_id": "ASIAQ2W4E6R8T0Y1U3I5",
    "aws_secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYz9Q2w8E4r6",
    "slack_bot": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "slack_user": "xoxp-2222222222-3333333333-4444444444-abcdef0123456789abcdef0123456789",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI0MjQyIiwibmFtZSI6IngifQ.Q2x1ZWxlc3NTaWduYXR1cmVCeXRlcw",
    "generic_alnum": "q8Zr3LmX0vT7bN2kP5wY9cH4jD6fG1sA",
    "generic_hex": "3f9a6c1e8b7d2054af13c9e6b8d7f0a2c4e61b93",
    "generic_b64": "dGhpcy1pcy1ub3QtYS1yZWFsLWtleS0xMjM0NTY3OA==",
}
# Credentials inside otherwise useful values: only the credential part must go.
WRAPPED: Dict[str, str] = {
    "url_user_only": "https://SECRETUSERTOKEN9@hf.example.com/api",
    "url_user_pass": "https://alice:SECRETPASS5word@pypi.example.com/simple",
    "query_token": "https://cache.example.com/m?x=1&access_token=SECRETQUERY77&y=2",
    "option": "--retries 3 --password SECRETOPTION15",
    "bearer": "Authorization: Bearer SECRETBEARERVALUE88",
}
SECRET_PARTS = {
    **{k: v for k, v in TOKENS.items()},
    "url_user_only": "SECRETUSERTOKEN9",
    "url_user_pass": "SECRETPASS5word",
    "query_token": "SECRETQUERY77",
    "option": "SECRETOPTION15",
    "bearer": "SECRETBEARERVALUE88",
}
PREFIXES = ["NCCL_", "TORCH_", "CUDA_", "NVTE_", "HF_", "PYTORCH_"]


def _environment() -> Dict[str, str]:
    env = {}
    for i, (kind, value) in enumerate({**TOKENS, **WRAPPED}.items()):
        env[f"{PREFIXES[i % len(PREFIXES)]}HARDEN_{kind.upper()}"] = value  # innocent names
    env["NCCL_SOCKET_IFNAME"] = TOKENS["github_short"]  # the review's leak
    return env


def _leaks(text: str) -> List[str]:
    found = []
    for kind, secret in SECRET_PARTS.items():
        for piece in {secret, secret[-10:], secret[:14]}:
            if piece in text:
                found.append(f"{kind}: {piece}")
    return found


@pytest.mark.parametrize("kind,value", sorted({**TOKENS, **WRAPPED}.items()))
def test_scrub_removes_every_shape(kind: str, value: str) -> None:
    out = scrub(value, random_strings=True)  # as for environment values
    assert REDACTED in out and not _leaks(out), (kind, out)
    if kind in WRAPPED or not kind.startswith(("generic", "aws_secret")):
        assert not _leaks(scrub(value))  # shapes and URL parts: in any text


@pytest.mark.parametrize(
    "value",
    [
        "/usr/local/cuda-12.4/lib64:/opt/conda/lib/python3.11/site-packages/nvidia/cudnn/lib",
        "expandable_segments:True,max_split_size_mb:128",
        "8.0;8.6;9.0+PTX",
        "https://huggingface.co",
        "0,1,2,3",
        "eth0,ib0",
        "transformer_engine_torch_extensions_build",
        "nvidia_cudnn_cu12-9.1.0.70",
    ],
)
def test_ordinary_values_are_kept(value: str) -> None:
    assert scrub(value, random_strings=True) == value


def test_error_messages_keep_mangled_symbols() -> None:
    msg = "flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"
    assert scrub(msg) == msg


def test_no_token_survives_any_command_or_format(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its own cache: checked for leaks below
    for name, value in _environment().items():
        monkeypatch.setenv(name, value)
    outputs: Dict[str, str] = {}

    def grab(label: str, *args: str) -> str:
        code, out, err = cli(*args)
        assert code in (0, 1), (label, err)
        outputs[label] = out + err
        return out

    snap = tmp_path / "snap.json"
    snap.write_text(grab("probe json static", "probe", "--format", "json", "--static"))
    env = json.loads(snap.read_text())["env"]
    assert env["NCCL_SOCKET_IFNAME"] == REDACTED
    assert "https://<redacted>@hf.example.com/api" in env.values()  # the useful part stays
    assert sum("_HARDEN_" in name for name in env) == len(TOKENS) + len(WRAPPED)
    grab("probe text", "probe")  # loaded: the torch-importing child sees the variables too
    grab("probe json", "probe", "--format", "json")
    for fmt in ("text", "json"):
        grab(f"probe --env {fmt}", "probe", "--env", str(snap), "--format", fmt)
    for fmt in ("text", "json", "markdown", "junit"):
        grab(f"check {fmt}", "check", "--no-kernels", "--static", "-v", "-f", fmt)
        grab(f"check --env {fmt}", "check", "--env", str(snap), "-v", "-f", fmt)
    for fmt in ("text", "json", "markdown"):
        grab(f"fix {fmt}", "fix", "--static", "-f", fmt)
        grab(f"fix --env {fmt}", "fix", "--env", str(snap), "-f", fmt)

    # a hand-written snapshot that carries the raw values: never echoed either
    raw = json.loads(SEED003.read_text())
    raw["env"] = {**raw.get("env", {}), **_environment()}
    hand = tmp_path / "hand.json"
    hand.write_text(json.dumps(raw))
    for fmt in ("text", "json"):
        grab(f"probe --env hand {fmt}", "probe", "--env", str(hand), "--format", fmt)
    grab("check --env hand", "check", "--env", str(hand), "-v", "-f", "json")
    grab("fleet", "check", "--env", str(hand), "--env", str(snap), "-f", "json")
    grab("fix --env hand", "fix", "--env", str(hand), "-w", str(WORKLOAD003), "-f", "json")

    # requirements with credentials: the --dry-run diff reprints the file's lines
    req = tmp_path / "req.txt"
    req.write_text(f"--index-url {WRAPPED['url_user_pass']}\n--extra-index-url {WRAPPED['url_user_only']}\ntransformer-engine==2.3.0\n")
    grab("fix --pin --dry-run", "fix", "--env", str(SEED003), "-w", str(WORKLOAD003), "--pin", "-o", str(req), "--dry-run")

    leaks = {label: _leaks(text) for label, text in outputs.items() if _leaks(text)}
    assert not leaks, leaks
    cache = tmp_path / "cache"
    assert cache.exists()
    for f in cache.rglob("*"):
        if f.is_file():
            assert not _leaks(f.read_text(errors="replace")), f
