"""The CLI as a user meets it: exit codes, one-line errors without tracebacks, no secrets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "docs" / "examples" / "seeds"


def run(*args: str, env: dict = None) -> Tuple[int, str, str]:  # type: ignore[assignment]
    p = subprocess.run(
        [sys.executable, "-m", "doctor", *args],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
        timeout=600,  # a hang guard, not a speed goal: a loaded 2-core machine took over 120 s
    )
    return p.returncode, p.stdout, p.stderr


def one_clear_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["check", "--env", "does-not-exist.json"], "does-not-exist.json"),
        (["check", "--no-kernels", "--format", "xml"], "unknown format 'xml'"),
        (["check", "--no-kernels", "--head-dimm", "128"], "no such option: --head-dimm"),
        (["check", "--no-kernels", "--mask", "diagonal"], "expected one of"),
        (["check", "--no-kernels", "--assume", "flash-attn>=2"], "expected NAME==VERSION"),
        (["check", "--no-kernels", "--fail-on", "fatal"], "--fail-on"),
        (["rules", "show", "NO-SUCH-RULE"], "no rule 'NO-SUCH-RULE'"),
        (["probe", "--bogus"], "No such option"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: List[str], needle: str) -> None:
    code, out, err = run(*args)
    assert code == 2, (code, out, err)
    assert needle.lower() in one_clear_line(err).lower()


def test_malformed_snapshot_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "snap.json"
    bad.write_text('{"schema_version": 1,\n "packages": {"torch": "2.4.1"\n')
    code, _, err = run("check", "--no-kernels", "--env", str(bad))
    assert code == 2
    line = one_clear_line(err)
    assert f"{bad}:" in line and "JSON" in line


def test_malformed_rule_file_in_rules_dir(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("rules:\n  - id: MINE\n    severity: fatal\n")
    code, _, err = run("check", "--no-kernels", "--env", str(SEED / "000-te-cp-flash-attn-softcap.snapshot.json"), "--rules-dir", str(tmp_path))
    assert code == 2
    assert f"{tmp_path / 'mine.yaml'}:" in one_clear_line(err)


def test_exit_codes_follow_fail_on(tmp_path: Path) -> None:
    snap = SEED / "004-te-fused-strided-gqa.snapshot.json"
    wl = SEED / "004-te-fused-strided-gqa.workload.yaml"
    code, out, _ = run("check", "--no-kernels", "--env", str(snap), "--workload", str(wl), "--format", "json")
    assert code == 1 and json.loads(out)["summary"]["error"] >= 1
    # the same environment with the fix assumed passes
    code, out, _ = run("check", "--no-kernels", "--env", str(snap), "--workload", str(wl), "--assume", "transformer-engine==1.12.0", "--format", "json")
    assert code == 0, out


def test_partial_snapshot_reports_not_evaluated_and_strict_fails(tmp_path: Path) -> None:
    snap = tmp_path / "partial.yaml"
    snap.write_text("packages: {transformer-engine: '1.13.0', flash-attn: '2.6.3'}\n")  # no GPU, no env
    code, out, _ = run("check", "--no-kernels", "--env", str(snap), "--cp-size", "2", "--format", "json")
    doc = json.loads(out)
    pending = [f for f in doc["findings"] if f["status"] == "not_evaluated"]
    assert pending and all(f["missing_facts"] for f in pending)
    assert code == (1 if doc["summary"]["error"] else 0)
    code_strict, _, _ = run("check", "--no-kernels", "--env", str(snap), "--cp-size", "2", "--strict", "--format", "json")
    assert code_strict == 1


def test_secrets_in_snapshot_env_never_printed(tmp_path: Path) -> None:
    snap = tmp_path / "s.json"
    snap.write_text(json.dumps({"packages": {}, "env": {"HF_TOKEN": "hf_supersecret123", "NCCL_DEBUG": "INFO", "WANDB_API_KEY": "abc987zzz"}}))
    for fmt in ("text", "json", "markdown", "junit"):
        _, out, err = run("check", "--no-kernels", "--env", str(snap), "--format", fmt, "-v")
        assert "hf_supersecret123" not in out + err and "abc987zzz" not in out + err
    _, out, _ = run("probe", "--env", str(snap), "--format", "json")
    assert "hf_supersecret123" not in out


def test_rules_lint_reports_failing_case(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text(
        """rules:
  - id: MY-TORCH-OLD
    severity: warning
    title: old torch
    message: torch {package.torch} is old
    when: {package: torch, version: "<2.0"}
    sources: [https://github.com/pytorch/pytorch/releases]
    tests:
      fires: [{packages: {torch: "2.1.0"}}]
      passes: [{packages: {torch: "2.4.1"}}]
"""
    )
    code, out, _ = run("rules", "lint", str(f))
    assert code == 1
    assert f"{f}:2: rule MY-TORCH-OLD: fires[0] expected fired, got passed" in out


def test_python_m_doctor_and_help() -> None:
    code, out, _ = run("--help")
    assert code == 0 and "check" in out and "probe" in out and "rules" in out


def test_fleet_view_runs_the_rules_on_every_snapshot_whatever_the_order() -> None:
    good = SEED / "001-te-cp-allgather-cudnn.snapshot.json"
    bad = SEED / "000-te-cp-flash-attn-softcap.snapshot.json"
    for order in ((good, bad), (bad, good)):
        code, out, _ = run("check", "--no-kernels", "--cp-size", "2", "--cp-comm-type", "p2p", "--format", "json", "--env", str(order[0]), "--env", str(order[1]))
        doc = json.loads(out)
        ids = {f["rule_id"]: f for f in doc["findings"]}
        assert code == 1
        assert "TE-CP-FLASH-ATTN-SOFTCAP" in ids and "llama2-cp-node" in ids["TE-CP-FLASH-ATTN-SOFTCAP"]["title"]
        assert "CLUSTER-HETERO-TE" in ids
