"""A fix whose pin PyPI does not have for the user's Python or platform is not verified: `check`
drops it, as `fix` refuses to pin it (doctor.fix.recheck.uninstallable)."""

from __future__ import annotations

import copy

from doctor.fix.recheck import recheck, verified_fixes
from doctor.rules.cases import case_inputs
from doctor.rules.evaluate import diagnose
from doctor.rules.loader import load_catalogue

# torch 2.7.1 cu126 (no sm_120) on an RTX 50-series card, x86-64 Linux: TORCH-NO-BLACKWELL-KERNELS,
# whose first fix pins torch 2.8.0 (PyPI: Python 3.9-3.13)
CASE = {
    "packages": {"torch": "2.7.1"},
    "torch": {"version": "2.7.1", "cuda": "12.6", "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]},
    "gpu": "12.0",
    "platform": {"os": "Linux 6.8.0", "arch": "x86_64", "libc": "glibc 2.35"},
}


def _pins(findings, rule_id):
    f = next(x for x in findings if x.rule_id == rule_id)
    return [str(p) for fix in f.fixes if fix.verified for p in fix.pins]


def test_a_torch_pin_without_a_wheel_for_this_python_is_not_verified() -> None:
    cat = load_catalogue()
    ok = copy.deepcopy(CASE)
    ok["python"] = {"version": "3.12.3"}
    new = copy.deepcopy(CASE)
    new["python"] = {"version": "3.14.0"}
    for case, offered in ((ok, True), (new, False)):
        facts, wl = case_inputs(case)
        d = diagnose(cat, facts, wl)
        assert d.result("TORCH-NO-BLACKWELL-KERNELS").status == "fired"
        fix = next(f for f in d.findings if f.rule_id == "TORCH-NO-BLACKWELL-KERNELS").fixes[0]
        assert [str(p) for p in fix.pins] == ["torch==2.8.0"]
        r = recheck(cat, facts, wl, fix, ("TORCH-NO-BLACKWELL-KERNELS",), d)
        assert r.verified is offered
        assert ("torch==2.8.0" in _pins(verified_fixes(cat, facts, wl, d), "TORCH-NO-BLACKWELL-KERNELS")) is offered
        if not offered:
            assert r.uninstallable == ("torch==2.8.0 does not install on Python 3.14",)
            assert "does not install on Python 3.14" in r.side_effects
