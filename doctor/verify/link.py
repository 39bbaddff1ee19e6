"""Join the kernel verdicts to the static predictions.

- A finding whose rule names kernel cases (`kernels:` globs) is `confirmed` when a matching
  case failed or was refused, `refuted` when every matching case passed (observed working
  here: downgraded to info), `not_run` when no matching case ran.
- A backend's kernel evidence: refusals the backend rules predicted are "confirmed"; a refusal
  of a backend the rules called available is shown as a mismatch (`check -v`).
- A case that failed (wrong numbers), crashed or timed out where no rule predicted it becomes a
  finding of its own with the library's error text.
- Per-backend timings for the workload shape and the fastest backend that passed.
"""

from __future__ import annotations

from dataclasses import replace
from fnmatch import fnmatchcase
from typing import Dict, List, Optional, Sequence, Tuple

from doctor.model import BackendStatus, CaseResult, Finding, Report, Severity, Workload
from doctor.verify.asked import asked_lines
from doctor.rules.loader import Catalogue
from doctor.verify.cases import CaseSpec, workload_for_case
from doctor.verify.results import KernelRun

BAD = ("failed", "crashed", "timeout")
REFUSED = ("unsupported",)
# Backends whose kernel adapters have run on a real GPU (docs/gpu-runs/). An unpredicted failure
# of any other adapter may be the harness's own fault, so it is reported as a warning that says
# so instead of failing a CI gate.
GPU_VALIDATED = ("sdpa.flash", "sdpa.efficient", "sdpa.cudnn", "sdpa.math", "sdpa.flex", "flash_attn.fa4",
                 "flash_attn.fa2", "te.flash", "te.fused", "te.unfused")


def _matches(case_id: str, patterns: Sequence[str]) -> bool:
    return any(fnmatchcase(case_id, p) for p in patterns)


def _describe(c: CaseResult) -> str:
    extra = f" (max rel error {c.max_rel_error:.3g})" if c.max_rel_error is not None and c.status == "failed" else ""
    detail = f": {c.detail.strip()[:240]}" if c.detail else ""
    return f"{c.id} {c.status}{extra}{detail}"


def link_kernels(report: Report, cat: Catalogue, kernel_run: KernelRun) -> Report:
    results: Tuple[CaseResult, ...] = tuple(kernel_run.results)
    explained: set = set()
    findings: List[Finding] = []
    for f in report.findings:
        patterns = f.kernels
        if not patterns or f.status != "fired":
            findings.append(f)
            continue
        cases = [c for c in results if _matches(c.id, patterns) and c.status != "skipped"]
        if not cases:
            findings.append(replace(f, status="not_run"))
            continue
        bad = [c for c in cases if c.status in BAD + REFUSED]
        explained.update(c.id for c in bad)
        if bad:
            findings.append(replace(f, status="confirmed", evidence=tuple(_describe(c) for c in bad[:4])))
        else:
            findings.append(
                replace(
                    f,
                    status="refuted",
                    severity=Severity.INFO,
                    evidence=tuple(_describe(c) for c in cases[:4]) + ("observed working here: the static rule may be stale",),
                )
            )
    backends: List[BackendStatus] = []
    specs = {spec.id: spec for spec in kernel_run.cases}
    predict = _Predictor(cat, report)
    for b in report.backends:
        cases = [c for c in results if c.backend == b.id and c.status != "skipped"]
        ev: List[str] = []
        for c in cases:
            spec = specs.get(c.id)
            if spec is None:
                continue
            # What the backend rules say for this case's own shape (not the workload's).
            status = predict.backend(spec, b.id)
            if status is None or status.available is None:
                continue
            why = ", ".join(status.rule_ids)
            if not status.available and c.status in REFUSED + BAD:
                ev.append(f"confirmed ({why}): {_describe(c)}")
                explained.add(c.id)
            elif not status.available and c.status == "passed":
                ev.append(f"refuted ({why} said it is out, the case passed): {c.id}")
            elif status.available and c.status in REFUSED:
                ev.append(f"mismatch (the rules expected it to work): {_describe(c)}")
        backends.append(replace(b, evidence=tuple(ev)) if ev else b)
    from doctor.rules.conditions import Context
    from doctor.rules.evaluate import render, rendered_fixes

    # the context check evaluated in (backends, call path), so a fix's `when:` reads the same
    ctx = Context(report.facts, report.workload, {b.id: b for b in report.backends}, path=report.call_path)
    known = {r.id: r for r in cat.rules if r.kernels}
    for c in results:
        if c.id in explained or c.status not in BAD:
            continue
        # A catalogue rule about this case that did not fire for this workload: name it, with
        # its fixes, as a warning (the defect is real here, the workload does not reach it).
        rule = next((r for r in known.values() if _matches(c.id, r.kernels)), None)
        if rule is not None:
            findings.append(
                Finding(
                    rule_id=f"KERNEL-{rule.id}",
                    severity=Severity.WARNING,
                    title=f"{render(rule.title, ctx)} (seen here in kernel case {c.id})",
                    message=(
                        f"The kernel case {c.id} {c.status} on this machine, as rule {rule.id} describes; "
                        f"that rule did not fire for this workload, so it matters only for workloads that "
                        f"use this path. {c.detail.strip()[:300]}"
                    ),
                    status="confirmed",
                    area="kernels",
                    fixes=rendered_fixes(rule.fixes, ctx),
                    sources=rule.sources,
                    evidence=(_describe(c),),
                )
            )
            continue
        validated = c.backend in GPU_VALIDATED
        caveat = "" if validated else (
            f" attn-doctor's {c.backend} adapter has not yet run on a real GPU (docs/gpu-runs/): "
            "this may be the harness's fault; please report it with the case id."
        )
        findings.append(
            Finding(
                rule_id=f"KERNEL-{c.backend.upper().replace('.', '-').replace('_', '-')}-{c.status.upper()}",
                severity=Severity.ERROR if validated else Severity.WARNING,
                title=f"{c.backend} {'gave wrong results' if c.status == 'failed' else c.status} in kernel case {c.id}",
                message=(
                    f"No rule predicted this: the kernel case {c.id} {c.status} on this machine. "
                    + (c.detail.strip()[:400] if c.detail else "")
                    + caveat
                ),
                status="confirmed",
                area="kernels",
                sources=(),
                evidence=(_describe(c),),
            )
        )
    # Deduplicate generated findings by id (one per backend and status), keep the first case.
    seen: Dict[str, int] = {}
    merged: List[Finding] = []
    for f in findings:
        if f.rule_id.startswith("KERNEL-") and f.rule_id in seen:
            i = seen[f.rule_id]
            merged[i] = replace(merged[i], evidence=merged[i].evidence + f.evidence)
            continue
        seen[f.rule_id] = len(merged)
        merged.append(f)
    extra_results = tuple((f.rule_id, "fired") for f in merged if f.rule_id.startswith("KERNEL-"))
    return replace(
        report,
        findings=tuple(merged),
        backends=tuple(backends),
        kernels=results,
        rule_results=report.rule_results + extra_results,
        kernel_summary=_timings(kernel_run) + asked_lines(report, kernel_run),
    )


class _Predictor:
    """The backend model evaluated for one kernel case's shape, memoised per shape."""

    def __init__(self, cat: Catalogue, report: Report) -> None:
        self.cat = cat
        self.report = report
        self.memo: Dict[Workload, Dict[str, BackendStatus]] = {}

    def backend(self, spec: CaseSpec, backend_id: str) -> Optional[BackendStatus]:
        from doctor.rules.evaluate import diagnose

        w = workload_for_case(spec, self.report.workload)
        if w not in self.memo:  # one diagnosis per distinct shape (Workload is frozen, hashable)
            self.memo[w] = {b.id: b for b in diagnose(self.cat, self.report.facts, w).backends}
        return self.memo[w].get(backend_id)


def _timings(kernel_run: KernelRun) -> Tuple[Tuple[str, str], ...]:
    """Per shape: the fastest backend that passed, then every timed backend."""
    lines: List[Tuple[str, str]] = []
    for t in kernel_run.fastest:
        tf = f", {t.tflops:.1f} TFLOP/s" if t.tflops else ""
        lines.append((f"fastest that passed at {t.shape}", f"{t.backend} {t.ms:.3f} ms{tf}"))
    for t in kernel_run.timings:
        tf = f", {t.tflops:.1f} TFLOP/s" if t.tflops else ""
        note = "" if t.correct else " (failed a correctness case)"
        lines.append((f"{t.backend} at {t.shape}", f"{t.ms:.3f} ms{tf}{note}"))
    return tuple(lines)
