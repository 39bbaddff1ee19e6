"""Every rule in the shipped catalogue fires on its own `fires` cases and stays quiet
(evaluated, not merely unknown) on its `passes` cases; catalogue-wide invariants hold."""

from __future__ import annotations

import re
from typing import Any, List, Tuple

import pytest

from doctor.rules.cases import run_rule_case
from doctor.rules.loader import Catalogue, Rule, load_catalogue

CAT: Catalogue = load_catalogue(use_cache=False)


def _cases() -> List[Tuple[str, Rule, str, int, Any]]:
    out = []
    for rule in CAT.rules:
        for kind in ("fires", "passes"):
            for i, case in enumerate(rule.tests[kind]):
                out.append(pytest.param(rule, kind, i, case, id=f"{rule.id}-{kind}-{i}"))
    return out


@pytest.mark.parametrize("rule,kind,index,case", _cases())
def test_rule_case(rule: Rule, kind: str, index: int, case: Any) -> None:
    """The case's verdict, and where it says `offers:`, the fixes offered (the runner `rules lint`
    uses, so a case fails here exactly where lint would report it)."""
    outcome = run_rule_case(CAT, rule, kind, index, case)
    assert outcome.ok, outcome.describe()


def test_catalogue_size_and_sources() -> None:
    assert len(CAT.rules) >= 65
    for rule in CAT.rules:
        assert rule.sources, rule.id
        for url in rule.sources:
            assert re.match(r"^https://(github\.com|pypi\.org|docs\.nvidia\.com|pytorch\.org|docs\.pytorch\.org|huggingface\.co)/", url), (rule.id, url)


def test_silent_wrong_results_are_errors() -> None:
    for rule in CAT.rules:
        if rule.silent_wrong_results:
            assert rule.severity == "error", rule.id


def test_every_finding_error_has_a_fix() -> None:
    for rule in CAT.rules:
        if rule.severity == "error":
            assert rule.fixes, f"{rule.id} is an error without a fix"


def test_every_pin_names_a_release_that_exists() -> None:
    import json

    from doctor.resources import rules_dir
    from doctor.versions import canonical_name

    known = {}
    for f in (rules_dir() / "releases").glob("*.json"):
        doc = json.loads(f.read_text())
        if isinstance(doc.get("releases"), list) and doc.get("package"):
            known[canonical_name(doc["package"])] = {r["version"] for r in doc["releases"]}
        if isinstance(doc.get("torch"), list):
            known.setdefault("torch", set()).update(r["version"] for r in doc["torch"])
    assert {"flash-attn", "transformer-engine", "transformers", "nvidia-cudnn-cu12", "torch"} <= set(known)
    for rule in CAT.rules:
        for fix in rule.fixes:
            for pin in fix.pins:
                name, version = pin.name, pin.version
                assert name in known, f"{rule.id}: {pin} names a package the release catalogue does not list"
                assert version in known[name], f"{rule.id}: {pin} is not a published release"


def test_no_prose_is_cut_short_by_a_yaml_comment() -> None:
    """An unquoted ' #' in a plain scalar starts a comment: the user would see half a sentence."""
    from doctor.resources import rules_dir

    pattern = re.compile(r"^\s*-?\s*(description|title|message|cost|note|name):\s+[^\"'>|\s].*\s#")
    bad = []
    for path in rules_dir().rglob("*.yaml"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.match(line):
                bad.append(f"{path}:{n}")
    assert not bad, bad


def test_torch_cudnn_incompatibility_is_quoted_as_torch_writes_it() -> None:
    """torch writes "PyTorch was compiled  against" with two spaces (torch/backends/cudnn/__init__.py,
    2.0.1-2.15.0 wheels): a message quotes it up to "compiled", or with both spaces (sample 22 row 23)."""
    bad = []
    for rule in CAT.rules:
        text = " ".join(str(rule.message or "").split("\n"))
        if re.search(r"PyTorch was compiled against", text):
            bad.append(rule.id)
    assert not bad, bad


def test_the_schema_knows_exactly_the_operators_the_evaluator_has() -> None:
    """A leaf operator the schema accepts but conditions cannot evaluate (or the reverse) would
    be a rule that loads and then fails at run time."""
    from doctor.rules.conditions import OPERATORS
    from doctor.rules.schema import _compare_props

    assert set(_compare_props) == set(OPERATORS)


def test_lint_of_one_file_runs_that_files_cases_given_a_relative_path(monkeypatch: Any, capsys: Any) -> None:
    import pytest

    from doctor.cli import main
    from doctor.resources import rules_dir

    monkeypatch.chdir(rules_dir().parent)
    with pytest.raises(SystemExit) as exc:
        main(["rules", "lint", "rules/findings/seeds.yaml"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert exc.value.code == 0 and last.endswith("rule test cases, 0 failed") and not last.startswith("0 ")
