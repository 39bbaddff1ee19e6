"""`check --format junit`: one test case per rule, for CI dashboards.

A fired rule at or above --fail-on is a failure, a fired rule below it passes with its
message in system-out, a rule that could not be evaluated is skipped (a failure with
--strict), kernel cases are test cases of their own.
"""

from __future__ import annotations

from typing import Dict
from xml.sax.saxutils import escape, quoteattr

from doctor.rules.evaluate import unsure_note
from doctor.model import Finding, Report, Severity
from doctor.report.summary import behind_note


def render_check_junit(report: Report, *, fail_on: str = "error", strict: bool = False) -> str:
    by_id: Dict[str, Finding] = {f.rule_id: f for f in report.findings}
    cases = []
    failures = skipped = 0
    for rid, status in report.rule_results:
        f = by_id.get(rid)
        body = ""
        if f is not None and status == "fired" and f.status != "refuted" and f.severity.at_least(Severity(fail_on)):
            failures += 1
            fixes = "; ".join(
                x.description + (f" (may not apply here: {unsure_note(x)})" if x.unsure else "") for x in f.fixes
            ) or "see sources"
            after = behind_note(f) + "\n" if f.behind else ""
            body = f"<failure type={quoteattr(f.severity)} message={quoteattr(f.title)}>{escape(f.message)}\n{escape(after)}Fix: {escape(fixes)}</failure>"
        elif f is not None and status == "fired":
            body = f"<system-out>{escape(f'{f.severity}: {f.message}')}</system-out>"
        elif status == "not_evaluated":
            missing = "; ".join(f.missing) if f else "facts unknown"
            if strict:
                failures += 1
                body = f"<failure type=\"not_evaluated\" message={quoteattr('not evaluated: ' + missing)}/>"
            else:
                skipped += 1
                body = f"<skipped message={quoteattr('not evaluated: ' + missing)}/>"
        cases.append(f"    <testcase classname=\"attn-doctor.rules\" name={quoteattr(rid)}>{body}</testcase>")
    for k in report.kernels:
        body = ""
        if k.status in ("failed", "crashed", "timeout"):
            failures += 1
            body = f"<failure type={quoteattr(k.status)} message={quoteattr(k.detail[:200])}/>"
        elif k.status in ("unsupported", "skipped"):
            skipped += 1
            body = f"<skipped message={quoteattr(k.detail[:200])}/>"
        cases.append(f"    <testcase classname=\"attn-doctor.kernels\" name={quoteattr(k.id)}>{body}</testcase>")
    head = (
        f"<testsuite name=\"attn-doctor\" tests=\"{len(cases)}\" failures=\"{failures}\" "
        f"errors=\"0\" skipped=\"{skipped}\">"
    )
    return "\n".join(['<?xml version="1.0" encoding="UTF-8"?>', "<testsuites>", "  " + head, *cases, "  </testsuite>", "</testsuites>", ""])
