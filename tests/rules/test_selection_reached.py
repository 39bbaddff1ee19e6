"""A finding about which backend a framework picks is reached only if the run gets there: where
an import error or a constructor assert stops the run first (the framework's `reached_unless:`),
such a finding stays silent, without a guard of its own (sample 25: eight TE findings keyed on
`selected: true` fired next to TE's window assert)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from doctor.rules.cases import case_inputs, iter_rule_cases
from doctor.rules.evaluate import diagnose
from doctor.rules.conditions import evaluate
from doctor.rules.loader import Catalogue, _guarded, load_catalogue, unguarded

FW = """frameworks:
  - id: fw
    name: Fw
    installed: {package: fw, installed: true}
    backends:
      - {id: fw.fast, name: Fast}
      - {id: fw.slow, name: Slow}
    selection:
      - order: [fw.fast, fw.slow]
    reached_unless:
      any:
        - {finding: FW-IMPORT-FAILS, fired: true, if_unknown: false}
    sources: [https://example.org/fw]
rules:
  - id: FW-IMPORT-FAILS
    severity: error
    title: fw does not import
    message: m
    when: {all: [{package: fw, installed: true}, {env: BROKEN, eq: "1"}%s]}
    sources: [https://example.org/fw/1]
    tests:
      fires: [{packages: {fw: "1.0"}, env: {BROKEN: "1"}}]
      passes: [{packages: {fw: "1.0"}}]
  - id: FW-FAST-IS-WRONG
    severity: error
    title: the fast backend gives wrong numbers
    message: m
    when: {backend: fw.fast, selected: true}
    sources: [https://example.org/fw/2]
    tests:
      fires: [{packages: {fw: "1.0"}}]
      passes: [{packages: {fw: "1.0"}, env: {BROKEN: "1"}}]
  - id: FW-NOTHING-ELSE
    severity: warning
    title: fw is installed
    message: m
    when: {package: fw, installed: true}
    sources: [https://example.org/fw/3]
    tests:
      fires: [{packages: {fw: "1.0"}, env: {BROKEN: "1"}}]
      passes: [{}]
"""


def _status(cat: Catalogue, case: Dict[str, Any]) -> Dict[str, str]:
    facts, wl = case_inputs(case)
    return {r.rule_id: r.status for r in diagnose(cat, facts, wl).results}


def _load(tmp_path: Path, text: str) -> Catalogue:
    p = tmp_path / "fw.yaml"
    p.write_text(text, encoding="utf-8")
    return load_catalogue([p], builtin=False, use_cache=False)


def test_a_finding_about_the_choice_is_silent_where_the_run_stops_before_it(tmp_path: Path) -> None:
    cat = _load(tmp_path, FW % "")
    ok = _status(cat, {"packages": {"fw": "1.0"}})
    assert (ok["FW-IMPORT-FAILS"], ok["FW-FAST-IS-WRONG"], ok["FW-NOTHING-ELSE"]) == ("passed", "fired", "fired")
    broken = _status(cat, {"packages": {"fw": "1.0"}, "env": {"BROKEN": "1"}})
    # the import error is reported; the finding about what fw would pick is not; a finding that
    # does not read the choice is left as written
    assert (broken["FW-IMPORT-FAILS"], broken["FW-FAST-IS-WRONG"], broken["FW-NOTHING-ELSE"]) == ("fired", "passed", "fired")


def test_a_stop_that_itself_reads_the_choice_is_not_guarded_by_itself(tmp_path: Path) -> None:
    # the stop finding reads fw's choice: guarding it with its own negation would be a cycle;
    # it is left as written and the catalogue loads
    cat = _load(tmp_path, FW % ", {backend: fw.fast, selected: true}")
    broken = _status(cat, {"packages": {"fw": "1.0"}, "env": {"BROKEN": "1"}})
    assert (broken["FW-IMPORT-FAILS"], broken["FW-FAST-IS-WRONG"]) == ("fired", "passed")


def test_a_branch_about_another_library_keeps_firing_where_only_the_framework_stops(tmp_path: Path) -> None:
    # only the part that reads fw's choice is guarded: an `any:` branch about something else
    # (transformers calling flash-attn itself) still fires where fw does not import
    text = (FW % "").replace("    when: {backend: fw.fast, selected: true}",
                             "    when: {any: [{backend: fw.fast, selected: true}, {env: OTHER_PATH, eq: \"1\"}]}")
    cat = _load(tmp_path, text)
    assert _status(cat, {"packages": {"fw": "1.0"}, "env": {"BROKEN": "1"}})["FW-FAST-IS-WRONG"] == "passed"
    assert _status(cat, {"packages": {"fw": "1.0"}, "env": {"BROKEN": "1", "OTHER_PATH": "1"}})["FW-FAST-IS-WRONG"] == "fired"


def test_hf_flash_attention_2_findings_do_not_depend_on_te_importing() -> None:
    # check-R1 of sample 26: transformers' flash_attention_2 path imports flash_attn only; a TE
    # that does not import changes nothing there
    case = {"packages": {"flash-attn": "2.8.3", "transformers": "4.53.0", "torch": "2.7.1", "transformer-engine": "2.10.0"},
            "torch": {"version": "2.7.1", "cuda": "12.8"}, "gpu": "8.6",
            "workload": {"head_dim": 256, "dropout": 0.1, "attn_implementation": "flash_attention_2", "training": True},
            "imports": TE_BROKEN}
    facts, wl = case_inputs(case)
    d = diagnose(_te()[0], facts, wl)
    assert d.result("NUM-FA2-HD256-DROPOUT-BACKWARD-NOT-RUN").status == "fired"
    # a stated flash_attention_2 run never imports transformer_engine.pytorch (te_pytorch_imported),
    # so the broken TE is not reported there (pass 16 final review) ...
    assert d.result("TE-IMPORT-FAILS").status == "passed"
    # ... while the same broken TE is reported where the run may import it (no attention stated)
    unstated = {**case, "workload": {k: v for k, v in case["workload"].items() if k != "attn_implementation"}}
    facts, wl = case_inputs(unstated)
    assert diagnose(_te()[0], facts, wl).result("TE-IMPORT-FAILS").status == "fired"


@lru_cache(maxsize=1)
def _te() -> Tuple[Catalogue, List[Tuple[str, int, Dict[str, Any]]]]:
    cat = load_catalogue()
    fw = next(f for f in cat.frameworks if f.id == "transformer-engine")
    out = [(r.id, i, case) for r, kind, i, case in iter_rule_cases(cat, lambda r: not r.disables and r.reached_by == fw.id)
           if kind == "fires"]
    return cat, out


def test_the_te_findings_about_its_choice_are_many() -> None:
    # the guard reaches the findings the sample-25 audit named (they read `selected: true`)
    named = {"TE-FA-BLOCK-TABLE-CP", "TE-FA-SOFTCAP-CP", "TE-FA-BLOCK-TABLE-TE-1-11", "TE-HOPPER-HEADDIM-BPROP-CUDNN",
             "TE-CUDNN-9-10-SDPA-BUG", "TE-KV-CACHE-SM89-WRONG-RESULTS", "TE-THD-CP-BACKWARD-NAN-HOPPER", "TE-CP-THD-ALLGATHER",
             "TE-NO-BACKEND"}
    assert named <= {rid for rid, _, _ in _te()[1]}


TE_BROKEN = {"transformer_engine": {"status": "ok"},
             "transformer_engine.pytorch": {"status": "error", "error": "ImportError: transformer_engine_torch.so: undefined symbol: _ZN3c1019UndefinedTensorImpl10_singletonE"}}


@pytest.mark.parametrize("stop_kind", ["import", "window", "mcore-env"], ids=["te-import-fails", "window-refused", "mcore-nvte-assert"])
def test_no_te_finding_about_its_choice_fires_where_te_stops_first(stop_kind: str) -> None:
    """Each fires case of every TE finding that reads TE's choice, with TE stopped first: its
    extension does not import (TE-IMPORT-FAILS), or a causal mask meets window (-1, 64), which
    check_set_window_size refuses in DotProductAttention.__init__ (TE-WINDOW-SIZE-REFUSED), or
    Megatron-Core 0.14's check of NVTE_FLASH_ATTN=0 against its default backend (auto) stops the
    model build before any TE layer exists (MCORE-NVTE-ATTN-ENV-ASSERT)."""
    cat, cases = _te()
    fw = next(f for f in cat.frameworks if f.id == "transformer-engine")
    ids = {b.id for b in fw.backends} | {m.id for b in fw.backends for m in b.members}
    guard = {"not": fw.reached_unless}
    wrong, stopped = [], 0
    for rid, i, case in cases:
        case = dict(case)
        if stop_kind == "window":
            case["workload"] = {**(case.get("workload") or {}), "window_size": [-1, 64], "mask": "causal"}
            stop = "TE-WINDOW-SIZE-REFUSED"
        elif stop_kind == "mcore-env":
            case["workload"] = {k: v for k, v in (case.get("workload") or {}).items() if k not in ("attention_backend", "legacy_models")}
            case["workload"]["framework"] = "megatron"
            case["packages"] = {**(case.get("packages") or {}), "megatron-core": "0.14.0"}
            case["env"] = {**(case.get("env") or {}), "NVTE_FLASH_ATTN": "0"}
            stop = "MCORE-NVTE-ATTN-ENV-ASSERT"
        else:
            case["imports"] = {**(case.get("imports") or {}), **TE_BROKEN}
            stop = "TE-IMPORT-FAILS"
        facts, wl = case_inputs(case)
        d = diagnose(cat, facts, wl)
        if d.result(stop).status != "fired":
            continue
        stopped += 1
        if d.result(rid).status == "fired":
            # it may still fire on a branch about another library (transformers' own flash path):
            # only a rule that holds through TE's choice alone must be silent
            rule = cat.rule(rid)
            assert rule is not None
            other_branches = _guarded(unguarded(rule.when, guard), fw.id, ids, {"any": []})
            if evaluate(other_branches, d.context(facts, wl)).value is not True:
                wrong.append(f"{rid} case {i}")
    assert stopped >= 20, stopped
    assert not wrong, f"fired although {stop} stops TE first: " + ", ".join(wrong)


def test_rules_show_gives_the_when_as_written_and_names_the_stops_apart(capsys: Any) -> None:
    from doctor.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["rules", "show", "TE-FA-BLOCK-TABLE-CP"])
    assert int(exc.value.code or 0) == 0
    out = str(capsys.readouterr().out)
    when = out.split("when:", 1)[1].split("fixes:", 1)[0]
    assert "backend: te.flash" in when and "TE-WINDOW-SIZE-REFUSED" not in when.split("and TransformerEngine gets")[0]
    assert "and TransformerEngine gets to choose a backend: silent where one of its earlier errors fires (" in when
    assert "TE-WINDOW-SIZE-REFUSED" in when and "TE-IMPORT-FAILS" in when
