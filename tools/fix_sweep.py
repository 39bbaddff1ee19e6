"""Fix sweep: are the fixes a rule offers still good on other GPUs and platforms?

Each rule's own fires cases are moved, one axis at a time, to another GPU (sm80, sm90, sm100,
sm120) or platform (Windows x86-64, Linux aarch64). Where the rule still fires there, every
checkable fix it offers is re-checked as `check` does (doctor.fix.recheck): a fix that does not
install, leaves the rule firing, or fires a new error is printed, one line per rule, variant,
fix and reason. `check` drops such a fix for such a user, so each line is a candidate for a fix
`when:` (or a rule that should not fire on that variant at all); it is a triage list, not a
verdict. tests/rules/test_fix_recheck.py checks the cases as written.

    PYTHONPATH=. python tools/fix_sweep.py [--shard I/N] [--rule ID ...] > sweep.txt
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from typing import Any, Dict, Mapping

from doctor.fix.recheck import dropped_fixes
from doctor.rules.cases import case_inputs, iter_rule_cases
from doctor.rules.loader import load_catalogue

VARIANTS: Dict[str, Dict[str, Any]] = {
    "sm80": {"gpu": "8.0"},
    "sm90": {"gpu": "9.0"},
    "sm100": {"gpu": "10.0"},
    "sm120": {"gpu": "12.0"},
    "windows": {"platform": {"os": "windows", "arch": "x86_64"}},
    "aarch64": {"platform": {"os": "linux", "arch": "aarch64"}},
}


def _moved(case: Mapping[str, Any], patch: Mapping[str, Any]) -> Dict[str, Any]:
    out = copy.deepcopy(dict(case))
    out.update(copy.deepcopy(dict(patch)))
    out.pop("offers", None)
    return out


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shard", default="0/1", help="I/N: only every N-th fires case, from the I-th")
    ap.add_argument("--rule", action="append", default=[], help="only these rules")
    a = ap.parse_args(argv)
    i_shard, n_shard = (int(x) for x in a.shard.split("/"))
    cat = load_catalogue()
    only = set(a.rule)
    t0, n, k = time.time(), 0, -1
    for rule, kind, i, case in iter_rule_cases(cat, lambda r: not r.disables and (not only or r.id in only)):
        if kind != "fires":
            continue
        k += 1
        if k % n_shard != i_shard:
            continue
        for vname, patch in VARIANTS.items():
            if all(case.get(key) == value for key, value in patch.items()):
                continue
            facts, wl = case_inputs(_moved(case, patch))
            n += 1
            for position, why in dropped_fixes(cat, facts, wl, rule.id):
                print(f"{rule.id}\tfires[{i}]\t{vname}\tfix {position}\t{why}", flush=True)
    print(f"# {n} moved cases, {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
