"""The snapshot document as a whole: shape, never raising, and the loaded-facts cache."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from probe_fakes import FakeNvml, FakeRunner, add_dist, add_file, add_torch, child_output, good_child_records, sources

from doctor.model import SCHEMA_VERSION
from doctor.probe import collect
from doctor.probe.sources import RunResult
from doctor.snapshot import SECTIONS


def _child_runner(**kw):  # type: ignore[no-untyped-def]
    return FakeRunner({"python": RunResult(("python",), 0, child_output(*good_child_records(**kw)), "")})


def test_document_has_every_section_and_is_json(site: Path) -> None:
    add_torch(site)
    doc = collect(loaded=False, sources=sources(site, nvml_loader=lambda: FakeNvml()))
    assert list(doc) == list(SECTIONS)
    assert doc["schema_version"] == SCHEMA_VERSION
    created = datetime.fromisoformat(doc["created"])
    assert created.utcoffset() == timezone.utc.utcoffset(None)
    assert json.loads(json.dumps(doc)) == doc
    assert doc["python"]["executable"] and doc["platform"]["arch"]


def test_a_source_that_raises_becomes_an_unknown_fact(site: Path) -> None:
    add_torch(site)

    def broken_nvml():  # type: ignore[no-untyped-def]
        class Weird:
            def nvmlInit(self) -> None:
                raise ZeroDivisionError("boom")

        return Weird()

    def exploding_run(argv, timeout, env):  # type: ignore[no-untyped-def]
        raise RuntimeError("runner bug")

    src = sources(site, nvml_loader=broken_nvml, run=exploding_run, python="/usr/bin/python3",
                  which=lambda n: "/usr/bin/" + n)
    doc = collect(loaded=True, sources=src)
    assert doc["gpus"] is None
    assert "internal error" in doc["unknown"]["gpus"]
    assert "runner bug" in doc["unknown"]["torch.cxx11_abi"]
    json.dumps(doc)


def test_loaded_facts_are_cached_until_something_changes(site: Path, tmp_path: Path) -> None:
    add_torch(site)
    cache_dir = tmp_path / "cache"
    runner = _child_runner()
    src = sources(site, run=runner, python="/usr/bin/python3", cache_dir=cache_dir, environ={"PATH": "/x"})
    first = collect(loaded=True, sources=src)
    second = collect(loaded=True, sources=src)
    assert runner.count("python") == 1
    assert second["torch"] == first["torch"] and second["imports"] == first["imports"]
    assert "cached" in second["provenance"]["torch.cxx11_abi"]

    changed_env = sources(site, run=runner, python="/usr/bin/python3", cache_dir=cache_dir,
                          environ={"PATH": "/x", "LD_LIBRARY_PATH": "/opt/cudnn8/lib"})
    collect(loaded=True, sources=changed_env)
    assert runner.count("python") == 2

    add_dist(site, "flash-attn", "2.6.3")  # a new install: the child must look again
    collect(loaded=True, sources=src)
    assert runner.count("python") == 3


def test_gpu_invisible_to_torch_is_not_cached(site: Path, tmp_path: Path) -> None:
    add_torch(site)
    runner = _child_runner(available=False)
    src = sources(site, run=runner, python="/usr/bin/python3", cache_dir=tmp_path / "c",
                  nvml_loader=lambda: FakeNvml())
    collect(loaded=True, sources=src)
    collect(loaded=True, sources=src)
    assert runner.count("python") == 2


def test_incomplete_child_results_are_not_cached(site: Path, tmp_path: Path) -> None:
    add_torch(site)
    partial = child_output(*good_child_records()[:4])
    runner = FakeRunner({"python": RunResult(("python",), None, partial, "", timed_out=True)})
    src = sources(site, run=runner, python="/usr/bin/python3", cache_dir=tmp_path / "c")
    collect(loaded=True, sources=src)
    collect(loaded=True, sources=src)
    assert runner.count("python") == 2


def test_no_cache_without_a_cache_dir(site: Path) -> None:
    add_torch(site)
    runner = _child_runner()
    src = sources(site, run=runner, python="/usr/bin/python3")
    collect(loaded=True, sources=src)
    collect(loaded=True, sources=src)
    assert runner.count("python") == 2


def test_cache_is_off_with_the_environment_switch() -> None:
    from doctor.cachedir import default_cache_dir

    assert default_cache_dir({"HOME": "/home/u"}) == Path("/home/u/.cache/attn-doctor")
    assert default_cache_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/attn-doctor")
    assert default_cache_dir({"HOME": "/home/u", "ATTN_DOCTOR_NO_CACHE": "1"}) is None


@pytest.mark.parametrize(
    "dist,version,module,decoy,real",
    [
        # XTuner 1.x installed from its git tags reports version 0.2.0, like the PyPI release; only
        # its xtuner/v1 package tells them apart
        ("xtuner", "0.2.0", "xtuner.v1", "xtuner/__init__.py", "xtuner/v1/__init__.py"),
        # PyPI's mcore-adapter 0.0.1 installs a folder named `mcore-adapter`, which `import
        # mcore_adapter` never reaches; ROLL's package installs mcore_adapter/
        ("mcore-adapter", "0.0.1", "mcore_adapter", "mcore-adapter/__init__.py", "mcore_adapter/__init__.py"),
        # a hopper/ build puts flash_attn_interface at the top level and only _C in flash_attn_3/;
        # Megatron-Core's and TE's FA3 import needs the copy TE's install steps make
        ("flash-attn-3", "3.0.0b1", "flash_attn_3.flash_attn_interface", "flash_attn_3/_C.abi3.so", "flash_attn_3/flash_attn_interface.py"),
    ],
)
def test_presence_only_modules_are_looked_for_not_read_from_the_distribution(
    site: Path, dist: str, version: str, module: str, decoy: str, real: str
) -> None:
    """The distribution alone does not say whether the module is there: the probe looks for the
    module on the path, without importing it."""
    add_torch(site)
    add_dist(site, dist, version)
    add_file(site, decoy)
    src = sources(site, nvml_loader=lambda: FakeNvml())
    assert collect(loaded=False, sources=src)["imports"][module]["status"] == "missing"
    add_file(site, real)
    doc = collect(loaded=False, sources=src)
    assert doc["imports"][module]["status"] == "present"
    assert doc["provenance"][f"imports.{module}"].startswith("static")


def test_the_cuda_xformers_was_built_with_is_read_from_its_cpp_lib_json(site: Path) -> None:
    # PyPI's Linux wheel of a stable-ABI xformers says 1208; the PyTorch index's cu130 wheel of
    # the same version says 1300: only this file tells them apart (XFORMERS-CUDA12-WHEEL-ON-CUDA13-TORCH)
    add_dist(site, "xformers", "0.0.35")
    add_file(site, "xformers/__init__.py")
    add_file(site, "xformers/cpp_lib.json", json.dumps({"version": {"cuda": 1208, "hip": None, "torch": "2.10.0+cu128"}}))
    doc = collect(loaded=False, sources=sources(site))
    assert doc["cuda"]["xformers_build"] == "12.8" and "cuda.xformers_build" not in doc["unknown"]
    add_file(site, "xformers/cpp_lib.json", json.dumps({"version": {"cuda": 1300}}))
    assert collect(loaded=False, sources=sources(site))["cuda"]["xformers_build"] == "13.0"


def test_an_unreadable_xformers_build_file_is_an_unknown_fact_not_an_error(site: Path) -> None:
    add_dist(site, "xformers", "0.0.35+884e978.d20260401")
    add_file(site, "xformers/__init__.py")
    doc = collect(loaded=False, sources=sources(site))
    assert doc["cuda"]["xformers_build"] is None and "cpp_lib.json" in doc["unknown"]["cuda.xformers_build"]
    add_file(site, "xformers/cpp_lib.json", "{not json")
    doc = collect(loaded=False, sources=sources(site))
    assert doc["cuda"]["xformers_build"] is None and "version.cuda" in doc["unknown"]["cuda.xformers_build"]
    # builds without CUDA say which (XFORMERS-NEEDS-CUDA-TORCH: a CPU build loads next to a CPU torch)
    add_file(site, "xformers/cpp_lib.json", json.dumps({"version": {"cuda": None, "hip": "6.3"}}))
    assert collect(loaded=False, sources=sources(site))["cuda"]["xformers_build"] == "rocm"
    add_file(site, "xformers/cpp_lib.json", json.dumps({"version": {"cuda": None, "hip": None}}))
    doc = collect(loaded=False, sources=sources(site))
    assert doc["cuda"]["xformers_build"] == "cpu" and "cuda.xformers_build" not in doc["unknown"]


def test_no_xformers_no_build_fact(site: Path) -> None:
    doc = collect(loaded=False, sources=sources(site))
    assert "xformers_build" not in doc["cuda"] and "cuda.xformers_build" not in doc["unknown"]


def test_whether_xformers_carries_its_flash_attention_3_extension_is_read_from_its_folder(site: Path) -> None:
    # a source build has the extension only where setup.py kept an 8.0/9.0 arch for it (v0.0.30
    # setup.py:276-308); the file names are those of PyPI's 0.0.30 and 0.0.32.post2 Linux wheels
    # (XFORMERS-FA3-ON-BLACKWELL, audit sample 27 row 20)
    add_dist(site, "xformers", "0.0.30+5e5ff8d.d20250301")
    add_file(site, "xformers/__init__.py")
    add_file(site, "xformers/_C.so")
    add_file(site, "xformers/_C_flashattention.so")  # FlashAttention-2, not 3
    doc = collect(loaded=False, sources=sources(site))
    assert doc["cuda"]["xformers_fa3"] is False and "cuda.xformers_fa3" not in doc["unknown"]
    add_file(site, "xformers/_C_flashattention3.so")
    assert collect(loaded=False, sources=sources(site))["cuda"]["xformers_fa3"] is True


def test_xformers_0_0_31_and_later_keep_flash_attention_3_in_flash_attn_3(site: Path) -> None:
    add_dist(site, "xformers", "0.0.32+8fc8ec5a.d20250905")
    add_file(site, "xformers/__init__.py")
    add_file(site, "xformers/flash_attn_3/__init__.py")  # the Python side ships without the extension
    assert collect(loaded=False, sources=sources(site))["cuda"]["xformers_fa3"] is False
    add_file(site, "xformers/flash_attn_3/_C.so")
    assert collect(loaded=False, sources=sources(site))["cuda"]["xformers_fa3"] is True


def test_no_xformers_no_fa3_fact(site: Path) -> None:
    doc = collect(loaded=False, sources=sources(site))
    assert "xformers_fa3" not in doc["cuda"] and "cuda.xformers_fa3" not in doc["unknown"]
