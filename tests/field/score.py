"""Print the field-corpus score: failures caught (with the fix re-checking clean) / total, and
near-miss false positives (an error on a healthy configuration).

    PYTHONPATH=. python tests/field/score.py [--family F] [-v]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[1])]

from field.corpus import evaluate, isolated_env, load_all  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--family", action="append")
    ap.add_argument("-v", "--verbose", action="store_true")
    ns = ap.parse_args()
    os.environ.update(isolated_env())
    scenarios = [s for s in load_all() if not ns.family or s.family in ns.family]
    per = defaultdict(lambda: [0, 0, 0, 0])  # caught, failures, false positives, near-misses
    missed, fps = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for sc in scenarios:
            o = evaluate(sc, Path(tmp))
            row = per[sc.family]
            if sc.kind == "failure":
                row[1] += 1
                row[0] += o.ok
                if not o.ok:
                    missed.append(o)
            else:
                row[3] += 1
                row[2] += not o.ok
                if not o.ok:
                    fps.append(o)
            if ns.verbose:
                print(f"{'ok  ' if o.ok else 'MISS'} {sc.family:16} {sc.id}: {o.detail}")
    caught = sum(r[0] for r in per.values())
    failures = sum(r[1] for r in per.values())
    fp = sum(r[2] for r in per.values())
    near = sum(r[3] for r in per.values())
    print(f"{'family':16} {'caught':>10} {'near-miss FP':>14}")
    for fam in sorted(per):
        c, f, p, n = per[fam]
        print(f"{fam:16} {f'{c}/{f}':>10} {f'{p}/{n}':>14}")
    pct = 100.0 * caught / failures if failures else 0.0
    print(f"{'total':16} {f'{caught}/{failures}':>10} {f'{fp}/{near}':>14}   ({pct:.1f}% caught)")
    kinds = Counter(s.failure_kind for s in scenarios if s.kind == "failure")
    print("failure kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    gpus = Counter(s.gpu for s in scenarios)
    print("GPUs as reported: " + ", ".join(f"{g} {n}" for g, n in sorted(gpus.items())))
    for o in missed:
        gap = f" [known gap: {o.scenario.known_gap}]" if o.scenario.known_gap else ""
        print(f"missed: {o.scenario.id} ({o.scenario.source}): {o.detail}{gap}")
    for o in fps:
        print(f"false positive: {o.scenario.id} ({o.scenario.source}): {o.detail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
