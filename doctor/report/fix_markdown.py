"""`fix --format markdown`: the plan for a pull request, an issue or $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

from typing import List

from doctor.fix.plan import FixPlan


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_fix_markdown(plan: FixPlan) -> str:
    n = len(plan.targets)
    out: List[str] = [
        f"## attn-doctor fix: {n} finding(s), {len(plan.cleared)} cleared, {len(plan.unresolved)} unresolved",
        "",
    ]
    if plan.verified and not plan.unresolved and not plan.new_findings and n:
        out += ["Verified: every rule re-run with the plan assumed leaves no error or warning.", ""]
    if plan.targets:
        out += ["| Severity | Rule | Finding | Status |", "|---|---|---|---|"]
        for f in plan.targets:
            status = "cleared" if f.rule_id in plan.cleared else "**unresolved**"
            out.append(f"| {f.severity} | `{f.rule_id}` | {_cell(f.title)} | {status} |")
        out.append("")
    if plan.changes:
        out += ["### Plan", ""]
        for c in plan.changes:
            who = f" (`{c.rule_id}`)" if c.rule_id else ""
            cost = f" — cost: {c.cost}" if c.cost else ""
            out.append(f"- {c.description}{who}{cost}")
        out.append("")
    if plan.pins:
        out += ["Pins:", "", "```text", *(str(p) for p in plan.pins), "```", ""]
    if plan.env:
        out += ["Environment:", "", "```sh", *(f"export {k}={v}" if v is not None else f"unset {k}" for k, v in plan.env.items()), "```", ""]
    if plan.config:
        out += ["Configuration:", "", *(f"- {c}" for c in plan.config), ""]
    if plan.torch_reason:
        out += [f"**Why torch moves:** {plan.torch_reason}", ""]
    for w in plan.wheels:
        if w.available:
            out += [f"### flash-attn {w.version} wheel", "", f"`{w.filename}`", "", "```sh", w.pip_command, "```", ""]
        else:
            out += [f"### flash-attn {w.version}: no prebuilt wheel fits", "", "```sh", w.build, "```", ""]
        out += [f"- {x}" for x in w.notes] + [""]
    if plan.conflicts:
        out += ["### Conflicts pip will report", "", *(f"- ⚠️ {c}" for c in plan.conflicts), ""]
    if plan.unresolved:
        out += ["### Unresolved", "", *(f"- `{r}`" for r in plan.unresolved), ""]
    if plan.new_findings:
        out += [f"**Trade-off:** the plan brings up {', '.join(f'`{r}`' for r in plan.new_findings)} (no change in the catalogue clears the errors without it).", ""]
    if plan.steps and plan.targets:
        out += ["### Steps", ""]
        for i, s in enumerate(plan.steps, 1):
            out.append(f"{i}. {s.text}" + (f"\n   ```sh\n   {s.command}\n   ```" if s.command else ""))
        out.append("")
    if plan.alternatives:
        out += ["### Alternatives", ""]
        for a in plan.alternatives:
            bits = [str(p) for p in a.pins] + [f"{k}={v}" for k, v in a.env.items()] + list(a.config)
            tail = "; ".join(x for x in (a.cost or "", a.why) if x)
            out.append(f"- {a.description}" + (f": `{' '.join(bits)}`" if bits else "") + (f" ({tail})" if tail else ""))
        out.append("")
    if plan.notes:
        out += ["### Notes", "", *(f"- {x}" for x in plan.notes), ""]
    if plan.catalogue_date:
        out.append(f"_Release catalogue of {plan.catalogue_date}._")
    return "\n".join(out).rstrip() + "\n"
