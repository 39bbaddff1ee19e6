"""The exception a contract finding names: an import that fails hides only its own file's sites."""

from __future__ import annotations

from doctor.rules.contract_findings import _errors


def _row(kind: str, site: str, reason: str) -> dict:
    return {"kind": kind, "site": site, "reason": reason}


def test_an_attribute_missing_in_another_file_than_the_failing_import_is_still_named() -> None:
    rows = [_row("import", "pkg/a.py:3", "lz has no 'Gone'"), _row("attribute", "pkg/b.py:9", "lz has no 'Other'")]
    assert _errors(rows) == "ImportError or AttributeError"


def test_an_attribute_missing_in_the_file_whose_import_fails_is_never_reached() -> None:
    rows = [_row("import", "pkg/a.py:3", "lz has no 'Gone'"), _row("attribute", "pkg/a.py:9", "lz has no 'Other'")]
    assert _errors(rows) == "ImportError"


def test_a_call_that_no_longer_binds_raises_type_error() -> None:
    rows = [_row("call", "pkg/a.py:3", "unexpected keyword 'x'"), _row("import", "pkg/b.py:1", "lz has no 'Gone'")]
    assert _errors(rows) == "TypeError or ImportError"
