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
