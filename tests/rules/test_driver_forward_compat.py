"""cuda.driver_behind: an older-major driver on which torch's CUDA runtime nevertheless started
(probed torch.cuda.is_available() true) is forward compatibility, not "major"."""

from doctor.model import Workload
from doctor.rules.conditions import resolve
from doctor.snapshot import facts_from_snapshot, validate_snapshot


def _behind(cuda_available):
    torch = {"version": "2.11.0", "cuda": "13.0"}
    if cuda_available is not None:
        torch["cuda_available"] = cuda_available
    facts = facts_from_snapshot(validate_snapshot({
        "schema_version": 1,
        "packages": {"torch": "2.11.0"},
        "torch": torch,
        "cuda": {"driver_version": "570.86.15", "driver_cuda": "12.8"},
    }))
    return resolve("cuda.driver_behind", facts, Workload())


def test_forward_compat():
    assert _behind(True).value == "forward_compat"
    assert _behind(False).value == "major"
    assert _behind(None).value == "major"


def _diagnose(driver: str):
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    facts, wl = case_inputs({
        "packages": {"torch": "1.13.1"},
        "torch": {"version": "1.13.1", "cuda": "11.7"},
        "cuda": {"driver_version": driver, "driver_cuda": "11.0"},
        "gpu": "8.0",
    })
    return diagnose(load_catalogue(use_cache=False), facts, wl)


def test_before_minor_compat_quotes_torchs_error():
    """TORCH-DRIVER-BEFORE-MINOR-COMPAT quotes what torch raises for cudaErrorInsufficientDriver
    (c10/cuda/CUDAFunctions.cpp device_count_impl), not the CUDA runtime's own string, which torch
    does not show (check27-R1)."""
    d = _diagnose("450.51.06")
    f = next(f for f in d.findings if f.rule_id == "TORCH-DRIVER-BEFORE-MINOR-COMPAT")
    assert f.status == "fired"
    assert "The NVIDIA driver on your system is too old (found version 11000)" in f.message
    assert "CUDA driver version is insufficient" not in f.message
    assert _diagnose("450.80.02").result("TORCH-DRIVER-BEFORE-MINOR-COMPAT").status == "passed"
