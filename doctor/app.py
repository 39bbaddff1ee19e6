"""Orchestration: probe / check return plain data and never print.

    load_inputs()  facts (probe or --env snapshot, then --assume), workload, catalogue
    check()        backends + findings (+ verified fixes) (+ kernel verdicts) -> Report
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.model import Facts, Finding, Report, Workload, facts_from_snapshot

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
            doc["env"] = {k: REDACTED if is_secret_name(k) else scrub(str(v), random_strings=True) for k, v in env.items()}
        return doc
    from doctor.probe import collect

    return collect(loaded=loaded)


@dataclass(frozen=True)
class Inputs:
    facts: Facts
    workload: Workload
    catalogue: "Catalogue"
    pins: Tuple[str, ...] = ()  # --assume, as given
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
    from doctor.assume import parse_env_assignment, parse_pin
    from doctor.rules.loader import load_catalogue
    from doctor.workload import resolve_workload

    # Parse cheap, user-typed input first so a typo fails before any probing.
    for pin in assume:
        parse_pin(pin)
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
        pins=tuple(assume),
        env_changes=tuple(env_changes.items()),
        snapshot=doc,
    )
    return replace(inputs, facts=apply_assumed(inputs.facts, inputs))


def check(inputs: Inputs, *, kernel_run: Optional[Any] = None, kernels_skipped: Optional[str] = None) -> Report:
    """Backends, findings with verified fixes, and (when given) the kernels' verdicts."""
    from doctor.rules.evaluate import diagnose, verified_fixes

    diagnosis = diagnose(inputs.catalogue, inputs.facts, inputs.workload)
    findings = verified_fixes(inputs.catalogue, inputs.facts, inputs.workload, diagnosis)
    report = Report(
        facts=inputs.facts,
        workload=inputs.workload,
        backends=diagnosis.backends,
        findings=findings,
        kernels_skipped=kernels_skipped,
        assumed=inputs.pins + tuple(f"{k}={v}" if v is not None else f"unset {k}" for k, v in inputs.env_changes),
        rule_results=tuple((r.rule_id, r.status) for r in diagnosis.results),
    )
    if kernel_run is not None:
        from doctor.linking import link_kernels

        report = link_kernels(report, inputs.catalogue, kernel_run)
    return report


def fail_count(report: Report, fail_on: str, strict: bool) -> int:
    """How many findings are at or above the failure threshold (`--fail-on`)."""
    levels = {"error": 0, "warning": 1, "info": 2}
    limit = levels[fail_on]
    if report.hosts:  # fleet view: the worst over the hosts, plus what differs between them
        from doctor.cluster.hetero import AREA
        from doctor.fleet import host_fail_count

        fleet_wide = [f for f in report.findings if f.area == AREA and f.status != "not_evaluated"]
        return sum(host_fail_count(h, fail_on, strict) for h in report.hosts) + sum(
            1 for f in fleet_wide if levels.get(f.severity, 2) <= limit
        )
    # --strict: a framework whose backend choice is undecided counts like an unevaluated rule
    n = len({b.framework for b in report.backends if b.available is None}) if strict else 0
    for f in report.findings:
        if f.status == "refuted":
            continue
        if f.status == "not_evaluated":
            n += 1 if strict else 0
            continue
        if levels.get(f.severity, 2) <= limit:
            n += 1
    return n


def kernels_only(report: Report) -> Report:
    """Keep what the kernels saw: findings they confirmed or raised, and the cases."""
    keep = tuple(f for f in report.findings if f.status == "confirmed" or f.rule_id.startswith("KERNEL-"))
    return replace(report, findings=keep, rule_results=tuple((f.rule_id, "fired") for f in keep))


def check_fleet(inputs: Inputs, env_files: Sequence[Path]) -> Report:
    """Offline fleet view: every rule on every snapshot, per host (see doctor/fleet.py)."""
    from doctor.fleet import check_fleet as fleet

    return fleet(inputs, env_files)


def apply_assumed(facts: Facts, inputs: Inputs) -> Facts:
    """`facts` with the inputs' --assume pins and --assume-env settings applied."""
    from doctor.assume import apply_env, apply_pins

    if inputs.pins:
        facts = apply_pins(facts, inputs.pins)
    if inputs.env_changes:
        facts = apply_env(facts, dict(inputs.env_changes))
    return facts
