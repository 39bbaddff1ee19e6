"""`fix` as text: what the plan clears, the changes, the flash-attn wheel, then numbered steps.
Rendered with rich to a string; colour only when asked."""

from __future__ import annotations

import io
from typing import List

from rich.console import Console
from rich.markup import escape

from doctor.fix.plan import FixPlan

SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _summary(plan: FixPlan) -> str:
    n = len(plan.targets)
    if not n:
        return "[green]Nothing to fix:[/] no error or warning findings."
    head = f"{n} finding{'s' if n != 1 else ''}: {len(plan.cleared)} cleared, {len(plan.unresolved)} unresolved"
    if plan.verified and not plan.unresolved and not plan.new_findings:
        return f"[green]{head}[/] (verified: every rule re-run with the plan assumed)"
    return f"[yellow]{head}[/]"


def render_fix(plan: FixPlan, *, color: bool = False, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, color_system="standard" if color else None, highlight=False, soft_wrap=True)
    p = console.print
    p(f"[bold]attn-doctor fix[/]  {_summary(plan)}")
    if plan.targets:
        p("")
        p("[bold]Findings[/]")
        for f in plan.targets:
            state = "[green]cleared[/]" if f.rule_id in plan.cleared else "[red]unresolved[/]"
            p(f"  [{SEV_STYLE.get(f.severity, '')}]{f.severity}[/] [bold]{escape(f.rule_id)}[/] {state}  {escape(f.title)}")
    if plan.changes:
        p("")
        p("[bold]Plan[/]")
        for c in plan.changes:
            who = f" [dim]({escape(c.rule_id)})[/]" if c.rule_id else ""
            p(f"  - {escape(c.description)}{who}")
            if c.cost:
                p(f"    [dim]cost: {escape(c.cost)}[/]")
        if plan.pins:
            p(f"  pins:   {escape(' '.join(str(p) for p in plan.pins))}")
        if plan.env:
            p("  env:    " + escape(" ".join(f"{k}={v}" if v is not None else f"unset {k}" for k, v in plan.env.items())))
        for item in plan.config:
            p(f"  config: {escape(item)}")
    if plan.torch_reason:
        p("")
        p(f"[bold]Why torch moves:[/] {escape(plan.torch_reason)}")
    for w in plan.wheels:
        p("")
        if w.available:
            p(f"[bold]flash-attn {escape(w.version)} wheel:[/] {escape(w.filename or '')}")
            p(f"  {escape(w.url or '')}")
        else:
            p(f"[bold]flash-attn {escape(w.version)}:[/] no prebuilt wheel fits")
        for n in w.notes:
            p(f"  [dim]{escape(n)}[/]")
    if plan.conflicts:
        p("")
        p("[bold yellow]Conflicts pip will report[/]")
        for conflict in plan.conflicts:
            p(f"  ! {escape(conflict)}")
    if plan.unresolved:
        p("")
        p("[bold red]Unresolved[/] (no fix in the catalogue clears these together with the rest)")
        for r in plan.unresolved:
            p(f"  - {escape(r)}")
    if plan.new_findings:
        p("")
        p("[bold yellow]Trade-off:[/] the plan brings up " + escape(", ".join(plan.new_findings)) + " (no change in the catalogue clears the errors without it)")
    if plan.steps and plan.targets:
        p("")
        p("[bold]Steps[/]")
        for i, s in enumerate(plan.steps, 1):
            p(f"  {i}. {escape(s.text)}")
            if s.command:
                p(f"       [cyan]{escape(s.command)}[/]")
    if plan.alternatives:
        p("")
        p("[bold]Alternatives[/]")
        for a in plan.alternatives:
            bits: List[str] = [str(p) for p in a.pins] + [f"{k}={v}" for k, v in a.env.items()] + list(a.config)
            p(f"  - {escape(a.description)} [dim]({escape(', '.join(a.rule_ids))})[/]")
            if bits:
                p(f"      {escape(' '.join(bits))}")
            for extra in (a.cost, a.why):
                if extra:
                    p(f"      [dim]{escape(extra)}[/]")
    if plan.not_evaluated:
        p("")
        p(f"[dim]Not evaluated (facts missing): {escape(', '.join(plan.not_evaluated))}[/]")
    if plan.notes:
        p("")
        p("[bold]Notes[/]")
        for n in plan.notes:
            p(f"  [dim]{escape(n)}[/]")
    if plan.catalogue_date:
        p("")
        p(f"[dim]Release catalogue of {plan.catalogue_date} (attn-doctor releases refresh)[/]")
    return console.file.getvalue()  # type: ignore[attr-defined]
