"""Where attn-doctor caches (the loaded-facts child's result, the parsed rule catalogue), and
keeping that folder small.

    default_cache_dir(environ) -> $XDG_CACHE_HOME/attn-doctor or ~/.cache/attn-doctor; None when
                                  ATTN_DOCTOR_NO_CACHE is set (or there is no home)
    prune(folder, pattern, keep) -> removes all but the `keep` newest files matching `pattern`,
                                  and temp files a killed writer left behind

Every cache file is keyed by a fingerprint of what it depends on, so an upgrade writes a new
file; pruning keeps the folder from growing with every install.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import List, Mapping, Optional

KEEP = 8  # newest files kept per kind of cache entry
STALE_TMP_S = 600.0  # a temp file older than this was left by a killed writer


def default_cache_dir(environ: Mapping[str, str]) -> Optional[Path]:
    if environ.get("ATTN_DOCTOR_NO_CACHE", "").strip() not in ("", "0"):
        return None
    base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME", ""), ".cache")
    if not base or base == ".cache":
        return None
    return Path(base) / "attn-doctor"


def prune(folder: Optional[Path], pattern: str, keep: int = KEEP) -> List[Path]:
    """Delete all but the `keep` newest `pattern` files in `folder` (and stale temp files).
    Never raises: a cache that cannot be cleaned only costs disk."""
    if folder is None:
        return []
    removed: List[Path] = []
    try:
        entries = [(p.stat().st_mtime, p) for p in folder.glob(pattern) if p.is_file()]
        stale = [p for p in folder.glob("*.tmp") if p.is_file() and time.time() - p.stat().st_mtime > STALE_TMP_S]
    except OSError:
        return removed
    entries.sort(reverse=True)
    for _, path in entries[keep:]:
        removed.append(path)
    removed.extend(stale)
    for path in removed:
        try:
            path.unlink()
        except OSError:
            pass
    return removed
