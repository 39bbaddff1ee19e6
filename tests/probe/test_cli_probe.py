"""`attn-doctor probe` end to end: real processes, real environment, snapshot files."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from doctor.cli import main
from doctor.snapshot import load_snapshot

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
HEAVY = ("torch", "transformers")  # never in this process, static or not


def _imported(importtime_stderr: str) -> set:
    return {line.split("|")[-1].strip() for line in importtime_stderr.splitlines() if line.startswith("import time:")}


def test_cli_start_imports_no_heavy_module() -> None:
    res = _run("-X", "importtime", "-c", "import doctor.cli, doctor.app, doctor.probe, doctor.snapshot")
    assert res.returncode == 0, res.stderr
    heavy = _imported(res.stderr) & {"torch", "transformers", "pynvml", "rich"}
    assert not heavy, sorted(heavy)


def _run(*args: str, extra_env: dict = {}) -> subprocess.CompletedProcess:  # noqa: B006
    env = {**os.environ, "ATTN_DOCTOR_NO_CACHE": "1", **extra_env}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600  # a hang guard, not a speed goal
    )


def test_static_json_parses_and_never_imports_torch() -> None:
    res = _run("-X", "importtime", "-m", "doctor", "probe", "--format", "json", "--static")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 1
    heavy = _imported(res.stderr) & set(HEAVY)
    assert not heavy, sorted(heavy)
    if importlib.util.find_spec("torch") is not None:
        dist_version = importlib.metadata.version("torch")
        assert doc["packages"]["torch"] == dist_version
        # torch/version.py may carry a local label the dist lacks (PyPI cu130: 2.11.0 vs 2.11.0+cu130)
        assert doc["torch"]["version"].split("+")[0] == dist_version.split("+")[0]
        assert "static" in doc["unknown"]["torch.cxx11_abi"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch installed")
def test_default_probe_imports_torch_in_a_child() -> None:
    res = _run("-m", "doctor", "probe", "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    import torch  # the test process may import torch: only the CLI must not

    assert doc["torch"]["cxx11_abi"] == bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    assert doc["torch"]["cuda_available"] == torch.cuda.is_available()
    assert doc["provenance"]["torch.cuda_available"].startswith("child-process")


def test_env_snapshot_to_json(capsys: pytest.CaptureFixture[str]) -> None:
    path = DATA / "a100_snapshot.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", "--env", str(path), "--format", "json"])
    assert exit_info.value.code == 0
    assert json.loads(capsys.readouterr().out) == load_snapshot(path)


def test_env_snapshot_to_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", "--env", str(DATA / "a100_snapshot.json")])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "cuDNN mismatch" in out and "\x1b[" not in out


def test_bad_snapshot_exits_2_with_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text('{\n  "gpus": [\n    {"compute_capability": 80}\n  ]\n}\n')
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", "--env", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attn-doctor: error: {path}:3: gpus[0].compute_capability")
