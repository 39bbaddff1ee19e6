"""D2: a snapshot value that is not a version is an input error naming the key (exit 2), never a
rule that silently passes or falsely fires; local, NGC and ROCm version forms still load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harden_util import one_line, seed_doc


def _write(tmp_path: Path, section: str, key: Any, value: Any) -> Path:
    doc = seed_doc()
    if section == "gpus":
        doc["gpus"][0][key] = value
    else:
        doc[section][key] = value
    f = tmp_path / "snap.json"
    f.write_text(json.dumps(doc, indent=1))
    return f


@pytest.mark.parametrize(
    "section,key,value",
    [
        ("packages", "transformer-engine", "latest"),  # TE-REQ-CUDNN-9-3 used to pass
        ("packages", "torch", "latest"),  # SDPA backends used to flip to available
        ("packages", "flash-attn", ""),
        ("cudnn", "version", "abc"),  # TE-REQ-CUDNN-9-3 used to pass
        ("cudnn", "version", ""),  # TE-NO-BACKEND used to fire falsely
        ("torch", "cuda", "abc"),  # TORCH-DRIVER-TOO-OLD used to fire falsely
        ("torch", "version", ""),  # "torch not installed" + a false TE-REQ-TORCH-2-1
        ("cuda", "driver_version", "abc"),
        ("cuda", "driver_cuda", "twelve"),
        ("gpus", "memory_mib", -5),
    ],
)
def test_a_value_that_is_not_a_version_is_an_input_error_naming_the_key(cli, tmp_path: Path, section: str, key: str, value: Any) -> None:  # type: ignore[no-untyped-def]
    f = _write(tmp_path, section, key, value)
    commands = [["check", "--env", f, "-f", "json"]]
    if section == "packages" and key == "transformer-engine":  # every reader of --env, once
        commands += [["probe", "--env", f], ["fix", "--env", f]]
    for command in commands:
        code, out, err = cli(*command)
        assert code == 2, (command, out[-300:], err)
        line = one_line(err)
        where = f"gpus[0].{key}" if section == "gpus" else f"{section}.{key}"
        assert "snap.json:" in line and where in line, line


@pytest.mark.parametrize(
    "section,key,value",
    [
        ("packages", "torch", "2.3.0a0+6ddf5cf.nv24.04"),  # NGC
        ("packages", "transformer-engine", "1.9.0+e1d6b9b"),  # NGC TE local label
        ("torch", "version", "2.4.1+cu121"),
        ("torch", "hip", "6.0.32830-d62f6a171"),  # ROCm
        ("torch", "cudnn_version", "90100"),  # torch.backends.cudnn.version() form
        ("cuda", "driver_version", "550.54.15"),
    ],
)
def test_local_ngc_and_rocm_forms_still_load(cli, tmp_path: Path, section: str, key: str, value: str) -> None:  # type: ignore[no-untyped-def]
    f = _write(tmp_path, section, key, value)
    code, out, err = cli("check", "--env", f, "-f", "json")
    assert code in (0, 1), err
    assert json.loads(out)["summary"]["rules"] > 0
