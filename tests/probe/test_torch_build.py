"""torch's build facts read as text from torch/version.py and its Requires-Dist."""

from __future__ import annotations

import sys
from pathlib import Path

from probe_fakes import add_dist, add_file, add_torch, sources

from doctor.probe import collect
from doctor.probe.packages import scan
from doctor.probe.torch_build import parse_version_file, read


def test_parse_version_file_variants() -> None:
    text = (
        "from typing import Optional\n"
        "__all__ = ['__version__', 'cuda']\n"
        "__version__ = '2.7.1+cu126'\n"
        "debug = False\n"
        "cuda: Optional[str] = '12.6'\n"
        'git_version = "e2d141dbde55c2a4370fac5165b0561b6af4798b"\n'
        "hip: Optional[str] = None\n"
    )
    v = parse_version_file(text)
    assert v["__version__"] == "2.7.1+cu126"
    assert v["cuda"] == "12.6"
    assert v["git_version"] == "e2d141dbde55c2a4370fac5165b0561b6af4798b"
    assert v["hip"] is None
    old = parse_version_file("__version__ = '1.13.1+cu117'\ncuda = '11.7'\n")
    assert old["cuda"] == "11.7"


def test_torch_build_and_bundled_cudnn_pin(site: Path) -> None:
    add_torch(
        site,
        "2.5.1+cu124",
        "12.4",
        requires=[
            'nvidia-cuda-runtime-cu12==12.4.127; platform_system == "Linux" and platform_machine == "x86_64"',
            'nvidia-cudnn-cu12==9.1.0.70; platform_system == "Linux" and platform_machine == "x86_64"',
            "sympy==1.13.1",
        ],
    )
    doc = collect(loaded=False, sources=sources(site))
    assert doc["torch"]["version"] == "2.5.1+cu124"
    assert doc["torch"]["cuda"] == "12.4"
    assert doc["torch"]["git_version"] == "abc123"
    assert doc["provenance"]["torch.version"].endswith("torch/version.py")
    assert doc["cudnn"]["bundled"] == "9.1.0.70"
    assert doc["cudnn"]["bundled_dist"] == "nvidia-cudnn-cu12"


def test_cpu_build_has_no_cuda(site: Path) -> None:
    add_torch(site, "2.13.0+cpu", None)
    build = read(scan([str(site)]))
    assert build is not None and build.cuda is None and build.version == "2.13.0+cpu"


def test_missing_version_py_falls_back_to_the_dist_version(site: Path) -> None:
    add_dist(site, "torch", "2.3.0a0+6ddf5cf.nv24.04")
    add_file(site, "torch/__init__.py")
    doc = collect(loaded=False, sources=sources(site))
    assert doc["torch"]["version"] == "2.3.0a0+6ddf5cf.nv24.04"
    assert "version.py is missing" in doc["unknown"]["torch.cuda"]


def test_never_imports_torch(site: Path) -> None:
    add_torch(site, init="raise SystemExit('torch must not be imported by the static probe')\n")
    before = set(sys.modules)
    collect(loaded=False, sources=sources(site))
    assert "torch" not in set(sys.modules) - before
