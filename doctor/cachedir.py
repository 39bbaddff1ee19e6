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
from typing import Any, List, Mapping, Optional

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


def write_json(folder: Optional[Path], name: str, data: Any, *, prune_pattern: Optional[str] = None, keep: int = KEEP) -> bool:
    """Write `data` as JSON to folder/name atomically (temp file + rename), then prune
    `prune_pattern` to the `keep` newest. Any failure (read-only home, full disk) is ignored:
    a cache that cannot be written only costs speed. True when written."""
    if folder is None:
        return False
    import json
    import tempfile

    tmp: Optional[str] = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".w-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, separators=(",", ":"))
        os.replace(tmp, folder / name)
        tmp = None
    except OSError:
        return False
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    if prune_pattern:
        prune(folder, prune_pattern, keep)
    return True
