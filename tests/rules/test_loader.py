"""Bad rule files fail loudly with file:line, the rule id and a hint."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.errors import ExitCode, RuleError
from doctor.rules.loader import load_catalogue

GOOD = """
rules:
  - id: MY-RULE
    severity: warning
    title: t
    message: m
    when: {package: torch, version: ">=2.0"}
    fixes: [{description: d, pins: ["torch==2.6.0"]}]
    sources: [https://github.com/pytorch/pytorch/issues/1]
    tests:
      fires: [{packages: {torch: "2.6.0"}}]
      passes: [{packages: {torch: "1.13.1"}}]
"""


def load(tmp_path: Path, text: str) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(text)
    load_catalogue([p], builtin=False, use_cache=False)


def test_good_file_loads(tmp_path: Path) -> None:
    load(tmp_path, GOOD)


@pytest.mark.parametrize(
    "edit,line,needle",
    [
        (lambda s: s.replace("    title: t\n", "    title: t\n    colour: red\n"), 6, "unknown key 'colour'"),
        (lambda s: s.replace('version: ">=2.0"', 'version: "=>2.0"'), 7, "bad version specifier"),
        (lambda s: s.replace('"torch==2.6.0"', '"torch latest"'), 8, "is not NAME==VERSION"),
        (lambda s: s.replace("{package: torch, version", "{fact: gpu.smm, lt: 1, version"), 7, "unknown fact 'gpu.smm'"),
        # a start-up check id rules/startup/ does not ship (misspelt: the fact would never be true)
        (lambda s: s.replace("{package: torch, version", "{fact: startup.llamafactory-dependency, eq: true, version"), 7,
         "unknown fact 'startup.llamafactory-dependency'"),
        (lambda s: s.replace("    sources: [https://github.com/pytorch/pytorch/issues/1]\n", ""), 3, "'sources' is required"),
        (lambda s: s.replace("when: {package", "when: {bogus: 1, package"), 7, ""),
        # a test case's version with a stray quote (`torch: 2.6.0"`) is a typo, not a version
        (lambda s: s.replace('fires: [{packages: {torch: "2.6.0"}}]', "fires: [{packages: {torch: 2.6.0\"}}]"), 11, "does not match"),
    ],
)
def test_bad_rule_names_file_line_and_rule(tmp_path: Path, edit, line: int, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuleError) as exc:
        load(tmp_path, edit(GOOD))
    text = exc.value.one_line()
    assert text.startswith(f"{tmp_path / 'r.yaml'}:{line}:"), text
    assert "MY-RULE" in text
    assert needle in text
    assert exc.value.exit_code == ExitCode.USAGE


def test_python_tags_are_rejected_not_executed(tmp_path: Path) -> None:
    with pytest.raises(RuleError) as exc:
        load(tmp_path, "rules: !!python/object/apply:os.system ['echo pwned']\n")
    assert ":1:" in exc.value.one_line() and "invalid YAML" in exc.value.one_line()


def test_duplicate_ids_across_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    with pytest.raises(RuleError, match="duplicate id"):
        load_catalogue([tmp_path], builtin=False, use_cache=False)


def test_rule_cannot_disable_unknown_backend(tmp_path: Path) -> None:
    bad = GOOD.replace("    severity: warning\n", "    disables: te.nonexistent\n")
    with pytest.raises(RuleError, match="unknown backend 'te.nonexistent'"):
        p = tmp_path / "r.yaml"
        p.write_text(bad)
        load_catalogue([p], builtin=True, use_cache=False)


def test_cache_is_used_and_invalidated_on_edit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rules = tmp_path / "mine"
    rules.mkdir()
    (rules / "r.yaml").write_text(GOOD)
    first = load_catalogue([rules], builtin=False)
    assert list((tmp_path / "cache" / "attn-doctor").glob("catalogue-*.json"))
    assert load_catalogue([rules], builtin=False) is first  # read once per process while the files stay the same
    (rules / "r.yaml").write_text(GOOD.replace("severity: warning", "severity: error"))
    import os

    os.utime(rules / "r.yaml", ns=(1, 1))
    assert load_catalogue([rules], builtin=False).rule("MY-RULE").severity == "error"


def test_a_moved_cache_folder_does_not_reread_the_same_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process keeps what it read by the files, not by where the cache lives: pointing
    $XDG_CACHE_HOME elsewhere (every test does) reuses the catalogue; editing a file does not."""
    rules = tmp_path / "mine"
    rules.mkdir()
    (rules / "r.yaml").write_text(GOOD)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a"))
    first = load_catalogue([rules], builtin=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "b"))
    assert load_catalogue([rules], builtin=False) is first
    assert load_catalogue([rules], builtin=False, use_cache=False) is not first  # use_cache=False always reads
    (rules / "r.yaml").write_text(GOOD.replace("severity: warning", "severity: error"))
    import os

    os.utime(rules / "r.yaml", ns=(1, 1))
    assert load_catalogue([rules], builtin=False).rule("MY-RULE").severity == "error"


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda s: s.replace("message: m", "message: torch {package.torch} on {gpu.smm}"), "unknown fact in placeholder {gpu.smm}"),
        (lambda s: s.replace("message: m", "message: '{reasons:no-such-fw}'"), "unknown framework 'no-such-fw'"),
        (lambda s: s.replace("message: m", "message: breaks from {package.transformer-engine on"), "unclosed placeholder '{package.transformer-engine'"),
        (lambda s: s.replace("message: m", "message: 'breaks on {package.torch'"), "unclosed placeholder '{package.torch'"),
        (lambda s: s.replace("message: m", "message: 'fails: {first:imports.flash_attn.error|gpu.smm}'"), "unknown fact 'gpu.smm' in {first:...}"),
        (lambda s: s.replace("severity: warning", "severity: warning\n    silent_wrong_results: true"), "must be an error"),
        (lambda s: s.replace("    title: t\n", "    title: t\n    ? [a, b]\n    : 1\n"), "plain scalars"),
    ],
)
def test_lint_catches_what_a_user_would_see_broken(tmp_path: Path, edit, needle: str) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "r.yaml"
    p.write_text(edit(GOOD))
    with pytest.raises(RuleError) as exc:
        load_catalogue([p], builtin=True, use_cache=False)
    assert needle in exc.value.one_line() and f"{p}:" in exc.value.one_line()


def test_a_finding_about_a_backend_must_name_it_selected(tmp_path: Path) -> None:
    """Lint: a finding keyed on a backend merely being available fires when another one runs."""
    from doctor.errors import RuleError
    from doctor.rules.loader import load_file

    rule = tmp_path / "r.yaml"
    rule.write_text(
        "rules:\n"
        "  - id: MY-FLASH-CRASH\n"
        "    severity: error\n"
        "    title: t\n"
        "    message: m\n"
        "    when:\n"
        "      all:\n"
        "        - {package: torch, version: '>=2.0'}\n"
        "        - {backend: sdpa.flash, available: true}\n"
        "    fixes: [{description: d, env: {X: '1'}}]\n"
        "    sources: ['https://github.com/pytorch/pytorch/issues/1']\n"
        "    tests: {fires: [{packages: {torch: '2.6.0'}}], passes: [{packages: {torch: '1.13.1'}}]}\n",
        encoding="utf-8",
    )
    with pytest.raises(RuleError) as exc:
        load_file(rule)
    assert "selected: true" in (exc.value.hint or "") and exc.value.line == 9


EVIDENCE = """    evidence:
      - package: torch
        range: ">=2.0"
        all:
          - {file: "torch/*.py", regex: "scaled_dot_product_attention"}
"""


def _with_evidence(text: str) -> str:
    return GOOD.replace("    tests:\n", text + "    tests:\n")


def test_evidence_tied_to_a_version_condition_loads(tmp_path: Path) -> None:
    load(tmp_path, _with_evidence(EVIDENCE))
    load(tmp_path, _with_evidence(EVIDENCE.replace('range: ">=2.0"', 'range: ">=2.1,<2.3"\n        within: true')))


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda s: s.replace('range: ">=2.0"', 'range: ">=2.1"'), "is not a version condition of this rule"),
        (lambda s: s.replace('range: ">=2.0"', 'range: "=>2.0"'), "bad version specifier"),
        (lambda s: s.replace('regex: "scaled_dot_product_attention"', 'regex: "(unclosed"'), "bad regular expression in evidence"),
        (lambda s: s.replace('regex: "scaled_dot_product_attention"', 'method: forward'), ""),
        (lambda s: s.replace("        all:\n", "        colour: red\n        all:\n"), "unknown key 'colour'"),
    ],
)
def test_bad_evidence_names_the_rule_and_a_line(tmp_path: Path, edit, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuleError) as exc:
        load(tmp_path, _with_evidence(edit(EVIDENCE)))
    text = exc.value.one_line()
    assert text.startswith(f"{tmp_path / 'r.yaml'}:"), text
    assert "MY-RULE" in text and needle in text
    assert exc.value.exit_code == ExitCode.USAGE


def test_inferred_needs_a_reason(tmp_path: Path) -> None:
    with pytest.raises(RuleError) as exc:
        load(tmp_path, _with_evidence("    confidence: inferred\n"))
    assert "confidence_note" in exc.value.one_line()
    load(tmp_path, _with_evidence("    confidence: inferred\n    confidence_note: from the PR thread only\n"))


# ---------------------------------------------------------------- newcomer review m16, m17


def test_lint_of_a_copy_of_the_shipped_catalogue_is_not_a_duplicate_of_the_installed_one(tmp_path: Path) -> None:
    """From a wheel install the built-in catalogue lives in site-packages; `rules lint rules` in a
    source checkout lints a second copy of the same files: that copy replaces them."""
    import shutil

    from doctor.app import lint_rules
    from doctor.resources import rules_dir

    copy = tmp_path / "rules"
    shutil.copytree(rules_dir(), copy)
    failures, all_cases = lint_rules([copy])
    assert failures == [] and all_cases > 500
    # one file lints only that file's cases (a fraction of the catalogue's), not the whole catalogue
    failures, cases = lint_rules([copy / "findings" / "flash_attn.yaml"])
    assert failures == [] and 0 < cases < all_cases / 10


def test_lint_refuses_a_pin_to_a_version_that_was_never_released(tmp_path: Path) -> None:
    from doctor.app import lint_rules

    p = tmp_path / "r.yaml"
    p.write_text(GOOD.replace('pins: ["torch==2.6.0"]', 'pins: ["torch==99.0.0"]'))
    with pytest.raises(RuleError) as exc:
        lint_rules([p])
    assert "torch==99.0.0 is not a release of torch" in exc.value.one_line() and f"{p}:3" in exc.value.one_line()
    p.write_text(GOOD)
    assert lint_rules([p]) == ([], 2)


def test_a_long_lived_process_keeps_few_catalogues(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rule folder read is kept for the next check in the same process, but only the latest
    few: a cluster run or a test session that reads many folders does not grow without bound."""
    from doctor.rules import loader

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for i in range(loader._LOADED_MAX + 3):
        d = tmp_path / f"rules{i}"
        d.mkdir()
        (d / "r.yaml").write_text(GOOD.replace("MY-RULE", f"MY-RULE-{i}"))
        assert load_catalogue([d], builtin=False).rule(f"MY-RULE-{i}") is not None
    assert len(loader._LOADED) <= loader._LOADED_MAX


def test_one_package_has_one_coverage_floor(tmp_path: Path) -> None:
    def fw(fid: str, since: str) -> str:
        return f"""
  - id: {fid}
    name: {fid}
    installed: {{package: transformer-engine, installed: true}}
    covers: {{package: transformer-engine, since: "{since}", why: w}}
    backends: [{{id: {fid}.b, name: b}}]
    selection: [{{order: [{fid}.b]}}]
    sources: [https://github.com/NVIDIA/TransformerEngine/issues/1]
"""
    load(tmp_path, "frameworks:" + fw("fwa", "1.9") + fw("fwb", "1.9"))  # the same floor twice is fine
    with pytest.raises(RuleError) as exc:
        load(tmp_path, "frameworks:" + fw("fwa", "1.9") + fw("fwb", "2.0"))
    assert "covers transformer-engine from 2.0, but fwa from 1.9" in str(exc.value)


def test_a_changed_start_up_file_invalidates_the_cached_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule naming `startup.<id>` is checked against rules/startup/ when the catalogue is
    built; once the start-up file no longer ships that id, the cached catalogue (in this process
    and on disk) must not be reused: the rule is refused as it would be without a cache."""
    import shutil

    from doctor import resources
    from doctor.rules import conditions

    real_startup = resources.rules_dir() / "startup"
    data = tmp_path / "data"
    shutil.copytree(real_startup, data / "startup")
    monkeypatch.setattr(resources, "rules_dir", lambda: data)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    conditions._startup_ids.cache_clear()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "r.yaml").write_text(GOOD.replace("{package: torch, version", "{fact: startup.llamafactory-dependencies, eq: false, version"))
    try:
        assert load_catalogue([mine], builtin=False).rule("MY-RULE") is not None
        yaml_file = data / "startup" / "llamafactory.yaml"
        yaml_file.write_text(yaml_file.read_text().replace("id: llamafactory-dependencies", "id: llamafactory-deps"))
        conditions._startup_ids.cache_clear()
        with pytest.raises(RuleError, match="unknown fact 'startup.llamafactory-dependencies'"):
            load_catalogue([mine], builtin=False)
    finally:
        conditions._startup_ids.cache_clear()


# --------------------------------------------------------------------------- named conditions

NAMED = """
conditions:
  - id: new_torch
    description: a torch with public SDPA
    when: {package: torch, version: ">=2.0"}
"""


def test_a_named_condition_is_read_by_rules_in_other_files(tmp_path: Path) -> None:
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose

    (tmp_path / "a.yaml").write_text(NAMED)
    (tmp_path / "b.yaml").write_text(GOOD.replace('when: {package: torch, version: ">=2.0"}', "when: {all: [{condition: new_torch}]}"))
    cat = load_catalogue([tmp_path], builtin=False, use_cache=False)
    for torch, status in (("2.6.0", "fired"), ("1.13.1", "passed")):
        facts, wl = case_inputs({"packages": {"torch": torch}})
        assert diagnose(cat, facts, wl).result("MY-RULE").status == status


def test_a_subset_of_the_catalogue_reads_named_conditions_of_the_files_left_out(tmp_path: Path) -> None:
    """A user's or a test's subset (builtin=False, one file, `rules lint FILE`) still reads a
    named condition the built-in catalogue writes in another file (stop 37's CI: the report
    goldens load transformer_engine.yaml and seeds.yaml alone, and a seeds rule reads
    te_imports_flash_attn_2 from te_findings.yaml)."""
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose
    from doctor.resources import rules_dir
    from doctor.rules.loader import load_file

    (tmp_path / "b.yaml").write_text(GOOD.replace('when: {package: torch, version: ">=2.0"}', "when: {all: [{condition: hub_kernels_usable}]}"))
    cat = load_catalogue([tmp_path], builtin=False, use_cache=False)
    facts, wl = case_inputs({"packages": {"torch": "2.6.0", "transformers": "4.57.0", "kernels": "0.10.0"}})
    assert diagnose(cat, facts, wl).result("MY-RULE").status == "fired"
    facts, wl = case_inputs({"packages": {"torch": "2.6.0", "transformers": "4.57.0"}})
    assert diagnose(cat, facts, wl).result("MY-RULE").status == "passed"
    _, rules = load_file(tmp_path / "b.yaml")
    assert [r.id for r in rules] == ["MY-RULE"]
    seeds = load_catalogue([rules_dir() / "backends" / "transformer_engine.yaml", rules_dir() / "findings" / "seeds.yaml"], builtin=False, use_cache=False)
    assert seeds.rule("TE-NO-BACKEND") is not None


@pytest.mark.parametrize(
    "named,rule_when,needle,where",
    [
        (NAMED, "{condition: old_torch}", "unknown condition 'old_torch'", "b.yaml:7:"),
        (NAMED + NAMED.replace("conditions:\n", ""), "{condition: new_torch}", "'new_torch' is also defined in", "a.yaml:"),
        (NAMED.replace('{package: torch, version: ">=2.0"}', "{not: {condition: new_torch}}"), "{condition: new_torch}", "refers to itself", "a.yaml:"),
        # checked where it is written, even if no rule reads it
        (NAMED.replace('">=2.0"', '">=2.0!!"'), "{package: torch, version: \">=2.0\"}", "bad version specifier", "a.yaml:5:"),
    ],
)
def test_bad_named_conditions_name_file_and_line(tmp_path: Path, named: str, rule_when: str, needle: str, where: str) -> None:
    (tmp_path / "a.yaml").write_text(named)
    (tmp_path / "b.yaml").write_text(GOOD.replace('{package: torch, version: ">=2.0"}', rule_when))
    with pytest.raises(RuleError) as exc:
        load_catalogue([tmp_path], builtin=False, use_cache=False)
    text = exc.value.one_line()
    assert needle in text and where in text, text


def test_rule_cases_read_back_from_the_disk_cache_are_the_rules_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache keeps each rule's test cases as text decoded on first use (`check` never reads
    them); a later process that reads the cache (lint, rules show) sees the same cases and they
    still pass."""
    from doctor.memo import Memo
    from doctor.rules import loader
    from doctor.rules.cases import run_rule_cases

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rules = tmp_path / "mine"
    rules.mkdir()
    (rules / "r.yaml").write_text(GOOD)
    fresh = load_catalogue([rules], builtin=False, use_cache=False)
    load_catalogue([rules], builtin=False)  # writes the cache
    monkeypatch.setattr(loader, "_LOADED", Memo(4))  # as a new process
    cached = load_catalogue([rules], builtin=False)
    assert cached is not fresh
    rule = cached.rule("MY-RULE")
    assert isinstance(rule.tests, loader.CasesText)
    assert dict(rule.tests) == dict(fresh.rule("MY-RULE").tests)
    assert rule.tests["fires"] == [{"packages": {"torch": "2.6.0"}}]
    outcomes = run_rule_cases(cached)
    assert [(o.kind, o.got) for o in outcomes] == [("fires", "fired"), ("passes", "passed")]
