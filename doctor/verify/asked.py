"""Join what the libraries themselves said they would pick (kernels/ask.py, asked by the
kernel worker before any case) to the doctor's static selection for the same workload.

One (label, value) line per library and per backend whose availability disagrees; a line
says `confirmed` when the library's pick equals the predicted one and `refuted` otherwise.
Kept apart from link.py so the kernel join stays small.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from doctor.model import Report

FRAMEWORK = {"torch": "torch-sdpa", "transformer-engine": "transformer-engine"}


def _predicted(report: Report, framework: str) -> Tuple[Optional[str], Dict[str, Optional[bool]]]:
    mine = [b for b in report.backends if b.framework == framework]
    chosen = next((b.id for b in mine if b.selected), None)
    return chosen, {b.id: b.available for b in mine}


def compare(answer: Mapping[str, Any], predicted: Optional[str],
            available: Mapping[str, Optional[bool]]) -> Dict[str, Any]:
    """One library answer against the prediction: verdict plus availability mismatches."""
    if answer.get("error"):
        return {"verdict": "not_asked", "detail": str(answer["error"])[:300], "mismatches": []}
    got = answer.get("selected")
    mismatches = []
    for bid, ok in (answer.get("available") or {}).items():
        want = available.get(bid)
        if want is not None and bool(want) != bool(ok):
            mismatches.append({"backend": bid, "library": bool(ok), "doctor": bool(want)})
    return {"verdict": "confirmed" if got == predicted else "refuted", "library": got,
            "doctor": predicted, "mismatches": mismatches}


def asked_lines(report: Report, kernel_run: Any) -> Tuple[Tuple[str, str], ...]:
    lines: List[Tuple[str, str]] = []
    for item in getattr(kernel_run, "asked", ()) or ():
        for ans in item.get("answers", []):
            fw = FRAMEWORK.get(str(ans.get("library")))
            if fw is None:
                continue
            predicted, available = _predicted(report, fw)
            c = compare(ans, predicted, available)
            label = f"{fw} asked ({item.get('name', 'workload')})"
            if c["verdict"] == "not_asked":
                lines.append((label, f"could not ask: {c['detail']}"))
                continue
            sub = ""
            if ans.get("fused_sub_backend") is not None and c["library"] == "te.fused":
                sub = f" (cuDNN sub-backend {ans['fused_sub_backend']})"
            lines.append((label, f"library picks {c['library']}{sub}; doctor predicted "
                                 f"{c['doctor']}: {c['verdict']}"))
            for m in c["mismatches"]:
                lines.append((f"{fw} asked: {m['backend']}",
                              f"library says {'available' if m['library'] else 'unavailable'}, "
                              f"doctor said {'available' if m['doctor'] else 'unavailable'}"))
    return tuple(lines)
