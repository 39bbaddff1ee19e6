"""The contract analysis' result cache: reused while nothing it read has changed.

Kept apart from doctor.probe.contracts so that the usual probe (nothing installed or changed
since the last run) never imports the parser or the guard evaluator. The key holds the
analyser version, the import path, and for every installed pair its spec, both versions and
dist-info paths; the entry lists every file the analysis read and every folder it listed with
(size, mtime), and one that differs misses the cache (an in-place edit, a new file).
"""

from __future__ import annotations

import os

from doctor.cachedir import prune, write_json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Set, Tuple

if TYPE_CHECKING:
    from doctor.probe.packages import PackageScan

SPECS_FORMAT = 1

RESULT_FORMAT = 1


def _stat(path: str) -> Optional[List[int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _specs_key(folder: Path) -> Tuple[List[Path], str]:
    files = sorted(folder.glob("*.yaml"))
    states = []
    for f in files:
        st = f.stat()
        states.append(f"{f}\0{st.st_size}\0{st.st_mtime_ns}")
    return files, f"{SPECS_FORMAT}\n" + "\n".join(states)


def cached_pairs(folder: Path, cache_dir: Optional[Path]) -> Tuple[Optional[List[Dict[str, Any]]], str]:
    """The validated pairs as plain dicts when the cache matches the files, and the key."""
    import json

    _, key = _specs_key(folder)
    if cache_dir is None:
        return None, key
    try:
        data = json.loads((cache_dir / "contracts" / "specs.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, key
    if isinstance(data, dict) and data.get("key") == key and isinstance(data.get("pairs"), list):
        return data["pairs"], key
    return None, key


def store_pairs(cache_dir: Optional[Path], key: str, pairs: List[Dict[str, Any]]) -> None:
    import json

    if cache_dir is None:
        return
    target = cache_dir / "contracts" / "specs.json"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "pairs": pairs}), encoding="utf-8")
        os.replace(tmp, target)
    except OSError:
        pass


def result_key(scan: "PackageScan", pairs: List[Dict[str, Any]]) -> Optional[str]:
    """Fingerprint of what decides the result, short of the files themselves (checked by stat)."""
    import json
    import zlib

    from doctor import __version__

    parts: List[Any] = [RESULT_FORMAT, __version__, list(scan.paths)]
    for pair in pairs:
        caller, callee = scan.dists.get(pair["caller_dist"]), scan.dists.get(pair["callee_dist"])
        if caller is None or callee is None:
            continue
        parts.append([pair, caller.version, str(caller.metadata), callee.version, str(callee.metadata),
                      [scan.modules.get(m) for m in pair["callee_modules"]]])
    if len(parts) == 3:
        return None  # no pair installed: nothing to analyse, nothing to cache
    text = json.dumps(parts, default=repr)  # compared whole on load; crc32 only names the file
    return f"{zlib.crc32(text.encode()):08x}:{text}"


def cached_result(cache_dir: Optional[Path], key: str) -> Optional[Dict[str, Any]]:
    import json

    if cache_dir is None:
        return None
    try:
        data = json.loads((cache_dir / "contracts" / f"result-{key[:8]}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    for path, state in data.get("files", {}).items():
        if _stat(path) != state:
            return None  # a file the analysis read (or a folder it listed) changed
    result = data.get("result")
    return result if isinstance(result, dict) else None


def store_result(cache_dir: Optional[Path], key: str, touched: Set[str], result: Mapping[str, Any]) -> None:

    if cache_dir is None:
        return
    folders = {os.path.dirname(p) for p in touched}
    files = {p: _stat(p) for p in sorted(touched | folders)}
    write_json(cache_dir / "contracts", f"result-{key[:8]}.json", {"key": key, "files": files, "result": result}, prune_pattern="result-*.json")
    prune(cache_dir / "contracts", "[0-9a-f]*.json", keep=4096)  # per-file parse summaries
