"""Something fails first: a finding that fires on the same inputs as another error must say why
both hold there, or read the other (`{finding: ID, fired: false}`) and stay silent where it stops
the run first. The engine part: findings that read findings are evaluated after them, unknown
stays unknown unless `if_unknown` says otherwise, and the loader refuses cycles and bad names."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from doctor.errors import RuleError
from doctor.rules.cases import case_inputs, iter_rule_cases
from doctor.rules.evaluate import diagnose
from doctor.model import stage_ordered
from doctor.rules.loader import Catalogue, finding_refs, load_catalogue

TWO = """
rules:
  - id: B-LATER
    severity: error
    title: the later failure
    message: m
    when: {all: [{env: LATER, eq: "1"}, {finding: A-FIRST, fired: false%s}]}
    sources: [https://github.com/pytorch/pytorch/issues/1]
    tests:
      fires: [{env: {LATER: "1"}, gpu: "9.0"}]
      passes: [{env: {LATER: "1"}, gpu: "7.0"}]
  - id: A-FIRST
    severity: error
    title: the first failure
    message: m
    when: {fact: gpu.sm, lt: 80}
    sources: [https://github.com/pytorch/pytorch/issues/1]
    tests:
      fires: [{gpu: "7.0"}]
      passes: [{gpu: "9.0"}]
"""


def _load(tmp_path: Path, text: str) -> Catalogue:
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return load_catalogue([p], builtin=False, use_cache=False)


def _status(cat: Catalogue, case: Dict[str, Any]) -> Dict[str, str]:
    facts, wl = case_inputs(case)
    d = diagnose(cat, facts, wl)
    return {r.rule_id: r.status for r in d.results}


def test_a_later_failure_is_silent_where_the_first_one_stops_the_run(tmp_path: Path) -> None:
    # B-LATER is defined before A-FIRST: the evaluator still decides A-FIRST first
    cat = _load(tmp_path, TWO % "")
    assert _status(cat, {"env": {"LATER": "1"}, "gpu": "7.0"}) == {"B-LATER": "passed", "A-FIRST": "fired"}
    assert _status(cat, {"env": {"LATER": "1"}, "gpu": "9.0"}) == {"B-LATER": "fired", "A-FIRST": "passed"}
    # no GPU in the report: whether A-FIRST stops the run is unknown, and so is B-LATER
    facts, wl = case_inputs({"env": {"LATER": "1"}})
    got = {f.rule_id: f for f in diagnose(cat, facts, wl).findings}
    assert got["B-LATER"].status == "not_evaluated"
    assert any("A-FIRST" in m for m in got["B-LATER"].missing)


def test_if_unknown_decides_a_finding_leaf_that_cannot_be_read(tmp_path: Path) -> None:
    cat = _load(tmp_path, TWO % ", if_unknown: true")
    assert _status(cat, {"env": {"LATER": "1"}})["B-LATER"] == "fired"


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda s: s.replace("when: {fact: gpu.sm, lt: 80}", "when: {finding: B-LATER, fired: false}"), "cycle"),
        (lambda s: s.replace("finding: A-FIRST", "finding: A-FRIST"), "not another finding rule"),
        (lambda s: s.replace("    title: the first failure\n", "    title: the first failure\n    alongside: [{rule: NOPE, why: both are true here}]\n"),
         "lists alongside 'NOPE'"),
    ],
)
def test_bad_finding_references_are_refused(tmp_path: Path, edit: Any, needle: str) -> None:
    if needle == "cycle":  # a partial catalogue may name a rule it did not load (below)
        with pytest.raises(RuleError) as exc:
            _load(tmp_path, edit(TWO % ""))
        assert needle in exc.value.one_line()
    # a --rules-dir on top of the shipped catalogue is refused
    p = tmp_path / "mine"
    p.mkdir()
    (p / "r.yaml").write_text(edit(TWO % ""))
    with pytest.raises(RuleError) as exc:
        load_catalogue([p], use_cache=False)
    assert needle in exc.value.one_line() and "r.yaml" in exc.value.one_line()


def test_a_partial_catalogue_may_name_a_rule_it_did_not_load(tmp_path: Path) -> None:
    # some of the shipped files without the rest (as tests load them): a rule that is not loaded
    # never fires, and an `alongside:` entry only documents a co-firing error
    text = (TWO % "").replace("    title: the first failure\n", "    title: the first failure\n    alongside: [{rule: ELSEWHERE, why: both are true here}]\n")
    cat = _load(tmp_path, text)
    assert _status(cat, {"env": {"LATER": "1"}, "gpu": "7.0"}) == {"B-LATER": "passed", "A-FIRST": "fired"}
    cat = _load(tmp_path, (TWO % "").replace("finding: A-FIRST", "finding: NOT-LOADED"))
    assert _status(cat, {"env": {"LATER": "1"}})["B-LATER"] == "fired"
    assert _status(cat, {"env": {"LATER": "1"}, "gpu": "7.0"}) == {"B-LATER": "fired", "A-FIRST": "fired"}


@lru_cache(maxsize=1)
def _cofiring() -> List[Tuple[str, int, str]]:
    """(rule, fires case, other error finding that fired on the same inputs) not declared."""
    cat = load_catalogue()
    errors = [r for r in cat.rules if r.severity is not None and r.severity.value == "error"]
    declared = {(r.id, a) for r in cat.rules for a, _ in r.alongside}
    out: List[Tuple[str, int, str]] = []
    for rule, kind, i, case in iter_rule_cases(cat, lambda r: not r.disables):
        if kind != "fires":
            continue
        facts, wl = case_inputs(case)
        d = diagnose(cat, facts, wl)
        for other in errors:
            if other.id == rule.id or (rule.id, other.id) in declared or (other.id, rule.id) in declared:
                continue
            if stage_ordered(rule.stage, other.stage):  # the report lists the later one behind the earlier
                continue
            if d.result(other.id).status == "fired":
                out.append((rule.id, i, other.id))
    return out


def _pending() -> set:
    p = Path(__file__).with_name("cofire_pending.txt")
    return {tuple(line.split()[:2]) for line in p.read_text().splitlines() if line.strip() and not line.startswith("#")}


def test_every_error_that_fires_alongside_a_rule_is_declared_with_why() -> None:
    """A fires case on which another error also fires is either unrealistic (fix the case), or
    the other failure stops the run first (read it: `{finding: OTHER, fired: false}`), or both
    really happen (say why under `alongside:`). Pairs not yet judged are listed, each once, in
    cofire_pending.txt; that list only shrinks."""
    pending = _pending()
    new = sorted({(r, o) for r, _, o in _cofiring()} - pending)
    assert not new, "errors firing on a rule's fires case, neither declared nor pending:\n" + "\n".join(f"{r} <- {o}" for r, o in new)


def test_the_pending_list_names_only_pairs_that_still_fire_together() -> None:
    still = {(r, o) for r, _, o in _cofiring()}
    stale = sorted(_pending() - still)
    assert not stale, "judged or gone; remove from cofire_pending.txt:\n" + "\n".join(f"{r} {o}" for r, o in stale)


ABSENT = """
frameworks:
  - id: fw
    name: fw
    installed: {package: torch, installed: true}
    backends:
      - {id: fw.fast, name: Fast}
    selection:
      - order: [fw.fast]
    sources: [https://github.com/pytorch/pytorch/issues/1]
rules:
  - id: FAST-HEAD-DIM
    disables: fw.fast
    title: head dims up to 256
    message: head dim over 256
    when: {fact: workload.head_dim_qk, gt: 256}
    sources: [https://github.com/pytorch/pytorch/issues/1]
    tests:
      fires: [{packages: {torch: "2.6.0"}, workload: {head_dim: 320}}]
      passes: [{packages: {torch: "2.6.0"}}]
  - id: FAST-NOT-BUILT
    disables: fw.fast
    absent: true
    title: no kernel in a CPU build
    message: not built into this torch
    when: {fact: torch.version, matches: '\\+cpu'}
    sources: [https://github.com/pytorch/pytorch/issues/1]
    tests:
      fires: [{packages: {torch: "2.6.0+cpu"}}]
      passes: [{packages: {torch: "2.6.0"}}]
"""


def test_a_backend_that_is_not_there_has_one_reason_and_its_filters_stay_silent(tmp_path: Path) -> None:
    cat = _load(tmp_path, ABSENT)
    facts, wl = case_inputs({"packages": {"torch": "2.6.0+cpu"}, "workload": {"head_dim": 320}})
    d = diagnose(cat, facts, wl)
    st = next(b for b in d.backends if b.id == "fw.fast")
    assert st.available is False and st.reasons == ("not built into this torch",)
    assert {r.rule_id: r.status for r in d.results} == {"FAST-HEAD-DIM": "passed", "FAST-NOT-BUILT": "fired"}
    facts, wl = case_inputs({"packages": {"torch": "2.6.0"}, "workload": {"head_dim": 320}})
    st = next(b for b in diagnose(cat, facts, wl).backends if b.id == "fw.fast")
    assert st.reasons == ("head dim over 256",)


def test_absent_belongs_to_backend_rules_only(tmp_path: Path) -> None:
    with pytest.raises(RuleError):
        _load(tmp_path, TWO.replace("    severity: error\n    title: the first failure\n", "    severity: error\n    absent: true\n    title: the first failure\n") % "")


def _show(rule_id: str, capsys: Any) -> str:
    from doctor.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["rules", "show", rule_id])
    assert int(exc.value.code or 0) == 0
    return str(capsys.readouterr().out)


def test_rules_show_names_what_a_rule_stops_first_and_what_fires_alongside(capsys: Any) -> None:
    cat = load_catalogue()
    reader = next(r for r in cat.rules if "FA-IMPORT-FAILS" in finding_refs(r.when))
    out = _show("FA-IMPORT-FAILS", capsys)
    assert "stops first for" in out and reader.id in out
    declared = next(r for r in cat.rules if r.alongside)
    out = _show(declared.id, capsys)
    assert "fires alongside" in out and declared.alongside[0][0] in out
    assert "absent: where this fires, sdpa.flash is not in this build" in _show("SDPA-FLASH-CPU-TORCH", capsys)
