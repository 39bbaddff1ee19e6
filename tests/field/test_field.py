"""One test per field scenario (tests/field/cases/): the doctor catches each real failure with the
rule naming its established cause, the thread's fix re-checks clean, and the healthy
configuration a thread established (a near-miss) raises no error."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from .corpus import all_paths, evaluate, load, load_all

PATHS = all_paths()


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.mark.parametrize("path", PATHS, ids=[f"{p.parent.name}/{p.stem}" for p in PATHS])
def test_scenario(path: Path, tmp_path: Path) -> None:
    sc = load(path)
    outcome = evaluate(sc, tmp_path)
    if sc.known_gap:
        # A documented gap: it must still be a gap (strict), so closing it means removing the note.
        assert not outcome.ok, f"{sc.id}: known_gap says missed, but now {outcome.detail}: remove known_gap"
        pytest.xfail(f"known gap: {sc.known_gap}")
    assert outcome.ok, f"{sc.id} ({sc.source}): {outcome.detail}"


def test_ids_are_unique_and_files_are_named_by_family() -> None:
    scenarios = load_all()
    dup = [i for i, n in Counter(s.id for s in scenarios).items() if n > 1]
    assert dup == []
    for s in scenarios:
        assert s.path.parent.name == s.family, f"{s.path}: family {s.family} but folder {s.path.parent.name}"


def test_expected_rules_exist_unless_the_gap_is_documented() -> None:
    from doctor.rules.loader import load_catalogue

    ids = {r.id for r in load_catalogue().rules}
    for s in load_all():
        if s.kind == "failure" and not s.known_gap:
            assert set(s.rules) & ids, f"{s.path}: none of {s.rules} is a rule in the catalogue"


def test_corpus_has_both_kinds() -> None:
    kinds = Counter(s.kind for s in load_all())
    assert kinds["failure"] > 0 and kinds["near-miss"] > 0
