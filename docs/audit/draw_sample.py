"""Draw an audit sample: rule ids from the catalogue, uniformly, with a fixed seed.

    PYTHONPATH=. python docs/audit/draw_sample.py            # the newest sample (the default --sample)
    PYTHONPATH=. python docs/audit/draw_sample.py --sample 2 # the second one

The ids are sorted before sampling, so the draw depends only on the catalogue's ids and the
seed, not on file order. A catalogue with other ids draws other rules, so each sample names
the commit it was drawn at:

- sample 2 (seed 202611222, 30 of 174 rules) at 7ce5c2c; to reproduce,
  `mkdir /tmp/s2 && git archive b815ac2 | tar -x -C /tmp/s2 && cd /tmp/s2 && PYTHONPATH=. python docs/audit/draw_sample.py`
  (b815ac2 adds the first version of this script on top of 7ce5c2c; same rule ids).
- sample 3 (seed 202611223, 30 rules): its seed was committed before the draw; the commit it
  was drawn at is named in sample-3.md.
- sample 4 (seed 202611224, 30 rules): its seed was committed before the draw, which follows the
  whole-catalogue audit (docs/audit/catalogue/); the commit it was drawn at is named in sample-4.md.
- sample 5 (seed 202611225, 30 rules): its seed was committed before the draw, which follows the
  second whole-catalogue audit (docs/audit/catalogue2/); the commit it was drawn at is named in sample-5.md.
- sample 6 (seed 202611226, 30 rules): its seed was committed before the third pass (the TE
  releases older than the oracle's, and the path that runs) and before the draw; the commit it
  was drawn at is named in sample-6.md (1914baa).
- sample 7 (seed 202611227, 30 rules): its seed was committed before the fourth pass (sample-auditor
  rigor share by share, TransformerEngine clipped to the releases checked, 1.9 on) and before the
  draw; the commit it was drawn at is named in sample-7.md.
- sample 8 (seed 202611228, 30 rules): its seed was committed after the seventh sample's defects
  and their second reading were fixed, and before the draw; a second estimate of the same pass.
- samples 9 and 10 (seeds 202611229, 2026112210): drawn after the fifth pass and after sample 9's
  fixes; the commits are named in sample-9.md and sample-10.md.
- sample 11 (seed 2026112211): committed before the sixth pass (docs/audit/catalogue6/) and drawn
  after it, at the commit named in sample-11.md.
- sample 12 (seed 2026112312): committed before the draw, drawn after the seventh pass's readings
  (docs/audit/catalogue7/), at the commit named in sample-12.md.
- sample 13 (seed 2026112313): committed at the start of the eighth pass (docs/audit/catalogue8/),
  before it and before the draw; the commit it was drawn at is named in sample-13.md.
- sample 14 (seed 2026112314): committed at the start of the ninth pass (docs/audit/catalogue9/),
  before it and before the draw; the commit it was drawn at is named in sample-14.md.
- sample 15 (seed 2026112315): committed at the start of the tenth pass (docs/audit/catalogue10/),
  before it and before the draw; the commit it was drawn at is named in sample-15.md.
- sample 16 (seed 2026112316): committed during the eleventh pass (docs/audit/catalogue11/, deep
  audit-and-fix of the rules no sample had read), before the draw; the commit it was drawn at is
  named in sample-16.md.
- samples 17-51 (seeds 2026112417 .. 2026112951): each committed before its draw, after the previous
  sample's fixes; the commit each was drawn at is named in its sample-N.md.
"""

from __future__ import annotations

import argparse
import random

from doctor.rules.loader import load_catalogue

SEEDS = {2: 20261122_2, 3: 20261122_3, 4: 20261122_4, 5: 20261122_5, 6: 20261122_6, 7: 20261122_7, 8: 20261122_8, 9: 20261122_9, 10: 20261122_10, 11: 20261122_11, 12: 20261123_12, 13: 20261123_13, 14: 20261123_14, 15: 20261123_15, 16: 20261123_16, 17: 20261124_17, 18: 20261124_18, 19: 20261124_19, 20: 20261124_20, 21: 20261124_21, 22: 20261124_22, 23: 20261125_23, 24: 20261125_24, 25: 20261125_25, 26: 20261125_26, 27: 20261125_27, 28: 20261125_28, 29: 20261125_29, 30: 20261125_30, 31: 20261125_31, 32: 20261126_32, 33: 20261126_33, 34: 20261126_34, 35: 20261126_35, 36: 20261126_36, 37: 20261126_37, 38: 20261127_38, 39: 20261127_39, 40: 20261127_40, 41: 20261127_41, 42: 20261127_42, 43: 20261127_43, 44: 20261128_44, 45: 20261128_45, 46: 20261128_46, 47: 20261128_47, 48: 20261129_48, 49: 20261129_49, 50: 20261129_50, 51: 20261129_51}
SIZE = 30


def draw(sample: int = 3, size: int = SIZE) -> list:
    ids = sorted(r.id for r in load_catalogue(use_cache=False).rules)
    return random.Random(SEEDS[sample]).sample(ids, size)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=51, choices=sorted(SEEDS))
    args = ap.parse_args()
    for rule_id in draw(args.sample):
        print(rule_id)
