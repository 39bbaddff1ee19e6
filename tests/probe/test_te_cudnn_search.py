"""cudnn.search: what TransformerEngine's own cuDNN search would find, on temp directory trees.

TE 2.4-2.10 (`_load_cudnn`) and 2.11+ (`_load_cuda_library_from_system`) glob folders named by
CUDNN_HOME, CUDNN_PATH, CUDA_HOME, CUDA_PATH and /usr/local/cuda for `libcudnn.so*` before the
Python wheels; 2.11+ then call dlopen("libcudnn.so"), which finds only the unversioned name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict

import pytest
from probe_fakes import FakeRunner, add_dist, add_file, ok, sources

from doctor.model import CudnnFile, CudnnFolder, Workload
from doctor.probe import collect, cuda_libs
from doctor.probe.cuda_libs import _shown, probe
from doctor.probe.packages import scan
from doctor.rules.cases import case_inputs
from doctor.rules.conditions import resolve
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue
from doctor.snapshot import facts_from_snapshot, parse_snapshot

RULE = "TE-SYSTEM-CUDNN-SHADOWS-WHEEL"


def _lib(folder: Path, version: str, *, dev_link: bool) -> Path:
    """A cuDNN as distribution packages install it: the real file, the soname link, and with
    the -dev package also the unversioned libcudnn.so link."""
    folder.mkdir(parents=True, exist_ok=True)
    real = folder / f"libcudnn.so.{version}"
    real.write_text("")
    os.symlink(real.name, folder / f"libcudnn.so.{version.split('.')[0]}")
    if dev_link:
        os.symlink(f"libcudnn.so.{version.split('.')[0]}", folder / "libcudnn.so")
    return real


def _search(site: Path, **changes: object) -> cuda_libs.CudnnSearch:
    libs = probe(scan([str(site)]), sources(site, **changes))  # type: ignore[arg-type]
    assert libs.search is not None
    return libs.search


def test_runtime_only_cudnn_has_no_unversioned_name(site: Path, tmp_path: Path) -> None:
    sysdir = tmp_path / "lib/x86_64-linux-gnu"
    _lib(sysdir, "9.14.0", dev_link=False)
    search = _search(site, environ={"LD_LIBRARY_PATH": str(sysdir)})
    assert search.unversioned is None
    # the old fact still lists it: it is on the loader path, just not under TE's name
    doc = collect(loaded=False, sources=sources(site, environ={"LD_LIBRARY_PATH": str(sysdir)}))
    assert doc["cudnn"]["system"] == [{"path": f"{sysdir}/libcudnn.so.9", "version": "9.14.0"}]
    assert doc["cudnn"]["search"]["unversioned"] is None


def test_unversioned_link_on_ld_library_path(site: Path, tmp_path: Path) -> None:
    sysdir = tmp_path / "lib/x86_64-linux-gnu"
    _lib(sysdir, "9.14.0", dev_link=True)
    search = _search(site, environ={"LD_LIBRARY_PATH": f"/nonexistent:{sysdir}"})
    assert search.unversioned == CudnnFile(_shown(f"{sysdir}/libcudnn.so"), "9.14.0")


def test_unversioned_link_from_ld_so_cache_and_default_dirs(site: Path, tmp_path: Path) -> None:
    cached = tmp_path / "usr/lib/x86_64-linux-gnu"
    _lib(cached, "9.14.0", dev_link=True)
    ldconfig = ok(
        "3 libs found in cache `/etc/ld.so.cache'\n"
        f"\tlibcudnn.so.9 (libc6,x86-64) => {cached}/libcudnn.so.9\n"
        f"\tlibcudnn.so (libc6,x86-64) => {cached}/libcudnn.so\n"
    )
    search = _search(site, run=FakeRunner({"ldconfig": ldconfig}), use_ldconfig=True,
                     which=lambda n: "/sbin/ldconfig" if n == "ldconfig" else None)
    assert search.unversioned == CudnnFile(_shown(f"{cached}/libcudnn.so"), "9.14.0")
    default = tmp_path / "usr/lib64"
    _lib(default, "8.9.7", dev_link=True)
    assert _search(site, loader_default_dirs=[str(default)]).unversioned == CudnnFile(_shown(f"{default}/libcudnn.so"), "8.9.7")


def test_folders_in_te_order_with_the_file_tes_glob_takes(site: Path, tmp_path: Path) -> None:
    cuda_home = tmp_path / "opt/cuda-12.8"
    _lib(cuda_home / "targets/x86_64-linux/lib", "9.1.0", dev_link=True)
    add_file(cuda_home, "lib64/stubs/libcudnn.so.99")  # TE 2.11+ skip stubs
    add_file(cuda_home, ".hidden/libcudnn.so.98")  # glob's ** skips hidden names
    usr_local = tmp_path / "usr/local/cuda"
    _lib(usr_local / "lib64", "8.9.7", dev_link=False)
    empty = tmp_path / "cudnn-home"
    empty.mkdir()
    environ: Dict[str, str] = {"CUDNN_HOME": str(empty), "CUDA_HOME": str(cuda_home), "CUDA_PATH": ""}
    search = _search(site, environ=environ, cuda_default_dir=str(usr_local))
    assert search.folders == (
        CudnnFolder("CUDNN_HOME", _shown(str(empty)), None),
        CudnnFolder("CUDA_HOME", _shown(str(cuda_home)), CudnnFile(_shown(f"{cuda_home}/targets/x86_64-linux/lib/libcudnn.so.9.1.0"), "9.1.0")),
        CudnnFolder(None, _shown(str(usr_local)), CudnnFile(_shown(f"{usr_local}/lib64/libcudnn.so.8.9.7"), "8.9.7")),
    )


def test_a_walk_too_large_is_unknown_not_empty(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big"
    for i in range(5):
        add_file(big, f"d{i}/f")
    monkeypatch.setattr(cuda_libs, "WALK_LIMIT", 3)
    (folder,) = _search(site, cuda_default_dir=str(big)).folders
    assert folder.found is None and folder.error and "not searched to the end" in folder.error


def test_round_trip_through_the_snapshot(site: Path, tmp_path: Path) -> None:
    add_dist(site, "transformer-engine", "2.20.2")
    sysdir = tmp_path / "lib/x86_64-linux-gnu"
    _lib(sysdir, "9.14.0", dev_link=True)
    cuda_home = tmp_path / "cuda"
    _lib(cuda_home / "lib64", "9.1.0", dev_link=False)
    src = sources(site, environ={"LD_LIBRARY_PATH": str(sysdir), "CUDA_HOME": str(cuda_home)})
    doc = collect(loaded=False, sources=src)
    facts = facts_from_snapshot(parse_snapshot(json.dumps(doc), "s.json"))
    assert facts.cudnn.search == _search(site, environ={"LD_LIBRARY_PATH": str(sysdir), "CUDA_HOME": str(cuda_home)})
    assert resolve("te.cudnn_file", facts, Workload()).value == _shown(f"{cuda_home}/lib64/libcudnn.so.9.1.0") + " (in CUDA_HOME, cuDNN 9.1.0)"


def test_a_token_shaped_folder_name_never_reaches_the_snapshot_and_the_search_still_decides(site: Path, tmp_path: Path) -> None:
    # a CUDA_HOME whose folder name looks like a credential: the snapshot keeps it scrubbed like
    # the env section does, and the scrubbed folder still matches its scrubbed variable
    add_dist(site, "transformer-engine", "2.20.2")
    secret = "Zx9qT4mLp2Wv8RkN3sJd7HcYb6"
    cuda_home = tmp_path / secret / "cuda"
    _lib(cuda_home / "lib64", "9.1.0", dev_link=False)
    src = sources(site, environ={"CUDA_HOME": str(cuda_home)})
    doc = collect(loaded=False, sources=src)
    text = json.dumps(doc)
    assert secret not in text and "<redacted>" in json.dumps(doc["cudnn"]["search"])
    facts = facts_from_snapshot(parse_snapshot(text, "s.json"))
    shown = resolve("te.cudnn_file", facts, Workload()).value
    assert str(shown).endswith("(in CUDA_HOME, cuDNN 9.1.0)") and secret not in str(shown)


def test_a_bad_search_section_is_one_input_error() -> None:
    from doctor.errors import InputError

    with pytest.raises(InputError, match=r"cudnn\.search\.folders\[0\]\.version: .new. is not a version"):
        parse_snapshot(json.dumps({"cudnn": {"search": {"folders": [{"dir": "/x", "path": "/x/l", "version": "new"}]}}}), "s.json")


# ------------------------------------------------------------------ the rule on old snapshots


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalogue(use_cache=False)


def test_snapshot_without_search_leaves_the_rule_not_evaluated(cat) -> None:  # type: ignore[no-untyped-def]
    """A snapshot from before cudnn.search lists every libcudnn.so.N, which TE 2.11+ may never
    load: the rule says it could not decide (and why) instead of guessing either way."""
    case = {"packages": {"transformer-engine": "2.20.2", "torch": "2.11.0"}, "gpu": "9.0",
            "cudnn": {"version": "9.19.0", "system": [{"path": "/lib/x86_64-linux-gnu/libcudnn.so.9", "version": "9.14.0"}]}}
    facts, workload = case_inputs(case)
    result = diagnose(cat, facts, workload).result(RULE)
    assert result.status == "not_evaluated"
    assert any("cudnn.search" in m and "re-create it" in m for m in result.missing)
    # TE older than 2.4 loads the wheel first: no search is needed to say so
    case["packages"] = {"transformer-engine": "2.3.0", "torch": "2.7.0"}
    facts, workload = case_inputs(case)
    assert diagnose(cat, facts, workload).result(RULE).status == "passed"


@pytest.mark.parametrize(
    "found, want",
    [("9.1.0", "other"), ("9.10.2", "same"), ("8.9.7", "other_major")],
)
def test_a_cudnn_of_another_major_is_its_own_value(found: str, want: str) -> None:
    # a libcudnn.so.8 under /usr/local/cuda beside torch's cuDNN 9: TE 2.4-2.10 load it, but its
    # soname and symbol versions serve neither torch nor TE's core (both need libcudnn.so.9)
    from doctor.rules.cases import case_inputs

    case = {
        "packages": {"transformer-engine": "2.8.0", "torch": "2.8.0"},
        "gpu": "9.0",
        "cudnn": {
            "version": "9.10.2",
            "search": {"folders": [{"dir": "/usr/local/cuda", "path": f"/usr/local/cuda/lib64/libcudnn.so.{found}", "version": found}], "unversioned": None},
        },
    }
    facts, workload = case_inputs(case)
    assert resolve("te.cudnn_first_2_4", facts, workload).value == want
