"""`check --format markdown`: for $GITHUB_STEP_SUMMARY and bug reports."""

from __future__ import annotations

from typing import List

from doctor import __version__
from doctor.model import Report
from doctor.rules.evaluate import unsure_note
from doctor.report.summary import area_lines, backends_by_framework, behind_note, counts, describe_workload

_ICON = {"ok": "✅", "warning": "⚠️", "error": "❌", "info": "ℹ️", "unknown": "❔"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_check_markdown(report: Report) -> str:
    c = counts(report)
    out: List[str] = [
        f"## attn-doctor {__version__}: {c['error']} error(s), {c['warning']} warning(s)",
        "",
        f"Facts: `{report.facts.source}` · workload: {describe_workload(report.workload)} ({report.workload.source})",
    ]
    if report.call_path is not None:
        out.append(f"Call path: {report.call_path.describe(report.facts.packages)}")
    out += [f"- {note}" for note in report.notes]
    if report.assumed:
        out.append(f"Assuming: `{', '.join(report.assumed)}`")
    if report.hosts:
        from doctor.fleet import host_lines

        out += ["", "Per host:", ""] + [f"- {_cell(line)}" for line in host_lines(report)]
    out += ["", "| | Area | Status |", "|---|---|---|"]
    for a in area_lines(report):
        out.append(f"| {_ICON[a.mark]} | {_cell(a.title)} | {_cell(a.detail)} |")
    fired = [f for f in report.findings if f.status != "not_evaluated"]
    if fired:
        out += ["", "### Findings", ""]
    for f in fired:
        out.append(f"#### {_ICON.get(f.severity, '')} `{f.rule_id}` {f.title}")
        out.append("")
        out.append(f.message)
        out.append("")
        if f.behind:
            out += [f"_{behind_note(f)}_", ""]
        for e in f.evidence:
            out.append(f"- evidence: {e}")
        for fix in f.fixes:
            line = f"- **Fix:** {fix.description}"
            if fix.planned:
                line += " _(the plan of `attn-doctor fix`)_"
            if fix.verified:
                line += " _(verified by re-check)_"
            out.append(line)
            if fix.pins:
                out.append(f"  `pip install {' '.join(str(p) for p in fix.pins)}`")
            for k, v in fix.env.items():
                out.append(f"  `export {k}={v}`")
            for cfg in fix.config:
                out.append(f"  {cfg}")
            if fix.cost:
                out.append(f"  _cost: {fix.cost}_")
            if fix.moves:
                out.append(f"  _pip also moves {', '.join(fix.moves)}_")
            if fix.brings_up:
                out.append(f"  _brings up warning {', '.join(fix.brings_up)}_")
            if fix.unsure:
                out.append(f"  _may not apply here: {unsure_note(fix)}_")
        if f.sources:
            out.append("")
            out.append("Sources: " + ", ".join(f"<{s}>" for s in f.sources))
        out.append("")
    out += ["", "<details><summary>Attention backends</summary>", "", "| Framework | Backend | State | Why |", "|---|---|---|---|"]
    for fw, bs in backends_by_framework(report).items():
        for b in bs:
            state = "selected" if b.selected else "available" if b.available else "unknown" if b.available is None else "out"
            out.append(f"| {fw} | {_cell(b.name)} | {state} | {_cell('; '.join(b.reasons))} |")
    out += ["", "</details>", ""]
    return "\n".join(out)
