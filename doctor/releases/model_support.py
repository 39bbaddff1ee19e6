"""Which attention implementations a transformers model family declares, by release: the
`models` table of rules/evidence/transformers_attention.json (written from the released wheels by
tools/hf_attention_facts.py; the seeded tests read the same file's `releases` table).

Each family lists the releases where its set of implementations changed; the answer for an
installed transformers is the newest of those at or below it. Loaded once, on first use.
"""

from __future__ import annotations

import bisect
import json
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from packaging.version import Version

from doctor.versions import release

_Points = Tuple[List[Version], List[Optional[Tuple[str, ...]]]]


@lru_cache(maxsize=1)
def _table() -> Dict[str, _Points]:
    from doctor.resources import rules_dir

    try:
        doc = json.loads((rules_dir() / "evidence" / "transformers_attention.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out: Dict[str, _Points] = {}
    for family, points in (doc.get("models") or {}).items():
        rows = sorted((Version(v), None if impls is None else tuple(impls)) for v, impls in points.items())
        out[family] = ([v for v, _ in rows], [i for _, i in rows])
    return out


def model_supports(transformers: Optional[str], model_type: Optional[str], attention: Optional[str]) -> Optional[bool]:
    """True/False when the family's classes in that transformers release declare `attention`;
    None when the release, the family or the attention is unknown (or the family is not in
    that release)."""
    if not transformers or not model_type or not attention:
        return None
    have = release(transformers)
    points = _table().get(model_type)
    if have is None or points is None:
        return None
    at = bisect.bisect_right(points[0], have) - 1
    impls = points[1][at] if at >= 0 else None
    return None if impls is None else attention in impls
