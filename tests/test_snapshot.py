"""Snapshot files: round trip, hand-written partial files, and errors with file:line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from doctor.errors import ExitCode, InputError
from doctor.snapshot import facts_from_snapshot
from doctor.probe import collect
from doctor.snapshot import dump, load_snapshot, validate_snapshot

sys.path.insert(0, str(Path(__file__).parent / "probe"))
from probe_fakes import FakeNvml, FakeRunner, add_dist, add_torch, child_output, good_child_records, sources  # noqa: E402

from doctor.probe.sources import RunResult  # noqa: E402


def _probed(tmp_path: Path) -> dict:
    site = tmp_path / "site"
    add_torch(site, "2.4.0+cu121", "12.1", requires=['nvidia-cudnn-cu12==9.1.0.70; platform_system == "Linux"'])
    add_dist(site, "flash-attn", "2.6.3")
    runner = FakeRunner({"python": RunResult(("python",), 0, child_output(*good_child_records(abi=False)), "")})
    src = sources(site, run=runner, python="/usr/bin/python3", nvml_loader=lambda: FakeNvml(),
                  environ={"NVTE_FLASH_ATTN": "0", "HF_TOKEN": "hf_secretsecretsecretsecret12"})
    return collect(loaded=True, sources=src)


def _error(path: Path) -> InputError:
    with pytest.raises(InputError) as info:
        load_snapshot(path)
    assert info.value.exit_code == ExitCode.USAGE
    return info.value


@pytest.mark.parametrize("fmt,suffix", [("json", ".json"), ("yaml", ".yaml"), ("json", ".txt")])
def test_round_trip_through_a_file_gives_the_same_facts(tmp_path: Path, fmt: str, suffix: str) -> None:
    doc = _probed(tmp_path)
    path = tmp_path / f"snapshot{suffix}"
    path.write_text(dump(doc, fmt))
    loaded = load_snapshot(path)
    assert loaded == json.loads(json.dumps(doc))
    facts = facts_from_snapshot(loaded, source=str(path))
    assert facts == facts_from_snapshot(doc, source=str(path))
    assert facts.torch.version == "2.4.0+cu121" and facts.torch.cxx11_abi is False
    assert facts.gpus is not None and facts.gpus[0].sm == 80
    assert facts.cudnn.bundled == "9.1.0.70" and facts.cudnn.loaded == "9.1.0"
    assert facts.env is not None and facts.env["NVTE_FLASH_ATTN"] == "0"
    assert facts.packages is not None and facts.packages["flash-attn"] == "2.6.3"


def test_hand_written_partial_yaml_loads(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(
        "# the GPU box, written by hand\n"
        "packages:\n  torch: 2.4.0+cu121\n  flash-attn: \"2.6.3\"\n"
        "gpus:\n  - {name: H100, compute_capability: \"9.0\"}\n"
        "env:\n  NVTE_FLASH_ATTN: 0\n"
    )
    doc = load_snapshot(path)
    assert doc["schema_version"] == 1
    assert "assumed 1" in doc["provenance"]["schema_version"]
    assert doc["env"]["NVTE_FLASH_ATTN"] == "0"
    facts = facts_from_snapshot(doc, source=str(path))
    assert facts.torch.version == "2.4.0+cu121"
    assert facts.gpus is not None and facts.gpus[0].index == 0 and facts.gpus[0].sm == 90
    assert facts.cudnn.version is None


def test_minimal_json_loads(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"schema_version": 1}')
    assert load_snapshot(path)["schema_version"] == 1


def test_invalid_json_names_file_line_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text('{\n  "schema_version": 1\n  "packages": {}\n}\n')
    err = _error(path)
    assert err.one_line() == (
        f"{path}:3: invalid JSON: Expecting ',' delimiter "
        "(fix the file or re-create it with `attn-doctor probe --format json > FILE`)"
    )


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.yaml"
    path.write_text("packages:\n  torch: 2.4.0\n gpus: [\n")
    err = _error(path)
    assert err.line in (2, 3) and "invalid YAML" in err.message


def test_unknown_extension_tries_json_then_yaml(tmp_path: Path) -> None:
    path = tmp_path / "snapshot"
    path.write_text("packages:\n  torch: 2.4.0\n")
    assert load_snapshot(path)["packages"] == {"torch": "2.4.0"}


@pytest.mark.parametrize(
    "content,line,needle",
    [
        ('{\n  "schema_version": 1,\n  "gpus": {"0": "A100"}\n}\n', 3, "gpus: expected a list"),
        ('{\n "gpus": [\n  {"name": "A100",\n   "compute_capability": "sm_80"}\n ]\n}\n', 4, 'must be "X.Y"'),
        ('{\n "gpus": [\n  {"name": "A100"}\n ]\n}\n', 3, "needs compute_capability"),
        ('{\n "schema_version": 2\n}\n', 2, "unsupported schema_version 2"),
        ('{\n "torch": {\n   "cxx11_abi": "yes"\n }\n}\n', 3, "torch.cxx11_abi: expected true/false"),
        ('{\n "imports": {\n   "flash_attn": {"status": "broken"}\n }\n}\n', 3, "import status must be one of"),
        ('{\n "packages": ["torch"]\n}\n', 2, "packages: expected a mapping"),
        ('{\n "requires": {\n   "trl": "datasets>=3"\n }\n}\n', 3, "requires.trl: expected a list"),
    ],
)
def test_wrong_types_name_the_line(tmp_path: Path, content: str, line: int, needle: str) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text(content)
    err = _error(path)
    assert needle in err.message
    assert err.line == line, err.one_line()


def test_unquoted_yaml_version_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("torch:\n  version: 2.10\n")
    err = _error(path)
    assert err.line == 2 and "number 2.1" in err.message and "quote" in (err.hint or "")


def test_yaml_compute_capability_number_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("gpus:\n  - name: A100\n    compute_capability: 8.0\n")
    assert load_snapshot(path)["gpus"][0]["compute_capability"] == "8.0"


def test_installed_requirements_reach_the_facts(tmp_path: Path) -> None:
    path = tmp_path / "snap.yaml"
    path.write_text('packages: {trl: "0.9.6", datasets: "2.21.0"}\nrequires:\n  trl: ["datasets>=2.0"]\n')
    facts = facts_from_snapshot(load_snapshot(path))
    assert facts.requires == {"trl": ("datasets>=2.0",)}
    path.write_text('packages: {trl: "0.9.6"}\n')
    assert facts_from_snapshot(load_snapshot(path)).requires is None  # not read: the catalogue stands in


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('[{"torch": "2.4"}]')
    err = _error(path)
    assert err.line == 1 and "top level must be a mapping" in err.message


def test_missing_directory_empty_and_binary_files(tmp_path: Path) -> None:
    assert "no such snapshot file" in _error(tmp_path / "absent.json").message
    assert "directory" in _error(tmp_path).message
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    assert "empty file" in _error(empty).message
    binary = tmp_path / "bin.json"
    binary.write_bytes(b'{"a":\n "\xff\xfe"}')
    err = _error(binary)
    assert "not UTF-8" in err.message and err.line == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text("{}")
    path.chmod(0)
    assert "permission denied" in _error(path).message


def test_validate_snapshot_alone() -> None:
    doc = validate_snapshot({"env": {"NVTE_FUSED_ATTN": 1}, "gpus": None})
    assert doc["env"] == {"NVTE_FUSED_ATTN": "1"} and doc["gpus"] is None
    with pytest.raises(InputError):
        validate_snapshot({"torch": {"device_count": True}}, "x.json")


def test_system_cudnn_fact_names_a_differing_system_library_only() -> None:
    from doctor.snapshot import facts_from_snapshot

    def system(section: dict) -> object:
        return facts_from_snapshot({"cudnn": {"loaded": "9.19.0", **section}}).cudnn.system

    assert system({"system": [{"path": "/lib/x86_64-linux-gnu/libcudnn.so.9", "version": "9.14.0"}]}) == "9.14.0"
    assert system({"system": [{"path": "/usr/lib/libcudnn.so.9", "version": "9.19.0"}]}) == ""
    assert system({"system": []}) == ""
    assert system({}) is None  # the snapshot does not say


@pytest.mark.parametrize("label,cuda,hip,known", [
    ("2.6.0+cu124", "12.4", None, True),
    ("2.6.0+rocm6.2.4", None, "6.2.4", True),
    ("2.8.0+xpu", None, None, True),
    ("2.6.0+cpu", None, None, True),
    ("2.6.0", None, None, False),  # PyPI's default build differs by platform: not known
])
def test_a_package_list_torch_label_says_which_build(label: str, cuda, hip, known: bool) -> None:
    # a requirements file or lock has no torch section: the version label is all there is
    facts = facts_from_snapshot({"packages": {"torch": label}})
    assert (facts.torch.cuda, facts.torch.hip) == (cuda, hip)
    assert ("torch" not in facts.unknown) is known
