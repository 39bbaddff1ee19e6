"""Draw the second audit sample: 30 rule ids from the catalogue, uniformly, with a fixed seed.

    PYTHONPATH=. python docs/audit/draw_sample.py        # prints one id per line

The ids are sorted before sampling so that the draw depends only on the catalogue's ids and the
seed, not on file order. The draw in sample-2.md / sample-2-ids.txt was made on the 174-rule
catalogue of commit 7ce5c2c; a catalogue with other ids draws other rules. To reproduce it:
`mkdir /tmp/s2 && git archive b815ac2 | tar -x -C /tmp/s2 && cd /tmp/s2 && PYTHONPATH=. python docs/audit/draw_sample.py` (b815ac2 adds this script on top of 7ce5c2c; same rule ids).
"""

from __future__ import annotations

import random

from doctor.rules.loader import load_catalogue

SEED = 20261122_2
SIZE = 30


def draw() -> list:
    ids = sorted(r.id for r in load_catalogue(use_cache=False).rules)
    return random.Random(SEED).sample(ids, SIZE)


if __name__ == "__main__":
    for rule_id in draw():
        print(rule_id)
