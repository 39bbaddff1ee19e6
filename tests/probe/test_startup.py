"""Start-up checks read from the installed code (doctor.probe.startup, STARTUP-* findings).

LLaMA-Factory refuses to start unless its dependencies are inside the window its
check_dependencies() writes down. The real 0.9.2 wheel's file is read here; a development
snapshot (an editable install reporting 0.9.5.dev0) is a file written in the test, in the
shape the releases use. Distributions the check names are dist-info folders with a version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Mapping

import pytest

from doctor.errors import InputError, RuleError
from doctor.probe.collect import collect
from doctor.probe.sources import Sources
from doctor.probe.startup import load_checks, parse_requirement, require_version_error, satisfied
from doctor.snapshot import facts_from_snapshot, load_snapshot
import upstream

RULE = "STARTUP-LLAMAFACTORY-DEPENDENCIES"


@pytest.fixture(autouse=True)
def _tmp_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def _dist(site: Path, name: str, version: str) -> None:
    d = site / f"{name}-{version}.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (site / name).mkdir(exist_ok=True)
    (site / name / "__init__.py").write_text("")


def _probe(site: Path, environ: Mapping[str, str] = {}) -> Dict[str, Any]:
    src = Sources(site_paths=[str(site)], environ=dict(environ), cache_dir=None, use_ldconfig=False,
                  nvml_loader=lambda: None, which=lambda name: None, system_lib_dirs=(), system_include_dirs=())
    return collect(loaded=False, sources=src)


def _check(doc: Dict[str, Any], tmp_path: Path) -> Any:
    from doctor.app import Inputs, check
    from doctor.rules.loader import load_catalogue
    from doctor.workload import default_workload

    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc))
    facts = facts_from_snapshot(load_snapshot(path))
    return check(Inputs(facts=facts, workload=default_workload(), catalogue=load_catalogue()))


def _finding(report: Any) -> Any:
    return next((f for f in report.findings if f.rule_id == RULE), None)


@pytest.fixture
def lf092(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    upstream.install_wheel(site, "llamafactory-0.9.2-py3-none-any.whl", ["llamafactory/__init__.py", "llamafactory/extras/misc.py"])
    for name, version in (("datasets", "3.2.0"), ("accelerate", "1.2.1"), ("peft", "0.12.0"), ("trl", "0.9.6")):
        _dist(site, name, version)
    return site


def test_the_released_window_is_read_and_a_transformers_outside_it_refuses_to_start(lf092: Path, tmp_path: Path) -> None:
    _dist(lf092, "transformers", "4.50.0")
    doc = _probe(lf092)
    reqs = [r["requirement"] for r in doc["contracts"]["startup"]]
    assert reqs[0].startswith("transformers>=4.41.2,<=4.49.0,") and "trl>=0.8.6,<=0.9.6" in reqs
    f = _finding(_check(doc, tmp_path))
    assert f is not None and f.status == "fired" and f.severity.value == "error"
    assert "rejects transformers 4.50.0" in f.title and "llamafactory/extras/misc.py:97" in f.message
    pins = {p.name: p.version for p in f.fixes[0].pins}
    assert pins == {"transformers": "4.49.0"} and f.fixes[0].verified
    assert f.fixes[1].env == {"DISABLE_VERSION_CHECK": "1"}


def test_only_the_last_exclusion_is_tested_as_require_version_does(lf092: Path, tmp_path: Path) -> None:
    # 0.9.2 lists !=4.46.0 ... !=4.48.0, but require_version keeps one clause per operator
    _dist(lf092, "transformers", "4.46.0")
    report = _check(_probe(lf092), tmp_path)
    assert _finding(report) is None and (RULE, "passed") in report.rule_results
    lf2 = lf092.parent / "site2"
    lf092.rename(lf2)
    for d in lf2.glob("transformers-*"):
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    _dist(lf2, "transformers", "4.48.0")
    f = _finding(_check(_probe(lf2), tmp_path))
    assert f is not None and "only >=4.41.2,<=4.49.0,!=4.48.0 is tested" in f.message


def test_the_skip_variable_passes_it_and_a_missing_dependency_refuses(lf092: Path, tmp_path: Path) -> None:
    _dist(lf092, "transformers", "4.50.0")
    doc = _probe(lf092)
    doc["env"] = {"DISABLE_VERSION_CHECK": "True"}
    assert _finding(_check(doc, tmp_path)) is None
    doc["env"] = {"DISABLE_VERSION_CHECK": "yes"}  # not a value any release accepts
    assert _finding(_check(doc, tmp_path)) is not None
    for f in (lf092 / "trl-0.9.6.dist-info").iterdir():
        f.unlink()
    (lf092 / "trl-0.9.6.dist-info").rmdir()
    _dist(lf092, "transformers", "4.49.0")
    for f in (lf092 / "transformers-4.50.0.dist-info").iterdir():
        f.unlink()
    (lf092 / "transformers-4.50.0.dist-info").rmdir()
    f = _finding(_check(_probe(lf092), tmp_path))
    assert f is not None and "a missing trl" in f.title and "PackageNotFoundError" in f.message


SNAPSHOT_MISC = '''
from transformers.utils.versions import require_version


def check_version(requirement: str, mandatory: bool = False) -> None:
    require_version(requirement)


def check_dependencies() -> None:
    check_version("transformers>=4.55.0,<=5.6.0")
    check_version("peft>=0.18.0,<=0.20.0")
    check_version("torch>=2.4.0", mandatory=True)
    check_version("accelerate>=1.0", True)
'''


def test_a_development_snapshot_is_judged_by_the_window_in_its_own_file(tmp_path: Path) -> None:
    repo = tmp_path / "repo" / "src"
    (repo / "llamafactory" / "extras").mkdir(parents=True)
    (repo / "llamafactory" / "__init__.py").write_text("")
    (repo / "llamafactory" / "extras" / "misc.py").write_text(SNAPSHOT_MISC)
    site = tmp_path / "site"
    site.mkdir()
    # `pip install -e .` with setuptools: a .pth that installs an import hook mapping the package
    (site / "__editable__.llamafactory-0.9.5.dev0.pth").write_text("import __editable___llamafactory_0_9_5_dev0_finder\n")
    (site / "__editable___llamafactory_0_9_5_dev0_finder.py").write_text(
        f"import sys\nMAPPING = {{'llamafactory': {str(repo / 'llamafactory')!r}}}\nNAMESPACES = {{}}\n")
    meta = site / "llamafactory-0.9.5.dev0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: llamafactory\nVersion: 0.9.5.dev0\n")
    _dist(site, "transformers", "5.7.0")
    _dist(site, "peft", "0.19.0")
    _dist(site, "torch", "2.3.1")
    _dist(site, "accelerate", "1.2.0")
    doc = _probe(site)
    assert [r["mandatory"] for r in doc["contracts"]["startup"]] == [False, False, True, True]  # keyword or positional
    assert doc["contracts"]["startup_checks"][0]["version"] == "0.9.5.dev0"
    f = _finding(_check(doc, tmp_path))
    assert f is not None and "rejects transformers 5.7.0, torch 2.3.1" in f.title
    doc["env"] = {"DISABLE_VERSION_CHECK": "1"}  # skips the others, never mandatory=True
    f = _finding(_check(doc, tmp_path))
    assert f is not None and "rejects torch 2.3.1" in f.title and not any(x.env for x in f.fixes)


def test_a_moved_function_is_said_not_guessed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "llamafactory" / "extras").mkdir(parents=True)
    (site / "llamafactory" / "__init__.py").write_text("")
    (site / "llamafactory" / "extras" / "misc.py").write_text("def something_else():\n    pass\n")
    meta = site / "llamafactory-1.0.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: llamafactory\nVersion: 1.0.0\n")
    report = _check(_probe(site), tmp_path)
    f = _finding(report)
    assert f is not None and f.status == "not_evaluated" and "no function check_dependencies" in f.message


def test_require_version_semantics() -> None:
    name, clauses = parse_requirement("Transformers>=4.41.2,<=4.49.0,!=4.46.0,!=4.48.0")  # type: ignore[misc]
    assert name == "transformers" and clauses == ((">=", "4.41.2"), ("<=", "4.49.0"), ("!=", "4.48.0"))
    # a space before the operator makes require_version raise ValueError (operator " >"): nothing
    # to show as a version range, and require_version_error says why
    assert parse_requirement("transformers >=4.41.2") is None
    assert str(require_version_error("transformers >=4.41.2", "4.46.0")).startswith("ValueError")
    assert satisfied("4.46.0", clauses) and not satisfied("4.48.0", clauses) and not satisfied("4.50.0", clauses)
    assert parse_requirement("trl") == ("trl", ()) and parse_requirement("trl~=1.0") is None


def test_a_bad_startup_row_in_a_snapshot_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "snap.yaml"
    path.write_text("schema_version: 1\npackages: {llamafactory: 0.9.2}\ncontracts:\n  startup:\n"
                    "    - {check: llamafactory-dependencies, site: 'a.py:1'}\n")
    with pytest.raises(InputError) as e:
        load_snapshot(path)
    assert "start-up requirement needs 'requirement'" in str(e.value) and e.value.line == 5


def _spec(folder: Path, file: str, source: str) -> None:
    """A one-check spec file in `folder` (file on line 7, sources on line 11)."""
    (folder / "x.yaml").write_text(f"checks:\n  - id: a-check\n    name: n\n    title: t\n    dist: d\n    module: m\n    file: {file}\n"
                                   f"    function: f\n    calls: [g]\n    runs: r\n    sources: [{source}]\n")


def test_a_bad_check_spec_names_file_and_line(tmp_path: Path) -> None:
    _spec(tmp_path, "f.py", "https://github.com/o/r/blob/main/f.py")
    with pytest.raises(RuleError) as e:
        load_checks(tmp_path)
    assert "not a file at a release tag" in str(e.value) and e.value.line == 11
    assert [c.id for c in load_checks()] == ["llamafactory-dependencies"]


def test_the_skip_values_are_read_from_the_installed_file(lf092: Path, tmp_path: Path) -> None:
    # 0.9.2's is_env_enabled takes "y" too (0.8.x-0.9.1 compare with ["true", "1"] only)
    _dist(lf092, "transformers", "4.50.0")
    doc = _probe(lf092)
    assert doc["contracts"]["startup_checks"][0]["skip_values"] == ["1", "true", "y"]
    doc["env"] = {"DISABLE_VERSION_CHECK": "Y"}
    assert _finding(_check(doc, tmp_path)) is None
    del doc["contracts"]["startup_checks"][0]["skip_values"]  # a snapshot without them: only true/1
    assert _finding(_check(doc, tmp_path)) is not None


# 400,000 unary minuses overflow the C parser's stack (MemoryError); a long `+` chain passes the
# parser and overflows AST construction (RecursionError). Neither may end the probe.
DEEP = {"stack": b"x = " + b"-" * 400_000 + b"1\n", "ast": b"x = " + b"1+" * 300_000 + b"1\n"}


@pytest.mark.parametrize("kind", sorted(DEEP))
def test_a_pathologically_nested_file_is_said_unreadable_not_a_crash(kind: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "llamafactory" / "extras").mkdir(parents=True)
    (repo / "llamafactory" / "__init__.py").write_text("")
    (repo / "llamafactory" / "extras" / "misc.py").write_bytes(b"def check_dependencies():\n    " + DEEP[kind])
    site = tmp_path / "site"
    site.mkdir()
    meta = site / "llamafactory-0.9.5.dev0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: llamafactory\nVersion: 0.9.5.dev0\n")
    # the same nesting in an editable finder: no mapping read from it, the probe goes on
    (site / "__editable___other_finder.py").write_bytes(b"MAPPING = {}\n" + DEEP[kind])
    (site / "__editable___llamafactory_finder.py").write_text(f"MAPPING = {{'llamafactory': {str(repo / 'llamafactory')!r}}}\n")
    doc = _probe(site)
    read = doc["contracts"]["startup_checks"][0]
    assert read["status"].startswith("unreadable: ")
    f = _finding(_check(doc, tmp_path))
    assert f is not None and f.status == "not_evaluated" and "unreadable" in f.message


def test_a_check_file_outside_its_module_is_refused(tmp_path: Path) -> None:
    _spec(tmp_path, "../../etc/passwd", "https://github.com/o/r/blob/v1/f.py")
    with pytest.raises(RuleError) as e:
        load_checks(tmp_path)
    assert "must be a path inside the module" in str(e.value) and e.value.line == 7


@pytest.mark.parametrize("values, message", [("'1'", "expected a list"), ("['']", "non-empty strings"), ("[[1]]", "expected a string")])
def test_bad_skip_values_in_a_snapshot_name_their_line(values: str, message: str, tmp_path: Path) -> None:
    # [""] would read an unset DISABLE_VERSION_CHECK as set and silence the finding
    path = tmp_path / "snap.yaml"
    path.write_text("schema_version: 1\npackages: {llamafactory: 0.9.2}\ncontracts:\n  startup_checks:\n"
                    "    - {check: llamafactory-dependencies, dist: llamafactory, version: 0.9.2, file: f.py, status: read,\n"
                    f"       skip_values: {values}}}\n")
    with pytest.raises(InputError) as e:
        load_snapshot(path)
    assert message in str(e.value) and e.value.line in (5, 6)


def test_a_requirement_that_is_not_a_name_and_versions_is_never_shown_as_a_command(tmp_path: Path) -> None:
    # the advice line is `pip install "<requirement>"`: a quote or `;` from an installed file must not reach it
    assert parse_requirement('x";touch${IFS}pwned;">=1') is None
    assert parse_requirement('transformers>=4.41;rm') is None and parse_requirement("transformers>=4.41") is not None
    path = tmp_path / "snap.yaml"
    path.write_text("schema_version: 1\npackages: {llamafactory: 0.9.2}\ncontracts:\n  startup_checks:\n"
                    "    - {check: llamafactory-dependencies, dist: llamafactory, version: 0.9.2, file: f.py, status: read}\n"
                    "  startup:\n    - {check: llamafactory-dependencies, site: 'f.py:1', requirement: 'x\";touch${IFS}pwned;\">=1'}\n")
    from doctor.app import Inputs, check
    from doctor.rules.loader import load_catalogue
    from doctor.workload import default_workload

    report = check(Inputs(facts=facts_from_snapshot(load_snapshot(path)), workload=default_workload(), catalogue=load_catalogue()))
    # require_version looks the whole name part up, finds no such distribution and raises: the
    # check fails (not "passed"), but nothing of the string becomes an install line
    f = _finding(report)
    assert f is not None and f.status == "fired" and "PackageNotFoundError" in f.message
    assert all("touch" not in c and "touch" not in p.name for fix in f.fixes for c in fix.config for p in fix.pins)
    assert [fix.env for fix in f.fixes] == [{"DISABLE_VERSION_CHECK": "1"}]


def test_an_assumed_release_is_not_judged_by_the_installed_file(lf092: Path, tmp_path: Path) -> None:
    # the file read is 0.9.2's; with 0.9.3 assumed the finding is not evaluated and the 0.9.3 table judges
    _dist(lf092, "transformers", "4.44.2")
    doc = _probe(lf092)
    doc["packages"]["llamafactory"] = "0.9.3"
    report = _check(doc, tmp_path)
    f = _finding(report)
    assert f is not None and f.status == "not_evaluated" and "assumed" in f.message
    assert (RULE, "not_evaluated") in report.rule_results
    from doctor.rules.conditions import startup_read

    assert not startup_read(report.facts, "llamafactory-dependencies")  # so the 0.9.3 table is not silenced
    doc["packages"]["llamafactory"] = "0.9.2"
    assert startup_read(_check(doc, tmp_path).facts, "llamafactory-dependencies")


def test_a_failed_contract_analysis_leaves_the_start_up_check_not_evaluated_with_why(
        lf092: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start-up rows travel in the contracts section; when the contract analysis fails the
    read cannot be kept, and the user sees one line saying the check was not evaluated and why
    (before: no STARTUP row at all, as if there were nothing to check)."""
    import sys

    collect_module = sys.modules["doctor.probe.collect"]

    def broken(scan: Any, src: Any) -> Any:
        raise RuntimeError("a contracts bug")

    monkeypatch.setattr(collect_module, "_contracts", broken)
    _dist(lf092, "transformers", "4.50.0")
    doc = _probe(lf092)
    assert doc["contracts"] is None
    report = _check(doc, tmp_path)
    f = _finding(report)
    assert f is not None and f.status == "not_evaluated" and "\n" not in f.message
    assert f.title == "LLaMA-Factory 0.9.2: its start-up check was not evaluated"
    assert "the contract analysis failed" in f.message and "a contracts bug" in f.message
    assert (RULE, "not_evaluated") in report.rule_results


def test_require_version_mirror_matches_the_real_function() -> None:
    """Each requirement form judged as transformers' require_version judges it: the recorded
    outcomes come from running the real function (utils/versions.py of the 4.46.0 and 5.23.0
    wheels) on CPU. A space before an operator and a `==4.*` wildcard raise there."""
    from doctor.probe.startup import require_version_error, require_version_name

    data = json.loads((Path(__file__).parent / "data" / "require_version_transformers.json").read_text())
    installed = data["installed"]
    for requirement, real in data["cases"]:
        mine = require_version_error(requirement, installed.get(require_version_name(requirement)))
        if real is None:
            assert mine is None, requirement
            continue
        kind, message = real
        assert mine is not None and mine.split(":", 1)[0] == kind, (requirement, mine, real)
        if kind in ("ValueError", "InvalidVersion"):
            assert mine == f"{kind}: {message}", requirement


def _startup_snapshot(requirement: str, transformers: str = "4.46.0") -> Dict[str, Any]:
    return {
        "schema_version": 1,
        "packages": {"llamafactory": "0.9.2", "transformers": transformers},
        "env": {},
        "contracts": {
            "analyser": "0.1.0", "pairs": [], "sites": [],
            "startup_checks": [{"check": "llamafactory-dependencies", "dist": "llamafactory", "version": "0.9.2",
                                "file": "llamafactory/extras/misc.py", "status": "read"}],
            "startup": [{"check": "llamafactory-dependencies", "site": "llamafactory/extras/misc.py:97",
                         "requirement": requirement, "mandatory": False}],
        },
    }


@pytest.mark.parametrize("requirement, raised", [
    ("transformers >=4.41.2", "ValueError"),  # the operator is " >"
    ("transformers>=4.41.2, <=4.49.0", "ValueError"),
    ("transformers==4.*", "InvalidVersion"),
])
def test_a_requirement_require_version_refuses_stops_the_start(requirement: str, raised: str, tmp_path: Path) -> None:
    f = _finding(_check(_startup_snapshot(requirement), tmp_path))
    assert f is not None and f.status == "fired", requirement
    assert f"raises {raised}" in f.message and repr(requirement) in f.title
    # no release passes it: only skipping the check helps
    assert [fix.env for fix in f.fixes] == [{"DISABLE_VERSION_CHECK": "1"}]


def test_a_space_after_the_operator_is_read_as_require_version_reads_it(tmp_path: Path) -> None:
    report = _check(_startup_snapshot("transformers>= 4.41.2"), tmp_path)
    assert _finding(report) is None and (RULE, "passed") in report.rule_results


def test_run_as_that_framework_the_refusal_comes_before_later_failures(lf092: Path, tmp_path: Path) -> None:
    """`llamafactory-cli train` stops at import on LLaMA-Factory 0.9.2's check (transformers 4.48.0 is
    excluded): a finding that shows later in the run (a model-load or step failure) is listed behind
    it. With no framework stated, llamafactory is only installed and nothing is ordered behind it."""
    from doctor.app import Inputs, check
    from doctor.rules.loader import load_catalogue
    from doctor.workload import default_workload, load_workload_file

    _dist(lf092, "transformers", "4.48.0")
    _dist(lf092, "torch", "2.5.1")
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(_probe(lf092)))
    facts = facts_from_snapshot(load_snapshot(path))
    def staged(framework: Any) -> Dict[str, Any]:
        wl_doc = {"attn_implementation": "sdpa", "model_type": "qwen2", "window_size": [4095, 0], "seq_len": 8192}
        wl_path = tmp_path / "wl.json"
        wl_path.write_text(json.dumps({**wl_doc, **({"framework": framework} if framework else {})}))
        wl = load_workload_file(wl_path, default_workload())
        report = check(Inputs(facts=facts, workload=wl, catalogue=load_catalogue()))
        return {f.rule_id: f for f in report.findings if f.status == "fired"}

    got = staged("llamafactory")
    assert got[RULE].stage == "import"
    later = [f for f in got.values() if f.stage and f.stage != "import"]
    assert later and all(RULE in f.behind for f in later), [(f.rule_id, f.stage, f.behind) for f in got.values()]
    got = staged(None)
    assert got[RULE].stage is None and not any(RULE in f.behind for f in got.values())
