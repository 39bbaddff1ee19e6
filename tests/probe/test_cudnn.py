"""cuDNN on disk (wheels, system), what torch loads, what torch pins, and their mismatches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from probe_fakes import FakeRunner, add_dist, add_file, add_torch, child_output, good_child_records, ok, sources

from doctor.probe import collect
from doctor.probe.child import LoadedTorch
from doctor.probe.cuda_libs import CudaLibs, CudnnWheel, SystemCudnn, header_version, probe
from doctor.probe.cudnn import assess
from doctor.probe.packages import scan
from doctor.probe.sources import RunResult
from doctor.probe.torch_build import TorchBuild

HEADER = "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 0\n"
PIN_91 = 'nvidia-cudnn-cu12==9.1.0.70; platform_system == "Linux"'


def _cu12_wheel(site: Path, version: str = "9.1.0.70") -> None:
    add_dist(
        site,
        "nvidia-cudnn-cu12",
        version,
        record=["nvidia/cudnn/lib/libcudnn.so.9", "nvidia/cudnn/include/cudnn_version.h"],
    )
    add_file(site, "nvidia/cudnn/lib/libcudnn.so.9")
    add_file(site, "nvidia/cudnn/include/cudnn_version.h", HEADER)


def test_cu12_wheel_found_with_lib_dir(site: Path) -> None:
    _cu12_wheel(site)
    add_dist(site, "nvidia-cuda-runtime-cu12", "12.1.105")
    doc = collect(loaded=False, sources=sources(site))
    assert doc["cudnn"]["wheels"] == [
        {"dist": "nvidia-cudnn-cu12", "version": "9.1.0.70", "lib_dir": str(site / "nvidia/cudnn/lib")}
    ]
    assert doc["cudnn"]["installed"] == "9.1.0"
    assert doc["cuda"]["runtime"] == "12.1.105"
    assert doc["cuda"]["runtime_wheels"] == {"nvidia-cuda-runtime-cu12": "12.1.105"}


def test_cu13_layout_without_record(site: Path) -> None:
    add_dist(site, "nvidia-cudnn-cu13", "9.20.0.48")
    add_file(site, "nvidia/cu13/lib/libcudnn.so.9")
    libs = probe(scan([str(site)]), sources(site))
    assert libs.cudnn_wheels == (CudnnWheel("nvidia-cudnn-cu13", "9.20.0.48", str(site / "nvidia/cu13/lib")),)


def test_header_version(tmp_path: Path) -> None:
    h = tmp_path / "cudnn_version.h"
    h.write_text("/* x */\n#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 9\n#define CUDNN_PATCHLEVEL 7\n")
    assert header_version(h) == "8.9.7"
    assert header_version(tmp_path / "absent.h") is None


def test_system_cudnn_from_ldconfig_and_ld_library_path(site: Path, tmp_path: Path) -> None:
    sysdir = tmp_path / "usr/lib/x86_64-linux-gnu"
    sysdir.mkdir(parents=True)
    real = sysdir / "libcudnn.so.8.9.7"
    real.write_text("")
    os.symlink(real.name, sysdir / "libcudnn.so.8")
    other = tmp_path / "opt/cudnn/lib"
    other.mkdir(parents=True)
    (other / "libcudnn.so.9").write_text("")
    add_file(tmp_path, "opt/cudnn/include/cudnn_version.h", HEADER)
    ldconfig = ok(f"2 libs found in cache `/etc/ld.so.cache'\n\tlibcudnn.so.8 (libc6,x86-64) => {sysdir}/libcudnn.so.8\n")
    runner = FakeRunner({"ldconfig": ldconfig})
    src = sources(
        site,
        run=runner,
        use_ldconfig=True,
        which=lambda n: "/sbin/ldconfig" if n == "ldconfig" else None,
        environ={"LD_LIBRARY_PATH": str(other)},
    )
    doc = collect(loaded=False, sources=src)
    assert doc["cudnn"]["system"] == [
        {"path": f"{sysdir}/libcudnn.so.8", "version": "8.9.7"},
        {"path": f"{other}/libcudnn.so.9", "version": "9.1.0"},
    ]
    assert doc["cudnn"]["installed"] == "9.1.0"


def test_ldconfig_timeout_is_noted_not_fatal(site: Path) -> None:
    runner = FakeRunner({"ldconfig": RunResult(("ldconfig",), None, timed_out=True)})
    src = sources(site, run=runner, use_ldconfig=True, which=lambda n: "/sbin/ldconfig" if n == "ldconfig" else None)
    doc = collect(loaded=False, sources=src)
    assert "timed out" in doc["unknown"]["cudnn.system"]


def _build(pin: str = "9.1.0.70") -> TorchBuild:
    return TorchBuild("2.5.1+cu124", "12.4", None, "x", "/v.py", "/M", {"nvidia-cudnn-cu12": pin}, "/site")


def _libs(*wheels: CudnnWheel, system: tuple = ()) -> CudaLibs:
    return CudaLibs(tuple(wheels), system, None, None, {}, ())


WHEEL = CudnnWheel("nvidia-cudnn-cu12", "9.1.0.70", "/site/nvidia/cudnn/lib")


def test_all_agree_no_mismatch() -> None:
    loaded = LoadedTorch(cudnn_version="9.1.0", cudnn_path="/site/nvidia/cudnn/lib/libcudnn.so.9")
    facts = assess(_libs(WHEEL), _build(), loaded, {})
    assert facts.mismatch is None
    assert (facts.version, facts.loaded, facts.installed, facts.bundled) == ("9.1.0", "9.1.0", "9.1.0", "9.1.0.70")


def test_system_cudnn_shadowing_the_pinned_wheel_is_flagged() -> None:
    loaded = LoadedTorch(cudnn_version="8.9.7", cudnn_path="/usr/lib/x86_64-linux-gnu/libcudnn.so.8")
    facts = assess(_libs(WHEEL), _build(), loaded, {})
    assert facts.version == "8.9.7"  # effective = what torch really loaded
    assert facts.mismatch is not None
    assert "torch loaded cuDNN 8.9.7 from /usr/lib/x86_64-linux-gnu/libcudnn.so.8" in facts.mismatch
    assert "pins nvidia-cudnn-cu12==9.1.0.70" in facts.mismatch
    assert "shadows" in facts.mismatch


def test_wheel_moved_off_the_pin_is_flagged_statically() -> None:
    wheel = CudnnWheel("nvidia-cudnn-cu12", "9.5.1.17", "/site/nvidia/cudnn/lib")
    facts = assess(_libs(wheel), _build(), None, {})
    assert facts.version == "9.5.1"  # static estimate: the wheel torch will load
    assert "nvidia-cudnn-cu12 9.5.1.17 is installed but torch 2.5.1+cu124 pins 9.1.0.70" in str(facts.mismatch)
    assert "pip install nvidia-cudnn-cu12==9.1.0.70" in str(facts.mismatch)


def test_pinned_wheel_missing_is_flagged() -> None:
    facts = assess(_libs(), _build(), None, {})
    assert "not installed" in str(facts.mismatch)


def test_ld_library_path_cudnn_may_shadow_in_static_mode() -> None:
    sys_lib = SystemCudnn("/opt/cudnn8/lib/libcudnn.so.8", "8.9.2", "libcudnn.so.8.9.2")
    facts = assess(_libs(WHEEL, system=(sys_lib,)), _build(), None, {"LD_LIBRARY_PATH": "/opt/cudnn8/lib"})
    assert "may shadow" in str(facts.mismatch)
    quiet = assess(_libs(WHEEL, system=(sys_lib,)), _build(), None, {})
    assert quiet.mismatch is None


def test_two_cudnn_in_one_process_is_flagged() -> None:
    loaded = LoadedTorch(cudnn_version="9.1.0", cudnn_path="/usr/lib/x86_64-linux-gnu/libcudnn.so.9")
    stray = CudnnWheel("nvidia-cudnn-cu12", "9.10.2.21", "/site/nvidia/cudnn/lib")
    no_pin = TorchBuild("2.3.0a0+6ddf5cf.nv24.04", "12.4", None, None, None, None, {}, "/site")
    facts = assess(_libs(stray), no_pin, loaded, {})
    assert facts.bundled is None
    assert "nvidia-cudnn-cu12 9.10.2.21 wheel is also installed" in str(facts.mismatch)


def test_mismatch_reaches_the_snapshot(site: Path) -> None:
    add_torch(site, "2.5.1+cu124", "12.4", requires=[PIN_91])
    _cu12_wheel(site, "9.3.0.75")
    doc = collect(loaded=False, sources=sources(site))
    assert doc["cudnn"]["bundled"] == "9.1.0.70"
    assert doc["cudnn"]["installed"] == "9.3.0"
    assert "pins 9.1.0.70" in doc["cudnn"]["mismatch"]
    assert "cudnn.loaded" in doc["unknown"]


REFUSAL = (
    "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (9, 19, 0) but found "
    "runtime version (9, 14, 0). PyTorch already comes bundled with cuDNN. One option to resolving "
    "this error is to ensure PyTorch can find the bundled cuDNN. one possibility is that there is a "
    "conflicting cuDNN in LD_LIBRARY_PATH."
)


WHEEL_SO = "/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9"
SYSTEM_SO = "/lib/x86_64-linux-gnu/libcudnn.so.9"


@pytest.mark.parametrize("resolved", [True, False])
def test_torch_refusing_a_shadowing_system_cudnn(site: Path, resolved: bool) -> None:
    """What a real H200 box showed with LD_PRELOAD=/lib/x86_64-linux-gnu/libcudnn.so.9 (9.14):
    both files mapped, the system one wins, torch.backends.cudnn.version() raises."""
    add_torch(site, "2.11.0+cu130", "13.0", requires=["nvidia-cudnn-cu13==9.19.0.56"])
    _cu12_wheel(site, "9.19.0.56")
    records = good_child_records()
    facts = records[3]["facts"]
    facts["cudnn_version_int"] = {"error": REFUSAL}
    facts["cudnn_mapped"] = {"value": [WHEEL_SO, SYSTEM_SO]}
    facts["cudnn_in_use"] = {"value": {"version": 91400, "path": SYSTEM_SO}} if resolved else {"error": "OSError: x"}
    runner = FakeRunner({"python": RunResult(("python",), 0, child_output(*records), "")})
    doc = collect(loaded=True, sources=sources(site, run=runner, python="/usr/bin/python3"))
    cudnn = doc["cudnn"]
    assert cudnn["loaded"] == "9.14.0" and cudnn["version"] == "9.14.0"  # from the symbol or torch's message
    assert cudnn["loaded_path"] == (SYSTEM_SO if resolved else None)
    if resolved:
        assert f"torch loaded cuDNN 9.14.0 from {SYSTEM_SO}" in cudnn["mismatch"]
        assert "shadows it" in cudnn["mismatch"]
    assert "two cuDNN libraries are loaded in one process" in cudnn["mismatch"]
    assert "torch rejects the cuDNN it loaded: RuntimeError: cuDNN version incompatibility" in cudnn["mismatch"]
    assert doc["torch"]["cudnn_version"] is None
    assert "cuDNN version incompatibility" in doc["unknown"]["torch.cudnn_version"]
    assert "cudnn.loaded" not in doc["unknown"]


def test_cudnn_parts_from_two_folders() -> None:
    """The real H200 case with LD_LIBRARY_PATH=/lib/x86_64-linux-gnu: the wheel's libcudnn.so.9
    loaded its libcudnn_graph/engines parts from the system folder, so 9.14 ran."""
    wheel_dir = "/venv/lib/python3.12/site-packages/nvidia/cudnn/lib"
    loaded = LoadedTorch(
        cudnn_version=None,
        cudnn_runtime="9.14.0",
        cudnn_path=f"{wheel_dir}/libcudnn.so.9",
        cudnn_mapped=(f"{wheel_dir}/libcudnn.so.9", "/opt/sys/lib/libcudnn_graph.so.9", "/opt/sys/lib/libcudnn_engines_precompiled.so.9"),
    )
    wheel = CudnnWheel("nvidia-cudnn-cu12", "9.1.0.70", wheel_dir)
    facts = assess(_libs(wheel), _build(), loaded, {})
    assert facts.loaded == "9.14.0"
    text = str(facts.mismatch)
    assert "cuDNN is assembled from more than one folder" in text
    assert f"libcudnn.so.9 from {wheel_dir}" in text
    assert "libcudnn_engines_precompiled.so.9, libcudnn_graph.so.9 from /opt/sys/lib" in text
    assert "two cuDNN libraries" not in text


# Snapshots taken on a real H200 (torch 2.11.0+cu130, wheel cuDNN 9.19, system cuDNN 9.14 in
# /lib/x86_64-linux-gnu) by `attn-doctor probe --format json`, as is, with no change.
REAL = Path(__file__).parent / "data"


def test_real_h200_default_has_no_mismatch() -> None:
    from doctor.snapshot import load_snapshot

    doc = load_snapshot(REAL / "h200_real_default.json")
    assert doc["cudnn"]["mismatch"] is None
    assert doc["cudnn"]["loaded"] == "9.19.0" and doc["cudnn"]["bundled"] == "9.19.0.56"
    assert doc["cudnn"]["loaded_path"].endswith("site-packages/nvidia/cudnn/lib/libcudnn.so.9")
    assert doc["gpus"][0]["compute_capability"] == "9.0" and doc["cuda"]["driver_cuda"] == "13.0"


def test_real_h200_ld_preload_names_the_system_cudnn() -> None:
    from doctor.snapshot import load_snapshot

    doc = load_snapshot(REAL / "h200_real_ld_preload.json")
    assert doc["cudnn"]["loaded"] == "9.14.0"
    assert doc["cudnn"]["loaded_path"] == "/lib/x86_64-linux-gnu/libcudnn.so.9"
    lines = doc["cudnn"]["mismatch"].splitlines()
    assert any("shadows it" in line for line in lines)
    assert any(line.startswith("two cuDNN libraries are loaded in one process") for line in lines)


def test_real_h200_ld_library_path_mixes_cudnn_parts() -> None:
    from doctor.snapshot import load_snapshot

    doc = load_snapshot(REAL / "h200_real_ld_library_path.json")
    assert doc["cudnn"]["loaded"] == "9.14.0"
    mismatch = doc["cudnn"]["mismatch"]
    assert "libcudnn_graph.so.9.14.0 from /usr/lib/x86_64-linux-gnu" in mismatch
    assert "torch rejects the cuDNN it loaded" in mismatch
