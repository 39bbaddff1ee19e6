"""Loaded facts from a real child Python, with fake torch / extension packages on PYTHONPATH."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from probe_fakes import FakeRunner, add_dist, add_file, add_torch, child_output, good_child_records, sources, working_torch_init

from doctor.probe import collect
from doctor.probe.sources import RunResult, run_command

UNDEFINED = (
    "raise ImportError('{path}: undefined symbol: "
    "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE')\n"
)


def _real(site: Path, **changes):  # type: ignore[no-untyped-def]
    environ = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    return sources(site, run=run_command, python=sys.executable, environ=environ, **changes)


def test_torch_that_fails_with_undefined_symbol(site: Path) -> None:
    add_torch(site, init="raise ImportError('/site/torch/lib/libtorch_cuda.so: undefined symbol: ncclCommRegister')\n")
    doc = collect(loaded=True, sources=_real(site))
    reason = doc["unknown"]["torch.cxx11_abi"]
    assert "import torch failed" in reason and "undefined symbol: ncclCommRegister" in reason
    assert "LD_LIBRARY_PATH" in reason  # the decoded fix
    assert doc["torch"]["version"] == "2.4.0+cu121"  # static facts survive
    assert doc["torch"]["cuda_available"] is None
    assert "cudnn.loaded" in doc["unknown"]
    assert doc["imports"]["xformers"]["status"] == "missing"  # not on the path at all: known statically
    json.dumps(doc)


def test_flash_attn_built_with_the_other_abi(site: Path) -> None:
    add_torch(site, "2.4.0+cu121", "12.1", init=working_torch_init(abi=False, cudnn=90100))
    add_dist(site, "flash-attn", "2.6.3")
    add_file(site, "flash_attn/__init__.py", "import flash_attn_2_cuda\n")
    so = site / "flash_attn_2_cuda.py"  # stands in for the compiled extension
    so.write_text(UNDEFINED.format(path=so))
    add_file(site, "xformers/__init__.py", "")
    doc = collect(loaded=True, sources=_real(site))
    torch = doc["torch"]
    assert torch["cxx11_abi"] is False
    assert torch["cudnn_version"] == "9.1.0"
    assert torch["cuda_available"] is True and torch["device_count"] == 1
    assert torch["arch_list"] == ["sm_80", "sm_90"]
    fa = doc["imports"]["flash_attn_2_cuda"]
    assert fa["status"] == "error"
    assert "undefined symbol" in fa["error"]
    assert fa["cause"] == "C++ ABI mismatch (wheel built with cxx11abi=TRUE, torch uses FALSE)"
    py = "cp%d%d" % sys.version_info[:2]
    # flash-attn 2.6.x names its CUDA 12 wheels cu123, whatever the 12.x minor of torch
    assert f"+cu123torch2.4cxx11abiFALSE-{py}-{py}-linux_x86_64.whl" in fa["fix"]
    assert "flash-attn==2.6.3" in fa["fix"]
    assert doc["imports"]["flash_attn"]["status"] == "error"
    assert doc["imports"]["xformers"] == {"status": "ok", "error": None, "cause": None, "fix": None}
    assert doc["imports"]["transformer_engine"]["status"] == "missing"
    assert doc["cudnn"]["loaded"] == "9.1.0" and doc["cudnn"]["version"] == "9.1.0"
    assert doc["provenance"]["torch.cxx11_abi"].startswith("child-process")


def test_hanging_import_times_out_and_earlier_results_survive(site: Path) -> None:
    add_torch(site, init=working_torch_init())
    add_file(site, "flash_attn/__init__.py", "")
    add_file(site, "transformer_engine/__init__.py", "import time\ntime.sleep(600)\n")
    add_file(site, "transformer_engine/pytorch/__init__.py", "")
    start = time.monotonic()
    doc = collect(loaded=True, sources=_real(site, child_timeout=8.0))
    assert time.monotonic() - start < 300  # cut at 8 s; the import would sleep 600 s
    assert doc["imports"]["flash_attn"]["status"] == "ok"
    assert doc["imports"]["transformer_engine"]["status"] == "timeout"
    assert "8 s" in doc["imports"]["transformer_engine"]["error"]
    assert "did not finish within 8 s" in doc["unknown"]["imports.transformer_engine.pytorch"]
    assert doc["torch"]["cxx11_abi"] is False  # reported before the hang
    assert "torch.cuda_available" in doc["unknown"]  # asked after the imports: never reached


def test_crashing_import_is_reported_with_signal_and_stderr(site: Path) -> None:
    add_torch(site, init=working_torch_init())
    add_file(
        site,
        "xformers/__init__.py",
        "import os, signal, sys\nsys.stderr.write('xformers: fatal error in C++ land\\n')\nsys.stderr.flush()\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n",
    )
    doc = collect(loaded=True, sources=_real(site))
    xf = doc["imports"]["xformers"]
    assert xf["status"] == "error"
    assert "SIGSEGV while importing xformers" in xf["error"]
    assert "fatal error in C++ land" in xf["error"]
    assert doc["imports"]["flash_attn"]["status"] == "missing"


def test_garbage_output_becomes_unknown(site: Path) -> None:
    add_torch(site)
    runner = FakeRunner({"python": RunResult(("python",), 0, "Segmentation fault? no: just noise\n", "")})
    doc = collect(loaded=True, sources=sources(site, run=runner, python="/usr/bin/python3"))
    assert "printed no result" in doc["unknown"]["torch.cxx11_abi"]
    assert "just noise" in doc["unknown"]["torch.cxx11_abi"]


def test_child_that_cannot_start(site: Path) -> None:
    add_torch(site)
    doc = collect(loaded=True, sources=sources(site, run=run_command, python="/nonexistent/python"))
    assert "could not start the child python" in doc["unknown"]["torch.cuda_available"]


def test_no_child_without_torch(site: Path) -> None:
    add_dist(site, "flash-attn", "2.6.3")
    add_file(site, "flash_attn/__init__.py")
    runner = FakeRunner()
    doc = collect(loaded=True, sources=sources(site, run=runner, python="/usr/bin/python3"))
    assert runner.count("python") == 0
    assert "not installed" in doc["unknown"]["torch"]
    assert "torch is not installed" in doc["unknown"]["imports.flash_attn"]


def test_no_child_in_static_mode(site: Path) -> None:
    add_torch(site)
    add_file(site, "flash_attn/__init__.py")
    runner = FakeRunner()
    doc = collect(loaded=False, sources=sources(site, run=runner, python="/usr/bin/python3"))
    assert runner.count("python") == 0
    assert "static" in doc["unknown"]["imports.flash_attn"]
    assert doc["imports"]["xformers"]["status"] == "missing"


def test_fake_child_records_are_interpreted(site: Path) -> None:
    add_torch(site)
    runner = FakeRunner({"python": RunResult(("python",), 0, child_output(*good_child_records(cudnn=8902)), "")})
    doc = collect(loaded=True, sources=sources(site, run=runner, python="/usr/bin/python3"))
    assert doc["torch"]["cudnn_version"] == "8.9.2"
    assert doc["cudnn"]["loaded"] == "8.9.2"
    assert all(v["status"] == "missing" for v in doc["imports"].values())


def test_child_runs_under_the_python_that_owns_torch(tmp_path: Path) -> None:
    from doctor.probe.child import owner_python

    prefix = tmp_path / "other-venv"
    site = prefix / "lib" / "python3.10" / "site-packages"
    site.mkdir(parents=True)
    (prefix / "bin").mkdir()
    py = prefix / "bin" / "python3.10"
    py.write_text("#!/bin/sh\n")
    py.chmod(0o755)
    assert owner_python(str(site), default="/usr/bin/python3") == str(py)
    assert owner_python(sys.path[-1], default="/this/python") == "/this/python"  # our own path
    assert owner_python(str(tmp_path / "elsewhere"), default="/this/python") == "/this/python"
