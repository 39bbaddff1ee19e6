"""The shipped release catalogue is consistent, and `releases refresh` merges what the index
says without losing curated fields (fakes stand in for pip and the JSON API)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Sequence, Tuple

import pytest

from doctor.releases.refresh import IndexUnreachable, python_spec, refresh, via_json
from doctor.releases.catalogue import CATALOGUE_PACKAGES
from doctor.resources import rules_dir
from doctor.versions import parse_version

RELEASES = rules_dir() / "releases"


def test_every_file_says_where_and_when(rel) -> None:  # type: ignore[no-untyped-def]
    for name in CATALOGUE_PACKAGES + ("flash-attn-wheels",):
        doc = json.loads((RELEASES / f"{name}.json").read_text(encoding="utf-8"))
        assert doc.get("source") and doc.get("retrieved"), name
    dates = [json.loads((RELEASES / f"{n}.json").read_text(encoding="utf-8"))["retrieved"] for n in CATALOGUE_PACKAGES]
    assert rel.retrieved == max(dates) and min(dates) >= "2026-11-21"


def test_every_package_file_is_read_by_the_catalogue() -> None:
    # a <package>.json nobody lists would leave `fix` saying "not in the release catalogue"
    # for pins of that package (20 field-corpus fixes did, before peft, trl, ... were listed)
    special = {"flash-attn-wheels", "install"}
    files = {p.stem for p in RELEASES.glob("*.json")} - special
    assert files - set(CATALOGUE_PACKAGES) == set()


def test_torch_rows_pin_cudnn_wheels_that_exist(rel) -> None:  # type: ignore[no-untyped-def]
    for row in rel.torch:
        assert rel.exists("torch", row.version)
        assert row.cudnn_dist and rel.exists(row.cudnn_dist, row.cudnn), (row.version, row.cudnn_dist, row.cudnn)
        assert row.cudnn_dist == f"nvidia-cudnn-cu{row.cuda.split('.')[0]}"
        assert row.cxx11_abi == (parse_version(row.version) >= parse_version("2.7")), "pip wheels use the CXX11 ABI from 2.7"


def test_flash_attn_wheel_matrix_covers_real_releases(rel) -> None:  # type: ignore[no-untyped-def]
    for version in rel.flash_attn_wheels:
        assert rel.exists("flash-attn", version), version
    assert {b.torch for b in rel.flash_attn_wheels["2.8.3"]} == {"2.4", "2.5", "2.6", "2.7", "2.8"}


def test_python_spec() -> None:
    assert python_spec(["3.8", "3.9", "3.10"]) == "<3.11"
    assert python_spec(["3.11", "3.12", "3.13", "3.14", "3.15"]) == ">=3.11"
    # no wheel for the newest Python probed: closed above (torch 2.9.1-2.14.1 have no cp315)
    assert python_spec(["3.10", "3.11", "3.12", "3.13", "3.14"]) == ">=3.10,<3.15"
    assert python_spec(["3.9", "3.11"]) == ">=3.9,<3.12,!=3.10.*"
    assert python_spec(["3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15"]) is None


def _fake_pip(lists: dict):  # type: ignore[no-untyped-def]
    calls: List[Sequence[str]] = []

    def run(argv: Sequence[str]) -> Tuple[int, str, str]:
        calls.append(argv)
        name = argv[5]
        py = argv[argv.index("--python-version") + 1] if "--python-version" in argv else "any"
        versions = lists.get((name, py), lists.get((name, "any")))
        if versions is None:
            return 1, "", "ERROR: No matching distribution found"
        return 0, f"{name} ({versions[0]})\nAvailable versions: {', '.join(versions)}\n", ""

    return run, calls


def test_refresh_with_pip_keeps_curated_fields(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "xtuner.json").write_text(json.dumps({"about": "curated", "releases": [{"version": "0.1.23", "requires": {"transformers": ">=4.36"}}]}), encoding="utf-8")
    lists = {("xtuner", py): (["0.3.0", "0.2.0", "0.1.23"] if py in ("3.8", "3.9", "3.10") else ["0.3.0", "0.2.0"]) for py in ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")}
    runner, calls = _fake_pip(lists)
    out = tmp_path / "out"
    result = refresh(src, output=out, packages=["xtuner"], method="pip", runner=runner, today="2027-01-02")
    assert result.method == "pip" and result.added["xtuner"] == ("0.2.0", "0.3.0")
    doc = json.loads((out / "xtuner.json").read_text(encoding="utf-8"))
    assert doc["about"] == "curated" and doc["retrieved"] == "2027-01-02"
    rows = {r["version"]: r for r in doc["releases"]}
    assert rows["0.1.23"] == {"version": "0.1.23", "requires": {"transformers": ">=4.36"}, "python": "<3.11"}
    assert list(rows) == ["0.1.23", "0.2.0", "0.3.0"]
    assert len(calls) == 8  # one `pip index versions` per Python probed
    assert json.loads((src / "xtuner.json").read_text(encoding="utf-8"))["about"] == "curated", "--output leaves the source alone"


def test_refresh_writes_nothing_when_one_package_fails(tmp_path: Path) -> None:
    runner, _ = _fake_pip({("nvidia-cudnn-cu12", "any"): ["9.3.0.75"]})
    with pytest.raises(IndexUnreachable):
        refresh(tmp_path, packages=["nvidia-cudnn-cu12", "xtuner"], method="pip", runner=runner)
    assert list(tmp_path.iterdir()) == []


def test_json_api_reads_python_and_new_torch_bundles() -> None:
    def fetch(url: str) -> Any:
        if url.endswith("/pypi/torch/json"):
            return {
                "releases": {
                    "2.7.1": [{"filename": "torch-2.7.1-cp310-cp310-manylinux_2_28_x86_64.whl", "requires_python": ">=3.9.0"}],
                    "2.16.0": [
                        {"filename": "torch-2.16.0-cp311-cp311-manylinux_2_28_x86_64.whl", "requires_python": ">=3.11"},
                        {"filename": "torch-2.16.0-cp312-cp312-manylinux_2_28_x86_64.whl", "requires_python": ">=3.11"},
                    ],
                    "2.16.1": [{"filename": "torch-2.16.1.tar.gz", "yanked": True}],
                }
            }
        if url.endswith("/pypi/torch/2.16.0/json"):
            return {"info": {"requires_dist": [
                'cuda-toolkit[cublas]==13.2.3; platform_system == "Linux"',
                'nvidia-cudnn-cu13==9.30.0.1; platform_system == "Linux"',
                'nvidia-nccl-cu13==2.31.1; platform_system == "Linux"',
                "triton~=3.10.0",
            ]}}
        raise OSError("unexpected " + url)

    found = via_json("torch", "https://pypi.example", fetch, known_torch=["2.7.1"])
    assert [v for v, _ in found.releases] == ["2.7.1", "2.16.0"]
    (row,) = found.torch_rows
    assert row["version"] == "2.16.0" and row["cuda"] == "13.2" and row["cudnn_dist"] == "nvidia-cudnn-cu13" and row["cudnn"] == "9.30.0.1"
    assert row["cxx11_abi"] is True


@pytest.mark.parametrize(
    "files,want",
    [
        # torch 2.3+ on PyPI: no Intel-mac wheel (the last is 2.2.2)
        (["torch-2.6.0-cp311-cp311-manylinux_2_28_x86_64.whl", "torch-2.6.0-cp311-cp311-manylinux_2_28_aarch64.whl",
          "torch-2.6.0-cp311-none-macosx_11_0_arm64.whl", "torch-2.6.0-cp311-cp311-win_amd64.whl"],
         ("darwin-aarch64", "linux-aarch64", "linux-x86_64", "windows-x86_64")),
        (["torch-2.2.2-cp311-none-macosx_10_9_x86_64.whl", "torch-2.2.2-cp311-cp311-manylinux1_x86_64.whl"], ("darwin-x86_64", "linux-x86_64")),
        (["x-1.0-cp311-cp311-macosx_10_9_universal2.whl"], ("darwin-aarch64", "darwin-x86_64")),
        (["accelerate-1.12.0-py3-none-any.whl", "accelerate-1.12.0.tar.gz"], None),  # installs anywhere
        (["flash_attn-2.8.3.tar.gz"], None),  # an sdist only: built where it is installed
    ],
)
def test_wheel_platforms_from_file_names(files, want) -> None:  # type: ignore[no-untyped-def]
    from doctor.releases.refresh import wheel_platforms

    assert wheel_platforms(files) == want


def test_the_shipped_torch_table_knows_intel_macs_stop_at_2_2_2(rel) -> None:  # type: ignore[no-untyped-def]
    assert rel.platform_ok("torch", "2.2.2", "darwin-x86_64") and not rel.platform_ok("torch", "2.6.0", "darwin-x86_64")
    assert rel.platform_ok("torch", "2.6.0", "darwin-aarch64") and rel.platform_ok("torch", "2.6.0", "linux-aarch64")
    assert rel.platform_ok("torch", "2.6.0", None)  # platform unknown: not held against the pin


def test_json_api_unreachable() -> None:
    def fetch(url: str) -> Any:
        raise OSError("connection refused")

    with pytest.raises(IndexUnreachable) as exc:
        via_json("xtuner", "https://pypi.example", fetch)
    assert "https://pypi.example/pypi/xtuner/json: connection refused" in exc.value.one_line()


def test_a_releases_folder_that_is_not_there_is_named_as_such(tmp_path: Path) -> None:
    from doctor.errors import InputError
    from doctor.releases.catalogue import load_release_catalogue

    with pytest.raises(InputError, match="does not exist"):
        load_release_catalogue(tmp_path / "nope")
    afile = tmp_path / "torch.json"
    afile.write_text("{}")
    with pytest.raises(InputError, match="is not a folder"):
        load_release_catalogue(afile)
    with pytest.raises(InputError, match="no torch or flash-attn releases"):
        load_release_catalogue(tmp_path)  # a folder, but empty


def test_unsloth_zoo_is_known_with_the_transformers_each_release_asks_for(rel) -> None:  # type: ignore[no-untyped-def]
    # a fix pinning unsloth 2025.4.1 pins unsloth_zoo 2025.4.1 with it: zoo 2025.4.1 asks for what
    # unsloth 2025.4.1 does, while the 2025.10 zoos a bare unsloth pin would pull need transformers>=4.51.3
    assert rel.knows("unsloth-zoo") and rel.exists("unsloth-zoo", "2025.4.1")
    assert "transformers!=4.47.0,>=4.46.1" in rel.packages["unsloth-zoo"].get("2025.4.1").requires_dist
    assert any(r.startswith("transformers") and ">=4.51.3" in r for r in rel.packages["unsloth-zoo"].get("2025.10.1").requires_dist)


def test_ms_swift_2_x_carries_its_transformers_cap(rel) -> None:  # type: ignore[no-untyped-def]
    # sample-32 fix-F: ms-swift 2.x's Requires-Dist (read from the wheels' METADATA) is in the
    # catalogue, so a transformers pin above its cap is refused: 2.1.0 <4.42, 2.2.0 <4.43, 2.6.1 <4.48
    from doctor.fix.resolve import resolve

    assert "transformers <4.42,>=4.33" in rel.packages["ms-swift"].get("2.1.0").requires_dist
    assert "transformers<4.48,>=4.33" in rel.packages["ms-swift"].get("2.6.1").requires_dist
    assert not resolve(rel, {"ms-swift": "2.1.0", "transformers": "4.39.3"}, [("transformers", "4.42.4", ())], "3.10").ok
    assert resolve(rel, {"ms-swift": "2.1.0", "transformers": "4.39.3"}, [("transformers", "4.41.2", ())], "3.10").ok
    assert resolve(rel, {"ms-swift": "2.2.0", "transformers": "4.39.3"}, [("transformers", "4.42.4", ())], "3.10").ok
    assert not resolve(rel, {"ms-swift": "2.6.1", "transformers": "4.47.1"}, [("transformers", "4.48.0", ())], "3.10").ok
