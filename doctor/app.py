"""Orchestration: each command's work, returning plain data; nothing here prints.

    run_probe(ProbeOptions)            -> the snapshot document (live probe or --env file)
    run_check(CheckOptions, observer)  -> Report   (facts, workload, rules once, kernels, fixes)
    run_fix(FixOptions)                -> FixPlan
    lint_rules(paths)                  -> the rule test cases that failed, and how many ran

The commands in doctor/commands/ parse flags into these options, call one function here,
render the result with doctor.report.render and return an exit code.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.configs import ConfigRead, read_config
from doctor.errors import InputError
from doctor.model import Facts, Finding, Fix, Pin, Report, Severity, Workload
from doctor.snapshot import facts_from_snapshot

if TYPE_CHECKING:
    from doctor.fix.plan import Change, FixPlan
    from doctor.fix.recheck import Recheck
    from doctor.probe.sources import Sources
    from doctor.rules.cases import CaseOutcome
    from doctor.rules.evaluate import Diagnosis
    from doctor.rules.loader import Catalogue
    from doctor.verify.results import KernelRun
    from doctor.verify.runner import Observer, WarmWorker


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class ProbeOptions:
    """How to probe this machine (the CLI's --static, --no-cache, --child-timeout)."""

    static: bool = False  # no child process that imports torch
    no_cache: bool = False  # re-run the loaded-facts child even when a cached result fits
    child_timeout: Optional[float] = None  # seconds; None: the default (or $ATTN_DOCTOR_CHILD_TIMEOUT)

    def sources(self) -> "Sources":
        from doctor.probe.sources import Sources

        return Sources.system(no_cache=self.no_cache, child_timeout=self.child_timeout)


@dataclass(frozen=True)
class CheckOptions:
    env_files: Tuple[Path, ...] = ()  # snapshots instead of this machine (several: fleet view)
    workload_file: Optional[Path] = None
    model: Optional[Path] = None
    workload_flags: Mapping[str, Any] = field(default_factory=dict)
    assume: Tuple[str, ...] = ()  # NAME==VERSION
    assume_env: Tuple[str, ...] = ()  # NAME=VALUE, NAME= or NAME
    rules_dirs: Tuple[Path, ...] = ()
    configs: Tuple[Path, ...] = ()  # --config: training-framework configs, logs, package lists
    probe: ProbeOptions = field(default_factory=ProbeOptions)
    kernels: bool = True  # run the kernel stage where torch and a GPU are present
    kernels_only: bool = False  # GPU smoke test: keep only what the kernels saw
    releases: Optional[Path] = None  # release catalogue folder (default: the shipped one)


@dataclass(frozen=True)
class FixOptions:
    check: CheckOptions = field(default_factory=CheckOptions)
    verify_args: Tuple[str, ...] = ()  # the user's inputs, repeated in the plan's re-check command
    online: bool = False  # also ask pip (install --dry-run --report, nothing built) whether the pins resolve


# --------------------------------------------------------------------------- probe


def probe_snapshot(env_file: Optional[Path] = None, loaded: bool = True, sources: Optional["Sources"] = None) -> Dict[str, Any]:
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

    return collect(loaded=loaded, sources=sources)


def run_probe(opts: ProbeOptions, env_file: Optional[Path] = None) -> Dict[str, Any]:
    if env_file is not None:
        return probe_snapshot(env_file=env_file)
    return probe_snapshot(loaded=not opts.static, sources=opts.sources())


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Inputs:
    facts: Facts
    workload: Workload
    catalogue: "Catalogue"
    pins: Tuple[Pin, ...] = ()  # --assume, parsed
    env_changes: Tuple[Tuple[str, Optional[str]], ...] = ()  # --assume-env, parsed (None: unset)
    snapshot: Optional[Mapping[str, Any]] = None  # the probed or loaded document
    notes: Tuple[str, ...] = ()  # what the --config files gave (and could not)


def load_inputs(opts: CheckOptions) -> Inputs:
    """Everything `check` and `fix` need. Input errors raise InputError (exit 2)."""
    from doctor.assume import parse_env_assignment
    from doctor.rules.loader import load_catalogue
    from doctor.versions import parse_pin
    from doctor.workload import resolve_workload

    # Parse cheap, user-typed input first so a typo fails before any probing.
    pins = tuple(parse_pin(text) for text in opts.assume)
    env_changes = dict(parse_env_assignment(a) for a in opts.assume_env)
    reads = [read_config(Path(p)) for p in opts.configs]
    workload = resolve_workload(opts.workload_file, opts.model, opts.workload_flags, [(f"config {r.path} ({r.kind})", r.workload) for r in reads])
    catalogue = load_catalogue(list(opts.rules_dirs))
    listed = [r for r in reads if r.packages is not None]
    if listed and opts.env_files:
        raise InputError(f"--config {listed[0].path} gives the installed packages: it cannot be combined with --env", hint="use one of them")
    if opts.env_files:
        doc = probe_snapshot(env_file=Path(opts.env_files[0]))
        source = str(opts.env_files[0])
    elif listed:
        doc = _snapshot_from_configs(reads)
        source = " + ".join(r.path for r in listed)
    else:
        doc = run_probe(opts.probe)
        source = "probe"
    # Variables the framework sets itself (Megatron-Core's --attention-backend and
    # --flash-attention-version). Megatron-Core sets one only where it is not exported and asserts
    # that an exported value equals its own (check_and_set_env_variable, core_v0.11.0 to
    # core_v0.19.0 language_module.py), so a value in the checked environment is kept for the rules
    # to judge; --assume-env wins over both.
    raw_env = doc.get("env")
    shell: Dict[str, Any] = raw_env if isinstance(raw_env, dict) else {}
    kept: List[str] = []
    for r in reads:
        for k, v in r.env.items():
            if k in env_changes:
                continue
            if k in shell:
                if str(shell[k]) != v:
                    kept.append(f"config {r.path} ({r.kind}): {k} is exported as {str(shell[k])[:40]!r}, not the {v!r} the framework would set; it keeps the exported value (and Megatron-Core asserts they agree), so the exported one is checked")
                continue
            env_changes[k] = v
    notes = tuple(f"config {r.path} ({r.kind}) gave: " + "; ".join(r.took) for r in reads if r.took) + tuple(
        f"config {r.path} ({r.kind}): {n}" for r in reads for n in r.notes
    ) + tuple(kept)
    inputs = Inputs(
        facts=facts_from_snapshot(doc, source=source),
        workload=workload,
        catalogue=catalogue,
        pins=pins,
        env_changes=tuple(env_changes.items()),
        snapshot=doc,
        notes=notes,
    )
    notes = notes + assumed_moves_note(inputs.facts, pins)
    return replace(inputs, facts=apply_assumed(inputs.facts, inputs), notes=notes)


def _snapshot_from_configs(reads: Sequence["ConfigRead"]) -> Dict[str, Any]:
    """A partial snapshot: the package lists (and a TE log's GPU and cuDNN) the configs give;
    everything else unknown, so rules needing it report "not evaluated"."""
    from doctor.model import SCHEMA_VERSION

    doc: Dict[str, Any] = {"schema_version": SCHEMA_VERSION, "packages": {}, "unknown": {}}
    for r in reads:
        doc["packages"].update(r.packages or {})
        for key, value in r.facts.items():
            doc[key] = value
    for section in ("gpus", "cudnn", "env"):
        if section not in doc:
            doc["unknown"][section] = "not in the --config files"
    return doc


def expand_env_files(paths: Sequence[Path]) -> Tuple[Tuple[Path, ...], Tuple[Tuple[Path, str], ...]]:
    """--env values: files as given, folders as the snapshot documents in them (recognised by
    content). Returns (files, ((skipped file, why), ...)) so the command can say what it skipped."""
    from doctor.fleet import expand_env

    files, skipped = expand_env(paths)
    return tuple(files), tuple(skipped)


# --------------------------------------------------------------------------- check


def run_check(opts: CheckOptions, observer: Optional["Observer"] = None) -> Report:
    """`attn-doctor check`: the rules evaluated once, the kernel stage where it can run, fixes
    verified by re-check, and for each fired error or warning the change `fix` would plan."""
    from doctor.rules.evaluate import diagnose

    if opts.kernels_only and (not opts.kernels or opts.env_files or opts.assume or opts.assume_env):
        raise InputError("--kernels-only runs kernels here: it cannot be combined with --no-kernels, --env or --assume")
    warm = _warm_worker(opts)
    try:
        inputs = load_inputs(opts)
        if len(opts.env_files) > 1:
            return check_fleet(inputs, opts.env_files)
        diagnosis = diagnose(inputs.catalogue, inputs.facts, inputs.workload)
        kernel_run, skipped = _kernel_stage(opts, inputs, diagnosis, observer, warm)
    finally:
        if warm is not None:
            warm.close()
    report = check(inputs, diagnosis=diagnosis, kernel_run=kernel_run, kernels_skipped=skipped)
    if opts.kernels_only:
        if kernel_run is None:  # a GPU smoke test that ran nothing must not pass
            raise InputError(f"--kernels-only: no kernel could run here ({skipped})", hint="run it on a machine with a CUDA GPU and torch")
        return kernels_only(report)
    return with_planned_fixes(report, inputs, diagnosis, opts.releases)


def _warm_worker(opts: CheckOptions) -> Optional["WarmWorker"]:
    """Start the kernel worker now, so that its torch import, CUDA start and cuDNN load
    overlap the probe, when the kernel stage will probably run: this machine, nothing assumed,
    a GPU device node and a torch this Python can import. A wrong guess costs one background
    import; an unused worker is stopped. ATTN_DOCTOR_WARM_WORKER=0 turns this off."""
    import importlib.util
    import os

    if not opts.kernels or opts.env_files or opts.assume or opts.assume_env or opts.configs:
        return None
    if os.environ.get("ATTN_DOCTOR_WARM_WORKER", "1") == "0":
        return None
    if not os.path.exists("/dev/nvidiactl") or importlib.util.find_spec("torch") is None:
        return None
    from doctor.verify.runner import WarmWorker

    try:
        return WarmWorker()
    except OSError:
        return None


def _kernel_stage(
    opts: CheckOptions, inputs: Inputs, diagnosis: "Diagnosis", observer: Optional["Observer"],
    warm: Optional["WarmWorker"] = None,
) -> Tuple[Optional["KernelRun"], Optional[str]]:
    """Run the kernel cases when torch with CUDA and a GPU are present; else say why not."""
    if not opts.kernels:
        return None, "--no-kernels"
    if opts.env_files:
        return None, "facts come from a snapshot: kernels run only where the GPU is"
    if inputs.pins or inputs.env_changes:
        return None, "--assume: the kernels would test what is installed, not what is assumed"
    from doctor import verify

    ok, reason = verify.kernels_available(inputs.facts)
    if not ok:
        return None, reason
    installed = {b.id for b in diagnosis.backends if "library not installed" not in b.reasons}
    if "sdpa.math" in installed:
        installed.add("sdpa.flex")
    cases = verify.plan_cases(inputs.workload if inputs.workload.shape_given else None, installed)
    return verify.run_cases(cases, observer=observer,
                            ask=[verify.ask_request(inputs.workload)], warm=warm), None


def check(
    inputs: Inputs,
    *,
    diagnosis: Optional["Diagnosis"] = None,
    kernel_run: Optional["KernelRun"] = None,
    kernels_skipped: Optional[str] = None,
) -> Report:
    """Backends, findings with verified fixes, and (when given) the kernels' verdicts."""
    from doctor.fix.recheck import verified_fixes
    from doctor.rules.evaluate import diagnose, order_by_stage

    if diagnosis is None:
        diagnosis = diagnose(inputs.catalogue, inputs.facts, inputs.workload)
    findings = verified_fixes(inputs.catalogue, inputs.facts, inputs.workload, diagnosis)
    contract, contract_results = _contract_findings(inputs.facts)
    startup, startup_results = _startup_findings(inputs, diagnosis)
    contract, contract_results = contract + startup, contract_results + startup_results
    report = Report(
        facts=inputs.facts,
        workload=inputs.workload,
        backends=diagnosis.backends,
        # a start-up refusal that stops the run at import goes before the rule findings behind it
        findings=tuple(order_by_stage(list(contract + findings))) if any(f.stage for f in startup) else contract + findings,
        kernels_skipped=kernels_skipped,
        assumed=tuple(str(p) for p in inputs.pins) + tuple(f"{k}={v}" if v is not None else f"unset {k}" for k, v in inputs.env_changes),
        rule_results=tuple((r.rule_id, r.status) for r in diagnosis.results) + contract_results,
        call_path=diagnosis.path,
        notes=inputs.notes,
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


def _startup_findings(inputs: Inputs, diagnosis: "Diagnosis") -> Tuple[Tuple[Finding, ...], Tuple[Tuple[str, str], ...]]:
    """The STARTUP-* findings from the start-up checks the probe read (none when it read none),
    and a not-evaluated row for a check whose read the probe could not record (facts.unknown)."""
    unknown = inputs.facts.unknown
    read = bool(inputs.facts.contracts and inputs.facts.contracts.get("startup_checks"))
    if not read and "contracts.startup" not in unknown and (inputs.facts.contracts or "contracts" not in unknown):
        return (), ()
    from doctor.probe.startup import load_checks
    from doctor.rules.startup_findings import startup_findings

    return startup_findings(inputs.facts, load_checks(), inputs.catalogue, inputs.workload, diagnosis)


def with_planned_fixes(report: Report, inputs: Inputs, diagnosis: "Diagnosis", releases: Optional[Path] = None) -> Report:
    """Lead each fired error or warning with the change `attn-doctor fix` plans for it, so the
    two commands recommend the same thing (the planner prefers a prebuilt wheel, a real
    release that installs on this Python, and one consistent set over all findings)."""
    from doctor.fix.plan import TARGET_SEVERITIES, plan_fixes
    from doctor.releases.catalogue import load_release_catalogue

    # CONTRACT-* findings come from the code, not the catalogue the planner searches over. A
    # finding whose own fixes were all dropped by the re-check (each brings up an error) is
    # still the planner's target: it may clear it another way (a release its rules allow).
    has_fixes = {r.id for r in inputs.catalogue.rules if r.fixes}
    if not any(f.status == "fired" and f.severity in TARGET_SEVERITIES and (f.fixes or f.rule_id in has_fixes)
               and not f.rule_id.startswith(("CONTRACT-", "STARTUP-")) for f in report.findings):
        return report
    plan = plan_fixes(load_release_catalogue(releases), inputs.catalogue, inputs.facts, inputs.workload, diagnosis)
    findings: List[Finding] = []
    for f in report.findings:
        mine = [c for c in plan.changes if c.rule_id == f.rule_id]
        if f.status not in ("fired", "confirmed") or f.rule_id not in plan.cleared or not mine:
            findings.append(f)
            continue
        planned, result = _planned_part(plan.changes, mine, inputs, f.rule_id, diagnosis)
        if result.new_errors:
            # this part of the plan alone moves the failure (and the plan's own changes do not
            # clear what it brings up): not shown as the way out of this finding
            findings.append(f)
            continue
        planned = replace(planned, verified=True if result.verified else None, brings_up=result.new_warnings, moves=result.moves, planned=True)
        rest = tuple(x for x in f.fixes if _action(x) != _action(planned))
        findings.append(replace(f, fixes=(planned,) + rest))
    return replace(report, findings=tuple(findings))


def _planned_part(changes: Sequence["Change"], mine: List["Change"], inputs: Inputs, rule_id: str,
                  diagnosis: "Diagnosis") -> Tuple[Fix, "Recheck"]:
    """The plan's changes for one finding, as one fix, and its re-check. A change the plan makes
    only because this one brings up another error belongs to it: transformers 4.55 over torch
    2.0.1 disables torch (HF-TORCH-TOO-OLD-FOR-TRANSFORMERS-5), so the plan moves torch too, and
    showing the upgrade alone would offer a fix that loads no model."""
    from doctor.fix.recheck import recheck

    mine = list(mine)
    while True:
        if any(p.name == "torch" for c in mine for p in c.fix.pins):
            # the torch move's companions (flash-attn rebuilt, torchvision/torchaudio for that
            # torch) belong to the change, as `fix` installs them
            mine += [c for c in changes if c.origin == "companion" and c not in mine]
        planned = _combine([c.fix for c in mine])
        result = recheck(inputs.catalogue, inputs.facts, inputs.workload, planned, (rule_id,), before=diagnosis)
        follow = [c for c in changes if c not in mine and c.rule_id in result.new_errors]
        if not follow and result.new_errors:
            # the plan clears what this part brings up with a change it filed under another
            # finding (one whose rule offers the same pin, or none): the rest of the plan, which
            # re-checked clean as a whole, belongs to this way out too (check-R5 of sample 28)
            follow = [c for c in changes if c not in mine]
        if not follow:
            return planned, result
        mine += follow


def _combine(fixes: Sequence[Fix]) -> Fix:
    if len(fixes) == 1:
        return fixes[0]
    pins: Dict[str, Pin] = {}
    env: Dict[str, Optional[str]] = {}
    workload: Dict[str, Any] = {}
    for x in fixes:
        pins.update({p.name: p for p in x.pins})
        env.update(x.env)
        workload.update(x.workload)
    return Fix(
        description="; ".join(x.description for x in fixes),
        pins=tuple(pins.values()),
        env=env,
        config=tuple(c for x in fixes for c in x.config),
        workload=workload,
        cost="; ".join(x.cost for x in fixes if x.cost) or None,
    )


def _action(fix: Fix) -> Tuple[Any, ...]:
    import json

    return (tuple(sorted(fix.pins)), tuple(sorted(fix.env.items(), key=str)), json.dumps(dict(fix.workload), sort_keys=True, default=str))


def fail_count(report: Report, fail_on: str, strict: bool) -> int:
    """How many findings are at or above the failure threshold (`--fail-on`)."""
    limit = Severity(fail_on)
    if report.hosts:  # fleet view: the worst over the hosts, plus what differs between them
        from doctor.cluster.hetero import AREA
        from doctor.fleet import host_fail_count

        fleet_wide = [f for f in report.findings if f.area == AREA and f.status != "not_evaluated"]
        return sum(host_fail_count(h, fail_on, strict) for h in report.hosts) + sum(
            1 for f in fleet_wide if f.severity.at_least(limit)
        )
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
    """Offline fleet view: every rule on every snapshot, per host (see doctor/fleet.py)."""
    from doctor.fleet import label_snapshots, merge_fleet

    docs = label_snapshots([(str(p), probe_snapshot(env_file=Path(p))) for p in env_files])
    reports = []
    for label, path, doc in docs:
        facts = apply_assumed(facts_from_snapshot(doc, source=path), inputs)
        reports.append((label, path, check(replace(inputs, facts=facts, snapshot=doc))))
    return merge_fleet(reports, docs)


def assumed_moves_note(facts: Facts, pins: Sequence[Pin]) -> Tuple[str, ...]:
    """'--assume ms-swift==3.7.0: pip would also move transformers 4.57.1 -> 4.55.4; assumed too'."""
    from doctor.fix.recheck import moved_text

    moved = moved_text(facts, Fix("--assume", pins=tuple(pins))) if pins else ()
    if not moved:
        return ()
    return (f"--assume {' '.join(str(p) for p in pins)}: pip would also move {', '.join(moved)}; assumed too",)


def apply_assumed(facts: Facts, inputs: Inputs) -> Facts:
    """`facts` with the inputs' --assume pins and --assume-env settings applied; a pin moves
    the installed packages pip would move to satisfy it, as `pip install` would."""
    from doctor.assume import apply_env, apply_pins
    from doctor.fix.recheck import with_pip_moves

    if inputs.pins:
        facts = apply_pins(facts, with_pip_moves(facts, inputs.pins))
    if inputs.env_changes:
        facts = apply_env(facts, dict(inputs.env_changes))
    return facts


# --------------------------------------------------------------------------- fix


def run_fix(opts: FixOptions) -> "FixPlan":
    """`attn-doctor fix`: the least change that clears the fired errors and warnings."""
    from doctor.fix.plan import plan_fixes, with_inputs
    from doctor.releases.catalogue import load_release_catalogue
    from doctor.rules.evaluate import diagnose

    if len(opts.check.env_files) > 1:
        raise InputError("fix plans for one environment: pass one --env")
    if opts.check.releases is not None and not opts.check.releases.is_dir():
        raise InputError("release catalogue folder not found", path=str(opts.check.releases))
    inputs = load_inputs(opts.check)
    rel = load_release_catalogue(opts.check.releases)
    diagnosis = diagnose(inputs.catalogue, inputs.facts, inputs.workload)
    plan = plan_fixes(rel, inputs.catalogue, inputs.facts, inputs.workload, diagnosis)
    if opts.online and plan.pins:
        from dataclasses import replace as _replace

        from doctor.fix.online import pip_dry_run

        sdists = [p.name for p in plan.pins if (rel.packages.get(p.name) and rel.packages[p.name].get(p.version) and rel.packages[p.name].get(p.version).kind == "sdist")]  # type: ignore[union-attr]
        if any(p.name == "transformer-engine" and "pytorch" in p.extras for p in plan.pins):
            sdists.append("transformer-engine")  # its [pytorch] extra is an sdist (transformer_engine_torch)
        py = inputs.facts.python.version
        verdict = pip_dry_run(plan.pins, sdists, ".".join(py.split(".")[:2]) if py else None)
        note = verdict.message + (f"; not asked (builds from source): {', '.join(verdict.skipped)}" if verdict.skipped else "")
        plan = _replace(plan, notes=plan.notes + (f"--online: {note}",))
    return with_inputs(plan, opts.verify_args)


# --------------------------------------------------------------------------- rules


def lint_rules(paths: Sequence[Path]) -> Tuple[List["CaseOutcome"], int]:
    """Load the built-in catalogue plus `paths` (validated on load), run the rule test cases
    of the rules in `paths` (all rules when none), return (failures, cases run)."""
    from doctor.resources import rules_dir
    from doctor.rules.cases import run_rule_cases
    from doctor.rules.loader import check_pins_exist, load_catalogue

    builtin = rules_dir().resolve()
    extra = [p for p in paths if builtin not in (Path(p).resolve(), *Path(p).resolve().parents)]
    cat = load_catalogue(extra, builtin=True, use_cache=False, shadow=True)
    check_pins_exist(cat.rules)
    own = [Path(p).resolve() for p in paths]

    def mine(rule: Any) -> bool:
        where = Path(rule.path).resolve()
        return not own or any(where == p or p in where.parents for p in own)

    outcomes = run_rule_cases(cat, mine)
    return [o for o in outcomes if not o.ok], len(outcomes)
