"""A short-lived cache of the loaded-facts child result, keyed by everything it depends on.

The child costs as long as `import torch` (1-3 s). Its answer is a function of the
interpreter, the installed distributions, the attention modules on disk, the environment
variables that steer loading, the driver and the GPUs: the fingerprint hashes all of them,
so installing, upgrading or rebuilding anything, or changing LD_LIBRARY_PATH, misses the
cache. Entries expire after an hour; incomplete or suspicious results are never stored.
Off with ATTN_DOCTOR_NO_CACHE=1.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from doctor.cachedir import write_json

TTL_S = 3600.0
FORMAT = 1


def _mtime(path: str) -> Optional[int]:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def fingerprint(parts: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of `parts` (values are hashed, never stored)."""
    blob = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def file_state(paths: Sequence[str]) -> List[Any]:
    """(path, mtime) for each path: a rebuilt extension or rewritten dist-info changes it."""
    return [(p, _mtime(p)) for p in paths]


def load(cache_dir: Optional[Path], key: str, ttl: float = TTL_S) -> Optional[Dict[str, Any]]:
    if cache_dir is None:
        return None
    path = cache_dir / f"loaded-{key[:32]}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
        return None
    if not isinstance(data.get("records"), list) or time.time() - float(data.get("epoch", 0)) > ttl:
        return None
    return data


def store(cache_dir: Optional[Path], key: str, records: Sequence[Mapping[str, Any]], seconds: float) -> None:
    """Write atomically (rename); any failure (read-only home, full disk) is ignored."""
    if cache_dir is None:
        return
    now = time.time()
    data = {
        "format": FORMAT,
        "key": key,
        "epoch": now,
        "created": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds"),
        "seconds": seconds,
        "records": list(records),
    }
    write_json(cache_dir, f"loaded-{key[:32]}.json", data, prune_pattern="loaded-*.json")
