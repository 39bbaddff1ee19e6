"""GPUs and driver: NVML, then nvidia-smi, else unknown with the reason."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from probe_fakes import FakeNvml, FakeRunner, ok, sources

from doctor.probe import collect
from doctor.probe.gpus import cuda_version_from_int, parse_smi
from doctor.probe.sources import RunResult

SMI_ROWS = "0, NVIDIA H100 80GB HBM3, 9.0, 81559, 550.54.15\n1, NVIDIA H100 80GB HBM3, 9.0, 81559, 550.54.15\n"
SMI_PLAIN = "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4     |\n"


def _smi(argv, timeout, env):  # type: ignore[no-untyped-def]
    return ok(SMI_ROWS if len(argv) > 1 else SMI_PLAIN, argv)


def test_nvml_gives_driver_cuda_and_gpus(site: Path) -> None:
    nvml = FakeNvml(gpus=[("NVIDIA A100-SXM4-80GB", (8, 0), 81920), ("NVIDIA GeForce RTX 4090", (8, 9), 24564)])
    doc = collect(loaded=False, sources=sources(site, nvml_loader=lambda: nvml))
    assert doc["cuda"]["driver_version"] == "550.54.15"
    assert doc["cuda"]["driver_cuda"] == "12.4"
    assert doc["gpus"] == [
        {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "memory_mib": 81920},
        {"index": 1, "name": "NVIDIA GeForce RTX 4090", "compute_capability": "8.9", "memory_mib": 24564},
    ]
    assert doc["provenance"]["gpus"] == "nvml"
    assert nvml.shutdown_called


def test_cuda_driver_version_encoding() -> None:
    assert cuda_version_from_int(12040) == "12.4"
    assert cuda_version_from_int(13000) == "13.0"
    assert cuda_version_from_int(11080) == "11.8"


def test_nvidia_smi_fallback_when_nvml_is_missing(site: Path) -> None:
    runner = FakeRunner({"nvidia-smi": _smi})
    src = sources(site, run=runner, which=lambda n: "/usr/bin/nvidia-smi" if n == "nvidia-smi" else None)
    doc = collect(loaded=False, sources=src)
    assert [g["compute_capability"] for g in doc["gpus"]] == ["9.0", "9.0"]
    assert doc["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert doc["cuda"]["driver_version"] == "550.54.15"
    assert doc["cuda"]["driver_cuda"] == "12.4"
    assert doc["provenance"]["gpus"] == "nvidia-smi"


def test_nvidia_smi_fallback_when_nvml_init_fails(site: Path) -> None:
    runner = FakeRunner({"nvidia-smi": _smi})
    src = sources(
        site, run=runner, nvml_loader=lambda: FakeNvml(fail_init=True),
        which=lambda n: "/usr/bin/nvidia-smi" if n == "nvidia-smi" else None,
    )
    doc = collect(loaded=False, sources=src)
    assert len(doc["gpus"]) == 2 and doc["provenance"]["gpus"] == "nvidia-smi"


def test_neither_nvml_nor_smi_gives_unknown_with_both_reasons(site: Path) -> None:
    doc = collect(loaded=False, sources=sources(site))
    assert doc["gpus"] is None
    reason = doc["unknown"]["gpus"]
    assert "libnvidia-ml.so.1" in reason and "nvidia-smi is not on PATH" in reason
    assert doc["unknown"]["cuda.driver_version"] == reason


def test_hung_nvidia_smi_is_reported(site: Path) -> None:
    hung = RunResult(("nvidia-smi",), None, timed_out=True)
    src = sources(site, run=FakeRunner({"nvidia-smi": hung}), which=lambda n: "/usr/bin/nvidia-smi")
    doc = collect(loaded=False, sources=src)
    assert doc["gpus"] is None
    assert "did not answer within 2 s" in doc["unknown"]["gpus"]


def test_a_really_hanging_nvidia_smi_is_killed_in_time(site: Path, tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    pidfile = tmp_path / "smi.pid"
    smi.write_text(f"#!{sys.executable}\nimport os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(300)\n")
    smi.chmod(0o755)
    from doctor.probe.sources import run_command

    src = sources(site, run=run_command, which=None, environ={"PATH": str(bindir)}, smi_timeout=0.5)
    start = time.monotonic()
    doc = collect(loaded=False, sources=src)
    assert time.monotonic() - start < 120  # killed after 0.5 s; it would sleep 300 s (no speed guess)
    assert "did not answer within 0.5 s" in doc["unknown"]["gpus"]
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass  # killed and reaped: nothing left behind
    else:
        os.kill(pid, 9)
        raise AssertionError("the hung nvidia-smi was left running")


def test_failing_nvidia_smi_reports_its_message(site: Path) -> None:
    failed = RunResult(("nvidia-smi",), 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "")
    src = sources(site, run=FakeRunner({"nvidia-smi": failed}), which=lambda n: "/usr/bin/nvidia-smi")
    doc = collect(loaded=False, sources=src)
    assert "couldn't communicate with the NVIDIA driver" in doc["unknown"]["gpus"]


def test_parse_smi_rejects_garbage_capability() -> None:
    gpus, driver = parse_smi("0, Tesla V100-SXM2-16GB, 7.0, 16160, 535.104.05\n")
    assert gpus[0].compute_capability == "7.0" and driver == "535.104.05"
    try:
        parse_smi("0, Weird GPU, [N/A], 100, 1.0\n")
    except ValueError as exc:
        assert "compute capability" in str(exc)
    else:
        raise AssertionError("garbage compute capability accepted")


def test_no_gpus_is_a_known_empty_list(site: Path) -> None:
    doc = collect(loaded=False, sources=sources(site, nvml_loader=lambda: FakeNvml(gpus=[])))
    assert doc["gpus"] == [] and "gpus" not in doc["unknown"]
