"""Orchestration: probe / check return plain data and never print.

    load_inputs()  facts (probe or --env snapshot, then --assume), workload, catalogue
    check()        backends + findings (+ verified fixes) (+ kernel verdicts) -> Report
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.model import Facts, Finding, Pin, Report, Severity, Workload, facts_from_snapshot

if TYPE_CHECKING:
    from doctor.rules.loader import Catalogue


def probe_snapshot(env_file: Optional[Path] = None, loaded: bool = True) -> Dict[str, Any]:
    """The snapshot document: read from `env_file`, or probed from this machine."""
    if env_file is not None:
        from doctor.probe.envvars import REDACTED, is_secret_name, scrub
        from doctor.snapshot import load_snapshot

        doc = load_snapshot(env_file)
        env = doc.get("env")
        if isinstance(env, dict):  # a hand-written snapshot may carry secrets: never echo them
            doc["env"] = {k: REDACTED if is_secret_name(k) else scrub(str(v)) for k, v in env.items()}
        return doc
    from doctor.probe import collect

    return collect(loaded=loaded)


@dataclass(frozen=True)
class Inputs:
    facts: Facts
    workload: Workload
    catalogue: "Catalogue"
    pins: Tuple[Pin, ...] = ()  # --assume, parsed
    env_changes: Tuple[Tuple[str, Optional[str]], ...] = ()  # --assume-env, parsed (None: unset)
    snapshot: Optional[Mapping[str, Any]] = None  # the probed or loaded document


def load_inputs(
    env_files: Sequence[Path] = (),
    workload_file: Optional[Path] = None,
    model: Optional[Path] = None,
    workload_flags: Optional[Mapping[str, Any]] = None,
    assume: Sequence[str] = (),
    assume_env: Sequence[str] = (),
    rules_dirs: Sequence[Path] = (),
    loaded: bool = True,
) -> Inputs:
    """Everything `check` and `fix` need. Input errors raise InputError (exit 2)."""
    from doctor.assume import parse_env_assignment
    from doctor.versions import parse_pin
    from doctor.rules.loader import load_catalogue
    from doctor.workload import resolve_workload

    # Parse cheap, user-typed input first so a typo fails before any probing.
    pins = tuple(parse_pin(text) for text in assume)
    env_changes = dict(parse_env_assignment(a) for a in assume_env)
    workload = resolve_workload(workload_file, model, workload_flags)
    catalogue = load_catalogue(list(rules_dirs))
    if env_files:
        doc = probe_snapshot(env_file=Path(env_files[0]))
        source = str(env_files[0])
    else:
        doc = probe_snapshot(loaded=loaded)
        source = "probe"
    inputs = Inputs(
        facts=facts_from_snapshot(doc, source=source),
        workload=workload,
        catalogue=catalogue,
        pins=pins,
        env_changes=tuple(env_changes.items()),
        snapshot=doc,
    )
    return replace(inputs, facts=apply_assumed(inputs.facts, inputs))


def check(inputs: Inputs, *, kernel_run: Optional[Any] = None, kernels_skipped: Optional[str] = None) -> Report:
    """Backends, findings with verified fixes, and (when given) the kernels' verdicts."""
    from doctor.fix.recheck import verified_fixes
    from doctor.rules.evaluate import diagnose

    diagnosis = diagnose(inputs.catalogue, inputs.facts, inputs.workload)
    findings = verified_fixes(inputs.catalogue, inputs.facts, inputs.workload, diagnosis)
    contract, contract_results = _contract_findings(inputs.facts)
    report = Report(
        facts=inputs.facts,
        workload=inputs.workload,
        backends=diagnosis.backends,
        findings=contract + findings,
        kernels_skipped=kernels_skipped,
        assumed=tuple(str(p) for p in inputs.pins) + tuple(f"{k}={v}" if v is not None else f"unset {k}" for k, v in inputs.env_changes),
        rule_results=tuple((r.rule_id, r.status) for r in diagnosis.results) + contract_results,
    )
    if kernel_run is not None:
        from doctor.verify.link import link_kernels

        report = link_kernels(report, inputs.catalogue, kernel_run)
    return report


def _contract_findings(facts: Facts) -> Tuple[Tuple[Finding, ...], Tuple[Tuple[str, str], ...]]:
    """The CONTRACT-* findings from the snapshot's contract analysis (none when it has none)."""
    if not facts.contracts or not facts.contracts.get("pairs"):
        return (), ()
    import os

    from doctor.probe.contract_specs import load_specs
    from doctor.probe.sources import default_cache_dir
    from doctor.rules.contract_findings import contract_findings

    return contract_findings(facts, load_specs(cache_dir=default_cache_dir(os.environ)))


def fail_count(report: Report, fail_on: str, strict: bool) -> int:
    """How many findings are at or above the failure threshold (`--fail-on`)."""
    limit = Severity(fail_on)
    # --strict: a framework whose backend choice is undecided counts like an unevaluated rule
    n = len({b.framework for b in report.backends if b.available is None}) if strict else 0
    for f in report.findings:
        if f.status == "refuted":
            continue
        if f.status == "not_evaluated":
            n += 1 if strict else 0
            continue
        if f.severity.at_least(limit):
            n += 1
    return n


def kernels_only(report: Report) -> Report:
    """Keep what the kernels saw: findings they confirmed or raised, and the cases."""
    keep = tuple(f for f in report.findings if f.status == "confirmed" or f.rule_id.startswith("KERNEL-"))
    return replace(report, findings=keep, rule_results=tuple((f.rule_id, "fired") for f in keep))


def check_fleet(inputs: Inputs, env_files: Sequence[Path]) -> Report:
    """Offline fleet view: the rules on every snapshot, merged, plus what differs between them.

    A finding that fires on some snapshots only says where; one that fires everywhere says so.
    The report's facts and backends are those of the first snapshot."""
    from doctor.cluster.hetero import analyze

    docs = [(str(env_files[0]), inputs.snapshot or {})]
    docs += [(str(p), probe_snapshot(env_file=Path(p))) for p in env_files[1:]]
    labels = [str(doc.get("host") or Path(path).stem) for path, doc in docs]
    merged: Dict[str, Finding] = {}
    where: Dict[str, List[str]] = {}
    results: Dict[str, str] = {}
    first: Optional[Report] = None
    for (path, doc), label in zip(docs, labels):
        facts = inputs.facts if first is None else apply_assumed(facts_from_snapshot(doc, source=path), inputs)
        rep = check(replace(inputs, facts=facts, snapshot=doc))
        first = first or rep
        for f in rep.findings:
            merged.setdefault(f.rule_id, f)
            where.setdefault(f.rule_id, []).append(label)
        for rid, st in rep.rule_results:
            if results.get(rid) != "fired":
                results[rid] = st if results.get(rid) != "not_evaluated" or st == "fired" else "not_evaluated"
    assert first is not None
    findings: List[Finding] = []
    for rid, f in merged.items():
        hosts = where[rid]
        if len(hosts) < len(docs):
            f = replace(f, title=f"[{', '.join(hosts)}] {f.title}", evidence=f.evidence + (f"on {', '.join(hosts)} only",))
        else:
            f = replace(f, evidence=f.evidence + (f"on all {len(docs)} snapshots",))
        findings.append(f)
    hetero = tuple(analyze([(label, None, doc) for (path, doc), label in zip(docs, labels)]))
    rule_results = tuple(results.items()) + tuple((f.rule_id, "fired") for f in hetero)
    return replace(first, findings=hetero + tuple(findings), rule_results=rule_results)


def apply_assumed(facts: Facts, inputs: Inputs) -> Facts:
    """`facts` with the inputs' --assume pins and --assume-env settings applied."""
    from doctor.assume import apply_env, apply_pins

    if inputs.pins:
        facts = apply_pins(facts, inputs.pins)
    if inputs.env_changes:
        facts = apply_env(facts, dict(inputs.env_changes))
    return facts
