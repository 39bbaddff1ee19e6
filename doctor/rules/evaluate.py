"""Evaluate the catalogue: which backend each framework can use and would pick, then findings.

1. A framework counts when its `installed` condition holds. Below the release its `covers:`
   names, nothing about it is decided: its backends are undecided and the rules that would
   switch them off are not evaluated (a finding says the install is older than what is checked).
2. A backend is available when its library is installed and no `disables` rule fires;
   an undecidable disabling rule makes availability unknown, never "available".
3. Each framework picks the first available backend in its preference order for this GPU.
4. Finding rules then see facts, workload and backend availability; a finding with a `stage`
   is listed behind the errors of earlier stages that stop the run before it (docs/rules.md).
(Fixes are verified by re-evaluating with them applied: doctor.fix.recheck.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.model import STAGE_RANK, BackendStatus, Facts, Finding, FindingStatus, Fix, Severity, Workload
from doctor.rules.callpath import CallPath, infer
from doctor.rules.conditions import FALSE, Context, Outcome, describe, evaluate
from doctor.rules.loader import WHOLE_PLACEHOLDER, Backend, Catalogue, Framework, Rule


@dataclass(frozen=True)
class RuleResult:
    rule_id: str
    status: str  # fired | passed | not_evaluated (a rule's verdict, before kernels)
    missing: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Diagnosis:
    backends: Tuple[BackendStatus, ...]
    findings: Tuple[Finding, ...]
    results: Tuple[RuleResult, ...]  # every rule, for --strict, lint and the rule tests
    selections: Tuple[Tuple[str, Optional[str]], ...]  # framework id -> selected backend id
    path: CallPath  # who runs attention (doctor.rules.callpath)
    has_backend: Tuple[Tuple[str, Optional[bool]], ...] = ()  # framework id -> some backend available

    def context(self, facts: Facts, workload: Workload) -> Context:
        """The context the rules were evaluated in, for these facts and this workload (a fix's
        `when:` or placeholders evaluated later see the same backends and call path)."""
        return Context(facts, workload, {b.id: b for b in self.backends}, dict(self.selections), dict(self.has_backend), self.path)

    def result(self, rule_id: str) -> RuleResult:
        for r in self.results:
            if r.rule_id == rule_id:
                return r
        raise KeyError(rule_id)


_PLACEHOLDER = re.compile(r"\{([a-z_]+):([^{}]+)\}|\{([A-Za-z0-9_.\-]+)\}")


def render_workload(changes: Mapping[str, Any], ctx: Context) -> Dict[str, Any]:
    """A fix's workload changes for these facts: a value that is one whole placeholder
    (`num_kv_heads: "{workload.num_heads}"`, "repeat the key/value heads") takes that fact's
    value, typed; a change whose fact is unknown or unset is left out (the fix then stays
    advice unless it changes something else)."""
    out: Dict[str, Any] = {}
    for key, value in changes.items():
        m = WHOLE_PLACEHOLDER.match(value) if isinstance(value, str) else None
        if m is None:
            out[key] = value
            continue
        try:
            v = ctx.value(m.group(1))
        except (KeyError, AttributeError):
            continue
        if v.known and v.value is not None:
            out[key] = v.value
    return out


def render(template: str, ctx: Context) -> str:
    def sub(m: "re.Match[str]") -> str:
        func, arg, path = m.group(1), m.group(2), m.group(3)
        if func == "reasons":  # every backend of a framework with why it is out, or one backend's reasons
            arg, _, only = arg.partition(":")  # {reasons:BACKEND:RULE,RULE}: only what those rules say
            # a backend, or a family's member (te.fa4 inside te.flash)
            one = ctx.backends.get(arg) or next((m for b in ctx.backends.values() for m in b.members if m.id == arg), None)
            if one is not None and only:
                named = {r.strip() for r in only.split(",")}
                return "; ".join(dict.fromkeys(why for rid, why in one.rule_reasons if rid in named)) or "available"
            if one is not None:
                return "; ".join(one.reasons) or "available"
            parts = [
                f"\n  - {b.name}: {'; '.join(b.reasons) or 'available'}"
                for b in ctx.backends.values()
                if b.framework == arg
            ]
            return "".join(parts) or "no backends"
        if func == "selected":
            sel = ctx.selections.get(arg)
            return ctx.backends[sel].name if sel else "none"
        if func == "first":  # the first of several facts that has a value (an error read at one of two imports)
            for alt in arg.split("|"):
                try:
                    got = ctx.value(alt.strip())
                except (KeyError, AttributeError):
                    continue
                if got.known and got.value not in (None, ""):
                    return str(got.value)
            return "unknown"
        if path is None:
            return m.group(0)
        try:
            v = ctx.value(path)
        except (KeyError, AttributeError):
            return m.group(0)
        if not v.known:
            return "unknown"
        if v.value is None:
            return "unset" if path.startswith("env.") else "none"
        if isinstance(v.value, bool):
            return "yes" if v.value else "no"
        if path == "gpu.sm":
            return f"sm{v.value}"
        return str(v.value)

    return _PLACEHOLDER.sub(sub, template)


def _uncovered(fw: Framework, ctx: Context) -> Optional[str]:
    """Why this framework's install is older than what the catalogue checks, or None."""
    cov = fw.covers
    # exactly the test TE-OLDER-THAN-COVERED makes, so the gate never closes without the warning
    if cov is None or evaluate(cov.below, ctx).value is not True:
        return None
    return f"{fw.name} {render('{package.' + cov.package + '}', ctx)} is older than {cov.since}, the oldest release attn-doctor checks"


def _not_checked(b: Backend, fw_id: str, short: str, why: str) -> BackendStatus:
    """A backend of a framework older than the catalogue covers: undecided, with the reason."""
    members = tuple(_not_checked(m, fw_id, short, why) for m in b.members)
    return BackendStatus(id=b.id, framework=fw_id, name=b.name, available=None, reasons=(why,), members=members, not_covered=short)


def _backends(
    cat: Catalogue, facts: Facts, workload: Workload
) -> Tuple[Dict[str, BackendStatus], Dict[str, Optional[str]], Dict[str, Optional[bool]], Dict[str, Outcome]]:
    ctx = Context(facts, workload)
    by_backend: Dict[str, List[Rule]] = {}
    for r in cat.rules:
        if r.disables:
            by_backend.setdefault(r.disables, []).append(r)
    statuses: Dict[str, BackendStatus] = {}
    selections: Dict[str, Optional[str]] = {}
    has_backend: Dict[str, Optional[bool]] = {}
    outcomes: Dict[str, Outcome] = {}
    for fw in cat.frameworks:
        fw_in = evaluate(fw.installed, ctx)
        if fw_in.value is False:
            continue
        short = _uncovered(fw, ctx)
        if short is not None and fw.covers is not None:
            why = f"{short} ({fw.covers.why})"
            for b in fw.backends:
                statuses[b.id] = _not_checked(b, fw.id, short, why)
                for bid in (b.id, *(m.id for m in b.members)):
                    for rule in by_backend.get(bid, ()):
                        outcomes[rule.id] = Outcome(None, (why,))
            selections[fw.id] = None
            has_backend[fw.id] = None
            continue
        for b in fw.backends:
            statuses[b.id] = _status(b, fw.id, fw_in, by_backend, ctx, outcomes)
        order: Sequence[str] = ()
        for sel in fw.selection:
            if sel.when is None or evaluate(sel.when, ctx).value is True:
                order = sel.order
                break
        chosen = None
        for bid in order:  # an undecided backend ahead of the first available one: undecided
            if statuses[bid].available is None:
                break
            if statuses[bid].available:
                chosen = bid
                break
        selections[fw.id] = chosen
        states = [statuses[bid].available for bid in order]
        has_backend[fw.id] = True if any(states) else (None if None in states else False)
        if chosen:
            statuses[chosen] = replace(statuses[chosen], selected=True)
    return statuses, selections, has_backend, outcomes


def _own(
    b: Backend, fw_in: Outcome, by_backend: Dict[str, List[Rule]], ctx: Context, outcomes: Dict[str, Outcome], skip_uninstalled: bool = False
) -> Tuple[Optional[bool], List[str], List[str], List[Tuple[str, str]]]:
    """A backend's own verdict: installed and no `disables` rule fired. Returns (installed,
    reasons it is out, why it is undecided, (id, reason) of each rule that fired)."""
    reasons: List[str] = []
    unknown: List[str] = []
    fired: List[Tuple[str, str]] = []
    if fw_in.value is None:
        unknown.extend(fw_in.missing)
    inst = evaluate(b.installed, ctx) if b.installed else Outcome(True)
    if inst.value is False:
        reasons.append("library not installed")
    elif inst.value is None:
        unknown.extend(inst.missing)
    gone = False  # an `absent` rule fired: the backend is not in this build, its filters are moot
    for rule in sorted(by_backend.get(b.id, ()), key=lambda r: not r.absent):
        if (skip_uninstalled and inst.value is False) or gone:  # a member's rules are moot without it
            outcomes[rule.id] = Outcome(False)
            continue
        out = evaluate(rule.when, ctx)
        gone = rule.absent and out.value is True
        outcomes[rule.id] = out
        if out.value is True:
            reasons.append(render(rule.message, ctx))
            fired.append((rule.id, reasons[-1]))
        elif out.value is None:
            unknown.append(f"{rule.id} not evaluated ({'; '.join(out.missing)})")
    return inst.value, reasons, unknown, fired


def _verdict(reasons: List[str], unknown: List[str]) -> Tuple[Optional[bool], List[str]]:
    if reasons:
        return False, reasons
    if unknown:
        return None, unknown
    return True, []


def _status(b: Backend, fw_id: str, fw_in: Outcome, by_backend: Dict[str, List[Rule]], ctx: Context, outcomes: Dict[str, Outcome]) -> BackendStatus:
    """One backend's availability. A family (a backend with `members`) is available when no
    rule disables the family itself and its members, joined as the first `compose` entry
    whose `when` holds says, leave one usable: every `requires` member installed and at
    least one `any_of` member available. Its reasons then name each member's state."""
    if not b.members:
        _, reasons, unknown, fired = _own(b, fw_in, by_backend, ctx, outcomes)
        available, why = _verdict(reasons, unknown)
        return BackendStatus(id=b.id, framework=fw_id, name=b.name, available=available, reasons=tuple(dict.fromkeys(why)),
                             rule_ids=tuple(i for i, _ in fired), rule_reasons=tuple(fired), undecided=tuple(dict.fromkeys(unknown)) if available is False else ())
    members: Dict[str, BackendStatus] = {}
    installed: Dict[str, Optional[bool]] = {}
    for m in b.members:
        inst, reasons, unknown, fired = _own(m, Outcome(True), by_backend, ctx, outcomes, skip_uninstalled=True)
        installed[m.id] = inst
        available, why = _verdict(reasons, unknown)
        if inst is False:
            why = ["not installed"]
        members[m.id] = BackendStatus(id=m.id, framework=fw_id, name=m.name, available=available, reasons=tuple(dict.fromkeys(why)),
                                      rule_ids=tuple(i for i, _ in fired), rule_reasons=tuple(fired),
                                      undecided=tuple(dict.fromkeys(unknown)) if available is False and inst is not False else ())
    _, reasons, unknown, fired = _own(b, fw_in, by_backend, ctx, outcomes)
    rule = next((c for c in b.compose if c.when is None or evaluate(c.when, ctx).value is True), b.compose[-1])
    used = [members[mid] for mid in rule.any_of]
    if all(installed[mid] is False for mid in members):
        reasons.append("library not installed")
    else:
        for mid in rule.requires:
            if installed[mid] is False:
                reasons.append(f"{members[mid].name} not installed" + (f": {rule.note}" if rule.note else ""))
            elif installed[mid] is None:
                unknown.append(f"{members[mid].name}: " + "; ".join(members[mid].reasons))
        if not any(m.available for m in used):
            if any(m.available is None for m in used):
                unknown.extend(f"{m.name}: {'; '.join(m.reasons)}" for m in used if m.available is None)
            # every member is out too: say why for each installed one, so that fixing a
            # family-wide reason does not hide the next blocker
            for st in members.values():
                if installed[st.id] is False or st.available is None:
                    continue
                state = "; ".join(st.reasons) if st.available is False else f"not used by {b.name} here ({rule.note or 'this release does not use it'})"
                reasons.append(f"{st.name} out: {state}")
                fired.extend(st.rule_reasons)
    available, why = _verdict(reasons, unknown)
    return BackendStatus(
        id=b.id,
        framework=fw_id,
        name=b.name,
        available=available,
        reasons=tuple(dict.fromkeys(why)),
        rule_ids=tuple(dict.fromkeys(i for i, _ in fired)),
        rule_reasons=tuple(dict.fromkeys(fired)),
        undecided=tuple(dict.fromkeys(unknown)) if available is False else (),
        members=tuple(members.values()),
    )


def unsure_note(fix: Fix) -> str:
    """Why a fix with a `when:` was offered though it may not apply: what it is for, and the
    facts that could not be read ("for gpu.sm >= 80; could not check gpu.sm: no GPU found")."""
    return f"it is for {describe(fix.when)}; could not check {'; '.join(fix.unsure)}"


def offered_fixes(fixes: Sequence[Fix], ctx: Context) -> List[Tuple[Fix, Tuple[str, ...]]]:
    """The fixes that apply here, each with the facts that left its `when:` undecided: a fix
    whose condition is false (a Linux-only wheel on Windows) is not offered; an undecided one is."""
    out: List[Tuple[Fix, Tuple[str, ...]]] = []
    for f in fixes:
        if f.when is None:
            out.append((f, ()))
            continue
        got = evaluate(f.when, ctx)
        if got.value is not False:
            out.append((f, () if got.value else tuple(dict.fromkeys(got.missing))))
    return out


def rendered_fixes(fixes: Sequence[Fix], ctx: Context) -> Tuple[Fix, ...]:
    """A rule's fixes as a finding carries them: only those offered here, placeholders filled,
    each with the facts that left its `when:` undecided."""
    return tuple(
        replace(
            f,
            description=render(f.description, ctx),
            cost=render(f.cost, ctx) if f.cost else None,
            config=tuple(render(c, ctx) for c in f.config),
            workload=render_workload(f.workload, ctx),
            unsure=unsure,
        )
        for f, unsure in offered_fixes(fixes, ctx)
    )


def order_by_stage(findings: List[Finding]) -> List[Finding]:
    """Each fired finding with a stage is `behind` every fired error at an earlier stage: that
    error stops the run first, and this one is reached once it is fixed. Findings without a
    stage are not ordered (they must read or list alongside the errors they fire with)."""
    first = [(STAGE_RANK[f.stage], f.rule_id) for f in findings if f.status == "fired" and f.severity == Severity.ERROR and f.stage]
    if not first:
        return findings
    out: List[Finding] = []
    for f in findings:
        if f.status == "fired" and f.stage:
            before = tuple(rid for rank, rid in sorted(first) if rank < STAGE_RANK[f.stage])
            if before:
                f = replace(f, behind=before)
        out.append(f)
    return out


def diagnose(cat: Catalogue, facts: Facts, workload: Workload) -> Diagnosis:
    statuses, selections, has_backend, outcomes = _backends(cat, facts, workload)
    path = infer(facts, workload, selections)
    ctx = Context(facts, workload, statuses, selections, has_backend, path)
    loaded = {r.id for r in cat.rules}
    for r in cat.rules:  # a partial catalogue (the loader allows it only without the built-in set)
        for dep in r.reads:
            if dep not in loaded:
                ctx.findings[dep] = FALSE  # a rule that is not loaded never fires
    findings: List[Finding] = []
    by_id: Dict[str, RuleResult] = {}
    for rule in cat.evaluation_order:
        if rule.disables:
            got = outcomes.get(rule.id)
            if got is None:  # framework absent: nothing to disable
                by_id[rule.id] = RuleResult(rule.id, "passed")
            else:
                verdict = "not_evaluated" if got.value is None else ("fired" if got.value else "passed")
                by_id[rule.id] = RuleResult(rule.id, verdict, got.missing)
            continue
        out = evaluate(rule.when, ctx)
        ctx.findings[rule.id] = out
        if out.value is False:
            by_id[rule.id] = RuleResult(rule.id, "passed")
            continue
        status: FindingStatus = "fired" if out.value else "not_evaluated"
        by_id[rule.id] = RuleResult(rule.id, status, out.missing)
        findings.append(
            Finding(
                rule_id=rule.id,
                severity=rule.severity or Severity.INFO,
                title=render(rule.title, ctx),
                message=render(rule.message, ctx),
                status=status,
                fixes=rendered_fixes(rule.fixes, ctx),
                sources=rule.sources,
                missing=tuple(dict.fromkeys(out.missing)),
                area=rule.area,
                kernels=rule.kernels,
                stage=rule.stage,
            )
        )
    findings = order_by_stage(findings)
    findings.sort(key=lambda f: (f.status != "fired", f.severity.rank, STAGE_RANK.get(f.stage or "", len(STAGE_RANK)), f.rule_id))
    return Diagnosis(
        backends=tuple(statuses.values()),
        findings=tuple(findings),
        results=tuple(by_id[r.id] for r in cat.rules),
        selections=tuple(selections.items()),
        path=path,
        has_backend=tuple(has_backend.items()),
    )
