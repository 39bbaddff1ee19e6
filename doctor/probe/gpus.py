"""GPUs and the driver: NVML first, `nvidia-smi` as the fallback, otherwise unknown with why.

NVML is read through the `pynvml` module of nvidia-ml-py, loaded lazily by
`Sources.nvml_loader` (tests pass a fake module). Nothing here creates a CUDA context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from doctor.probe.sources import Sources

SMI_QUERY = (
    "--query-gpu=index,name,compute_cap,memory.total,driver_version",
    "--format=csv,noheader,nounits",
)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: str  # "8.0"
    memory_mib: Optional[int]


@dataclass(frozen=True)
class GpuProbe:
    gpus: Optional[Tuple[Gpu, ...]]  # None: unknown (see `reason`)
    driver_version: Optional[str]
    driver_cuda: Optional[str]  # "12.4"
    source: Optional[str]  # "nvml" | "nvidia-smi"
    reason: Optional[str] = None  # why gpus are unknown
    driver_cuda_reason: Optional[str] = None


def _str(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def cuda_version_from_int(value: int) -> str:
    """NVML's encoded CUDA driver version: 12040 -> "12.4"."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def _nvml_error(exc: BaseException) -> str:
    text = _str(exc) or type(exc).__name__
    if isinstance(exc, OSError) or type(exc).__name__ in text:
        return text
    return f"{type(exc).__name__}: {text}"


def from_nvml(nvml: Any) -> GpuProbe:
    """Driver, CUDA driver API version and every GPU, from an initialised-on-demand NVML."""
    nvml.nvmlInit()
    try:
        driver = _str(nvml.nvmlSystemGetDriverVersion())
        driver_cuda: Optional[str] = None
        cuda_reason: Optional[str] = None
        try:
            getter = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or getattr(
                nvml, "nvmlSystemGetCudaDriverVersion"
            )
            driver_cuda = cuda_version_from_int(int(getter()))
        except Exception as exc:  # noqa: BLE001 - any NVML failure is a fact, not a crash
            cuda_reason = f"NVML could not report the CUDA driver version: {_nvml_error(exc)}"
        gpus: List[Gpu] = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            try:
                memory: Optional[int] = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024)
            except Exception:  # noqa: BLE001 - memory is optional
                memory = None
            gpus.append(Gpu(i, _str(nvml.nvmlDeviceGetName(handle)), f"{major}.{minor}", memory))
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return GpuProbe(tuple(gpus), driver, driver_cuda, "nvml", driver_cuda_reason=cuda_reason)


def parse_smi(text: str) -> Tuple[Tuple[Gpu, ...], Optional[str]]:
    """Rows of `nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version`."""
    gpus: List[Gpu] = []
    driver: Optional[str] = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 5 or not cells[0].isdigit():
            continue
        index, name, cc, mem, drv = cells[0], ",".join(cells[1:-3]), cells[-3], cells[-2], cells[-1]
        if not cc.replace(".", "", 1).isdigit():
            raise ValueError(f"unexpected compute capability {cc!r} in nvidia-smi output")
        if "." not in cc:
            cc += ".0"
        memory = int(float(mem)) if mem.replace(".", "", 1).isdigit() else None
        gpus.append(Gpu(int(index), name, cc, memory))
        driver = driver or drv
    return tuple(gpus), driver


def _smi_cuda(smi: str, src: Sources) -> Tuple[Optional[str], Optional[str]]:
    res = src.run([smi], src.smi_timeout, None)
    if res.ok:
        for token in res.stdout.split("CUDA Version:")[1:2]:
            value = token.strip().split()[0] if token.strip() else ""
            if value:
                return value, None
    return None, "nvidia-smi did not show the CUDA driver version"


def from_smi(src: Sources, nvml_problem: str) -> GpuProbe:
    smi = src.find_program("nvidia-smi")
    if smi is None:
        why = f"{nvml_problem}; nvidia-smi is not on PATH (no NVIDIA driver on this machine?)"
        return GpuProbe(None, None, None, None, reason=why)
    res = src.run([smi, *SMI_QUERY], src.smi_timeout, None)
    if res.timed_out:
        why = (
            f"{nvml_problem}; nvidia-smi did not answer within {src.smi_timeout:g} s "
            "(a hung driver or a GPU in a bad state: check `dmesg` for Xid errors)"
        )
        return GpuProbe(None, None, None, None, reason=why)
    if not res.ok:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [res.error or ""]
        why = f"{nvml_problem}; nvidia-smi failed (exit {res.returncode}): {tail[0]}".rstrip(": ")
        return GpuProbe(None, None, None, None, reason=why)
    try:
        gpus, driver = parse_smi(res.stdout)
    except ValueError as exc:
        return GpuProbe(None, None, None, None, reason=f"{nvml_problem}; {exc}")
    driver_cuda, cuda_reason = _smi_cuda(smi, src)
    return GpuProbe(gpus, driver, driver_cuda, "nvidia-smi", driver_cuda_reason=cuda_reason)


def probe(src: Sources) -> GpuProbe:
    try:
        nvml = src.nvml_loader()
    except Exception as exc:  # noqa: BLE001 - ImportError, OSError, anything the loader raises
        return from_smi(src, f"NVML unavailable ({_nvml_error(exc)})")
    try:
        return from_nvml(nvml)
    except Exception as exc:  # noqa: BLE001
        return from_smi(src, f"NVML failed ({_nvml_error(exc)})")
