"""A fix a rule offers in its own firing case should clear that case when applied, without
firing a new error (doctor.fix.recheck). `check` drops a fix that does not (the user never sees
it), so such a fix is a rule that is wrong for that user: it needs a `when:` or a truer case.
tests/rules/unverified_fixes.txt lists the ones not yet mended; the list may only shrink."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

from doctor.fix.recheck import case_rechecks
from doctor.rules.loader import load_catalogue

KNOWN = Path(__file__).with_name("unverified_fixes.txt")


def _known() -> Dict[str, str]:
    out: Dict[str, str] = {}
    for line in KNOWN.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, verdict = line.partition(": ")
            out[key.strip()] = verdict.strip()
    return out


def test_fixes_offered_in_a_rules_own_firing_cases_recheck_clean_or_are_listed() -> None:
    got = {c.key: c.verdict for c in case_rechecks(load_catalogue(use_cache=False))}
    known = _known()
    new = sorted(f"{k}: {v}" for k, v in got.items() if k not in known)
    assert not new, (
        "a fix that does not re-check clean in its rule's own firing case (it moves the failure or does not "
        "clear it there): give it a `when:` that leaves that user out, or make the case true; " + "; ".join(new)
    )
    mended = sorted(k for k in known if k not in got)
    assert not mended, f"re-check clean now: remove from {KNOWN.name}: " + "; ".join(mended)
