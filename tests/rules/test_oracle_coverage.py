"""A TE rule without an evidence entry counts as checked by the oracle only when TE's own
selection code agreed in every oracle case and this rule alone switched a backend off in some
of them (rules/evidence/te-oracle-coverage.json, written by tools/te_oracle.py)."""

from __future__ import annotations

from types import SimpleNamespace

from doctor.rules.evidence import load_oracle_coverage, standing
from doctor.rules.loader import load_catalogue


def _rule(rule_id: str = "TE-X") -> SimpleNamespace:
    return SimpleNamespace(id=rule_id, evidence=(), confidence=None)


def _cov(**row: object) -> dict:
    return {"cases": 10, "agree": 10, "rules": {"TE-X": {"fired": 3, "sole": 2, "disagree": 0,
                                                         "sole_releases": ["2.1.0", "2.3.0"], **row}}}


def test_sole_reason_in_agreeing_cases_is_oracle_checked() -> None:
    st = standing(_rule(), {}, True, _cov())
    assert st.level == "oracle" and "2 of them" in st.lines[0] and "2.1.0-2.3.0" in st.lines[0]


def test_never_the_only_reason_or_any_disagreement_stays_unverified() -> None:
    assert standing(_rule(), {}, True, _cov(sole=0)).level == "unverified"
    assert standing(_rule(), {}, True, _cov(disagree=1)).level == "unverified"
    partial = {**_cov(), "agree": 9}
    assert standing(_rule(), {}, True, partial).level == "unverified"
    assert standing(_rule(), {}, True, None).level == "unverified"


def test_the_shipped_coverage_names_rules_that_exist_and_switch_te_backends_off() -> None:
    cov = load_oracle_coverage()
    assert cov and cov["agree"] == cov["cases"] >= 10_000
    rules = {r.id: r for r in load_catalogue(use_cache=False).rules}
    for rule_id in cov["rules"]:
        assert rule_id in rules, f"{rule_id} is in te-oracle-coverage.json but not in the catalogue: rerun tools/te_oracle.py"
        assert (rules[rule_id].disables or "").startswith("te."), rule_id
