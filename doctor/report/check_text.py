"""`check` as text, in the style of `flutter doctor`: one line per area, then each finding
with what breaks, why, and the fix. Rendered with rich to a string; colour only when asked.
"""

from __future__ import annotations

import io
from typing import List

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.text import Text

from doctor import __version__
from doctor.model import Finding, Report
from doctor.rules.evaluate import unsure_note
from doctor.report.summary import area_lines, backends_by_framework, behind_note, counts, describe_workload

MARKS = {
    "ok": ("[green]✓[/]", "✓"),
    "warning": ("[yellow]![/]", "!"),
    "error": ("[red]✗[/]", "✗"),
    "unknown": ("[dim]?[/]", "?"),
}
SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _finding(f: Finding, verbose: bool) -> List[object]:
    if f.status == "not_evaluated":
        head = f"[dim]?[/] [bold]{escape(f.rule_id)}[/] [dim](not evaluated)[/] {escape(f.title)}"
    else:
        style = SEV_STYLE.get(f.severity, "")
        label = f.severity.upper()
        if f.status in ("confirmed", "refuted", "not_run"):
            label += f", {f.status.replace('_', ' ')} by kernels"
        head = f"[{style}]{label}[/] [bold]{escape(f.rule_id)}[/]  {escape(f.title)}"
    out: List[object] = [head, Padding(Text(f.message), (0, 0, 0, 4))]
    if f.behind:
        out.append(Padding(Text(behind_note(f), style="dim"), (0, 0, 0, 4)))
    if f.status == "not_evaluated":
        for m in f.missing[:3]:
            out.append(f"    [dim]unknown: {escape(m)}[/]")
    for e in f.evidence:
        out.append(f"    [dim]evidence:[/] {escape(e)}")
    if f.status != "not_evaluated":
        if not f.fixes:
            out.append("    [dim]No automatic fix: see the sources.[/]")
        for i, fix in enumerate(f.fixes):
            lead = "Fix:" if i == 0 else "or: "
            actions = []
            if fix.pins:
                actions.append("pip install " + " ".join(f'"{p}"' for p in fix.pins))
            for k, v in fix.env.items():
                actions.append(f"export {k}={v}")
            actions.extend(fix.config)
            verified = " [green](verified by re-check)[/]" if fix.verified else ""
            if fix.planned:
                verified = " [green](the plan of `attn-doctor fix`; verified by re-check)[/]" if fix.verified else " (the plan of `attn-doctor fix`)"
            out.append(Padding(Text.from_markup(f"[bold]{lead}[/] {escape(fix.description)}{verified}"), (0, 0, 0, 4)))
            for a in actions:
                out.append(f"          {escape(a)}")
            if fix.cost:
                out.append(f"          [dim]cost: {escape(fix.cost)}[/]")
            if fix.moves:
                out.append(f"          [dim]pip also moves {escape(', '.join(fix.moves))}[/]")
            if fix.brings_up:
                out.append(f"          [dim]brings up warning {escape(', '.join(fix.brings_up))}[/]")
            if fix.unsure:
                out.append(f"          [dim]may not apply here: {escape(unsure_note(fix))}[/]")
    if f.sources and (verbose or f.severity == "error"):
        out.append(f"    [dim]source: {escape(f.sources[0])}[/]")
    return [line for line in out if line]


def render_check(
    report: Report,
    *,
    verbose: bool = False,
    color: bool = False,
    width: int = 100,
    fail_on: str = "error",
    strict: bool = False,
) -> str:
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width,
        color_system="standard" if color else None,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        soft_wrap=False,
        emoji=False,
    )
    def pr(obj: object = "") -> None:
        console.print(obj, soft_wrap=isinstance(obj, str))
    facts = report.facts
    where = facts.source if facts.source != "probe" else f"probe of {facts.host or 'this machine'}"
    pr(f"[bold]attn-doctor {__version__}[/] · facts: {escape(where)}")
    wl = report.workload
    pr(f"workload: {escape(describe_workload(wl))} [dim]({escape(wl.source)})[/]")
    if report.call_path is not None:
        pr(f"path: {escape(report.call_path.describe(report.facts.packages))}")
    for note in report.notes:
        pr(f"[dim]{escape(note)}[/]")
    if report.assumed:
        pr(f"[yellow]assuming:[/] {escape(', '.join(report.assumed))}")
    if report.hosts:
        from doctor.fleet import host_lines

        pr("")
        pr(f"[bold]Per host[/] (exit code: the worst host, --fail-on {fail_on}{', --strict' if strict else ''})")
        for host_line in host_lines(report, fail_on, strict):
            pr(Padding(Text(host_line), (0, 0, 0, 2)))
    pr("")
    for line in area_lines(report):
        mark = MARKS[line.mark][0 if color else 1]
        pr(Text.from_markup(f"\\[{mark}] [bold]{escape(line.title)}[/]: ") + Text(line.detail))
    fired = [f for f in report.findings if f.status != "not_evaluated"]
    pending = [f for f in report.findings if f.status == "not_evaluated"]
    if fired:
        pr("")
    for f in fired:
        for item in _finding(f, verbose):
            pr(item)
        pr("")
    if verbose:
        pr("[bold]Attention backends for this workload[/]")
        for fw, bs in backends_by_framework(report).items():
            pr(f"  {escape(fw)}:")
            for b in bs:
                state = "selected" if b.selected else "available" if b.available else "unknown" if b.available is None else "out"
                mark = {"selected": "✓", "available": "·", "unknown": "?", "out": "✗"}[state]
                why = "; ".join(b.reasons)
                pr(Padding(Text(f"{mark} {b.name} [{state}]" + (f": {why}" if why else "")), (0, 0, 0, 4)))
                for m in b.members:  # a family (TE's FlashAttention): each member's own verdict
                    m_state = "not installed" if m.reasons == ("not installed",) else "usable" if m.available else "unknown" if m.available is None else "out"
                    m_why = "" if m_state in ("usable", "not installed") else "; ".join(m.reasons)
                    pr(Padding(Text(f"{m.name}: {m_state}" + (f" ({m_why})" if m_why else "")), (0, 0, 0, 8)))
                for e in b.evidence:
                    pr(f"        [dim]kernel: {escape(e)}[/]")
        if pending or any(b.available is None for b in report.backends):
            pr("")
            pr("[bold]Not evaluated (facts unknown)[/]")
            for b in report.backends:
                if b.available is None:
                    pr(Padding(Text(f"? backend {b.id}: " + "; ".join(b.reasons)), (0, 0, 0, 4)))
            for f in pending:
                for item in _finding(f, True):
                    pr(item)
        if report.kernel_summary:
            pr("")
            pr("[bold]Kernel timings for the workload shape[/]")
            for label, value in report.kernel_summary:
                pr(f"  {escape(label)}: {escape(value)}")
        pr("")
    elif report.kernel_summary:
        for label, value in report.kernel_summary[:1]:
            pr(f"{escape(label)}: {escape(value)}")
    c = counts(report)
    tail = f"{c['error']} error(s), {c['warning']} warning(s), {c['info']} info"
    if c["not_evaluated"]:
        tail += f", {c['not_evaluated']} not evaluated"
    if c["refuted"]:
        tail += f", {c['refuted']} refuted by kernels"
    pr(f"{tail} · {c['rules']} rules checked" + ("" if verbose else " · -v for every backend's reasons"))
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"
