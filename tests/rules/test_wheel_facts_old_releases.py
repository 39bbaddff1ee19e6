"""flash-attn releases before 2.0.6 have no wheel download in setup.py (the 2.0.5 sdist's
setup.py has no BASE_WHEEL_URL; 2.0.6's has), so `pip install` always compiles them: the
wheel facts say so instead of "not in the wheel catalogue" (unknown)."""

from doctor.model import Facts
from doctor.rules.wheel_facts import resolve_wheel_fact
from doctor.snapshot import facts_from_snapshot, validate_snapshot


def _facts(fa: str, imports=None) -> Facts:
    snap = {
        "schema_version": 1,
        "packages": {"flash-attn": fa, "torch": "2.0.1"},
        "torch": {"version": "2.0.1+cu118", "cuda": "11.8"},
        "python": {"version": "3.10.12"},
    }
    if imports:
        snap["imports"] = imports
    return facts_from_snapshot(validate_snapshot(snap))


def test_before_2_0_6_needs_build():
    for v in ("1.0.9", "2.0.5", "0.2.8"):
        known, value, _ = resolve_wheel_fact("needs_build", _facts(v))
        assert known and value is True, v
        assert resolve_wheel_fact("wheel", _facts(v))[1] is False
        assert "2.0.6" in resolve_wheel_fact("why", _facts(v))[1]


def test_imported_build_needs_none():
    known, value, _ = resolve_wheel_fact("needs_build", _facts("1.0.9", {"flash_attn": {"status": "ok"}}))
    assert known and value is False


def test_2_0_6_uses_the_catalogue():
    known, value, _ = resolve_wheel_fact("needs_build", _facts("2.0.6"))
    assert known and value is False


def _facts_torch(version: str, cuda: str) -> Facts:
    return facts_from_snapshot(validate_snapshot({
        "schema_version": 1,
        "packages": {"flash-attn": "2.8.3", "torch": version},
        "torch": {"version": version, "cuda": cuda},
        "python": {"version": "3.11.9"},
    }))


def test_torch_2_6_cu126_is_new_abi():
    """torch 2.6's CUDA 12.6 builds use the new C++ ABI (pytorch#142064); PyPI's (12.4) the old."""
    from doctor.releases.wheels import wheel_target

    assert wheel_target(_facts_torch("2.6.0+cu126", "12.6")).cxx11_abi is True
    assert wheel_target(_facts_torch("2.6.0", "12.4")).cxx11_abi is False
    assert resolve_wheel_fact("broken_wheel", _facts_torch("2.6.0+cu126", "12.6"))[1] is False
    assert resolve_wheel_fact("broken_wheel", _facts_torch("2.6.0", "12.4"))[1] is True


def test_wheel_unknown_outside_the_catalogue():
    """A release without a build matrix in rules/releases/flash-attn-wheels.json (2.8.3.post2 is on
    PyPI but not in the catalogue): whether a wheel exists is unknown, not False; a release in the
    catalogue answers from its matrix (2.8.3: torch 2.4-2.8, so none for torch 2.9)."""
    def f(fa, tv, cuda):
        return facts_from_snapshot(validate_snapshot({
            "schema_version": 1,
            "packages": {"flash-attn": fa, "torch": tv},
            "torch": {"version": tv, "cuda": cuda},
            "python": {"version": "3.11.9"},
        }))

    known, value, _ = resolve_wheel_fact("wheel", f("2.8.3.post2", "2.9.0+cu126", "12.6"))
    assert not known and value is None
    assert resolve_wheel_fact("wheel", f("2.8.3", "2.9.0+cu126", "12.6")) == (True, False, "")
    assert resolve_wheel_fact("wheel", f("2.8.3", "2.8.0", "12.8")) == (True, True, "")


def test_broken_wheel_only_where_setup_py_downloads_it():
    """flash-attn 2.8.x's torch 2.6 cxx11abiFALSE wheels are listed as broken (#1783), but
    setup.py downloads one only for a CUDA 12 torch (the 2.8.x matrix builds CUDA 12.9 alone):
    torch 2.6.0+cu118 (old ABI) and a ROCm torch 2.6 get no wheel and compile instead
    (needs_build), so the broken-wheel fact is False there; a release outside the catalogue
    (2.8.3.post2) is unknown."""
    def f(fa, tv, cuda, hip=None):
        torch = {"version": tv, "cuda": cuda}
        if hip:
            torch["hip"] = hip
        return facts_from_snapshot(validate_snapshot({
            "schema_version": 1,
            "packages": {"flash-attn": fa, "torch": tv},
            "torch": torch,
            "python": {"version": "3.11.9"},
        }))

    assert resolve_wheel_fact("broken_wheel", f("2.8.3", "2.6.0+cu124", "12.4")) == (True, True, "")
    assert resolve_wheel_fact("broken_wheel", f("2.8.3", "2.6.0+cu118", "11.8")) == (True, False, "")
    assert resolve_wheel_fact("needs_build", f("2.8.3", "2.6.0+cu118", "11.8")) == (True, True, "")
    assert resolve_wheel_fact("broken_wheel", f("2.8.3", "2.6.0+rocm6.2.4", None, "6.2.41133"))[1] is False
    known, value, _ = resolve_wheel_fact("broken_wheel", f("2.8.3.post2", "2.6.0+cu124", "12.4"))
    assert not known and value is None
