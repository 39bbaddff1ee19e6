"""The cache folder stays small: old fingerprints are pruned, and temp files of killed writers go."""

from __future__ import annotations

import os
import time
from pathlib import Path

from doctor.cachedir import KEEP, default_cache_dir, prune
from doctor.probe import cache


def test_prune_keeps_the_newest_and_removes_stale_temp_files(tmp_path: Path) -> None:
    for i in range(KEEP + 5):
        p = tmp_path / f"catalogue-{i:02d}.json"
        p.write_text("{}")
        os.utime(p, (1000 + i, 1000 + i))
    old_tmp = tmp_path / ".loaded-x.tmp"
    old_tmp.write_text("partial")
    os.utime(old_tmp, (time.time() - 3600, time.time() - 3600))
    fresh_tmp = tmp_path / ".loaded-y.tmp"  # a writer may still be busy with this one
    fresh_tmp.write_text("partial")
    removed = prune(tmp_path, "catalogue-*.json")
    left = sorted(p.name for p in tmp_path.glob("catalogue-*.json"))
    assert left == [f"catalogue-{i:02d}.json" for i in range(5, KEEP + 5)]
    assert old_tmp in removed and not old_tmp.exists() and fresh_tmp.exists()


def test_the_loaded_facts_cache_does_not_grow_without_bound(tmp_path: Path) -> None:
    for i in range(KEEP + 3):
        cache.store(tmp_path, f"key{i:04d}" + "0" * 40, [{"step": "x"}], 1.0)
        time.sleep(0.01)
    assert len(list(tmp_path.glob("loaded-*.json"))) == KEEP


def test_no_cache_and_no_home_mean_no_folder() -> None:
    assert default_cache_dir({"ATTN_DOCTOR_NO_CACHE": "1", "HOME": "/h"}) is None
    assert default_cache_dir({}) is None


def test_the_suite_never_writes_to_the_real_home_cache() -> None:
    assert os.environ["XDG_CACHE_HOME"] != str(Path.home() / ".cache")
