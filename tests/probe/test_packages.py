"""Installed distributions as the probe reports them."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from probe_fakes import add_dist, add_file, sources

from doctor.probe import collect
from doctor.probe.packages import exact_pins, normalize, scan


def test_versions_keep_local_labels_and_ngc_builds(site: Path) -> None:
    add_dist(site, "torch", "2.4.0+cu121")
    add_dist(site, "Flash_Attn", "2.6.3")
    add_dist(site, "transformer_engine", "1.7.0+4e7d8a6")
    add_dist(site, "torch-ngc", "2.3.0a0+6ddf5cf.nv24.04", folder="torch_ngc-2.3.0a0+6ddf5cf.nv24.04.dist-info")
    found = scan([str(site)])
    assert found.version("torch") == "2.4.0+cu121"
    assert found.version("flash-attn") == "2.6.3"
    assert found.version("transformer-engine") == "1.7.0+4e7d8a6"
    assert found.version("torch-ngc") == "2.3.0a0+6ddf5cf.nv24.04"
    assert set(found.dists) == {"torch", "flash-attn", "transformer-engine", "torch-ngc"}


def test_version_is_read_from_headers_not_the_description(site: Path) -> None:
    add_dist(site, "xformers", "0.0.27")  # the fake METADATA body mentions "Version: 9.9.9"
    assert scan([str(site)]).version("xformers") == "0.0.27"


def test_dist_without_version_is_skipped_and_reported(site: Path) -> None:
    add_dist(site, "broken-pkg", None, folder="broken_pkg-1.0.dist-info")
    add_dist(site, "good", "1.0")
    doc = collect(loaded=False, sources=sources(site))
    assert "broken-pkg" not in doc["packages"]
    assert doc["packages"]["good"] == "1.0"
    assert "no Version header" in doc["unknown"]["packages.broken-pkg"]


def test_egg_info_folder_and_file(site: Path) -> None:
    add_dist(site, "old-style", "0.9", egg=True)
    add_file(site, "single_file-1.2-py3.11.egg-info", "Metadata-Version: 1.0\nName: single-file\nVersion: 1.2\n")
    found = scan([str(site)])
    assert found.version("old-style") == "0.9"
    assert found.version("single-file") == "1.2"


def test_first_folder_on_the_path_wins(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    add_dist(first, "torch", "2.5.1")
    add_dist(second, "torch", "2.1.0")
    assert scan([str(first), str(second)]).version("torch") == "2.5.1"


def test_unreadable_and_missing_path_entries_are_ignored(site: Path, tmp_path: Path) -> None:
    add_dist(site, "numpy", "2.0.0")
    found = scan([str(tmp_path / "nope"), str(tmp_path / "lib.zip"), str(site)])
    assert found.version("numpy") == "2.0.0"


def test_modules_on_the_path_are_seen_without_importing(site: Path) -> None:
    add_file(site, "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so")
    add_file(site, "flash_attn/__init__.py")
    add_file(site, "distutils-precedence.pth")
    found = scan([str(site)])
    assert found.has_module("flash_attn_2_cuda") and found.has_module("flash_attn")
    assert not found.has_module("xformers")


def test_normalize_is_pep503() -> None:
    assert normalize("Flash_Attn") == "flash-attn"
    assert normalize("nvidia.cudnn__cu12") == "nvidia-cudnn-cu12"


def test_exact_pins_from_requires_dist() -> None:
    pins = exact_pins(
        [
            'nvidia-cudnn-cu12==9.1.0.70; platform_system == "Linux" and platform_machine == "x86_64"',
            "cuda-toolkit[cublas,cudart]==13.0.2; platform_system == 'Linux'",
            "filelock",
            "sympy>=1.13.3",
            'optree>=0.13.0; extra == "optree"',
        ]
    )
    assert pins == {"nvidia-cudnn-cu12": "9.1.0.70", "cuda-toolkit": "13.0.2"}


def test_agrees_with_importlib_metadata_on_this_environment() -> None:
    found = scan(sys.path)
    expected = {}
    for dist in importlib.metadata.distributions():
        name = normalize(dist.metadata["Name"] or "")
        expected.setdefault(name, dist.version)
    assert expected, "importlib.metadata sees no distributions"
    for name, version in expected.items():
        assert found.version(name) == version, name


def test_installed_requirements_on_other_installed_packages(site: Path) -> None:
    # what pip would hold a fix to: LLaMA-Factory's caps on what is installed, without its
    # extras, its requirements on packages that are not installed, or a URL (it may carry a token)
    add_dist(
        site,
        "llamafactory",
        "0.9.1",
        requires=(
            "transformers<=4.46.1,>=4.41.2",
            "datasets<=3.1.0,>=2.16.0",
            "gradio>=4.0.0",
            "deepspeed<=0.14.4,>=0.10.0; extra == 'deepspeed'",
            "trl @ https://user:ghp_secret@example.com/trl.zip",
        ),
    )
    add_dist(site, "transformers", "4.46.1")
    add_dist(site, "datasets", "3.1.0")
    add_dist(site, "deepspeed", "0.14.4")
    add_dist(site, "trl", "0.9.6")
    doc = collect(loaded=False, sources=sources(site))
    assert doc["requires"] == {"llamafactory": ["transformers<=4.46.1,>=4.41.2", "datasets<=3.1.0,>=2.16.0"]}
    assert "ghp_secret" not in str(doc)
