"""Where the probe reads the machine from: every side effect behind one injectable value.

`Sources` bundles the subprocess runner, the NVML loader, the import paths to scan, the
environment, `which`, the Python to start for loaded facts and the timeouts. Tests build a
`Sources` with fakes; `collect()` uses the real machine when given none.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

from doctor.cachedir import default_cache_dir

CHILD_TIMEOUT_S = 20.0
SMI_TIMEOUT_S = 2.0
LDCONFIG_TIMEOUT_S = 2.0

# Where distributions put cuDNN / the CUDA runtime outside of pip wheels.
SYSTEM_LIB_DIRS: Tuple[str, ...] = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/sbsa-linux-gnu",
    "/usr/lib64",
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/cuda/targets/sbsa-linux/lib",
)
SYSTEM_INCLUDE_DIRS: Tuple[str, ...] = (
    "/usr/include",
    "/usr/include/x86_64-linux-gnu",
    "/usr/include/aarch64-linux-gnu",
    "/usr/local/cuda/include",
)


@dataclass(frozen=True)
class RunResult:
    """What one subprocess did. `returncode` is None when it did not run to completion."""

    argv: Tuple[str, ...]
    returncode: Optional[int]
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    error: Optional[str] = None  # it could not be started: "not found", "permission denied"

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None


Runner = Callable[[Sequence[str], float, Optional[Mapping[str, str]]], RunResult]


def _text(data: Any) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return str(data)


def run_command(
    argv: Sequence[str], timeout: float, env: Optional[Mapping[str, str]] = None
) -> RunResult:
    """Run `argv` with a wall-clock limit; never raises.

    The command gets its own process group so a timeout also ends anything it started. After
    the kill we wait at most one second: a process stuck in the kernel (a hung GPU driver)
    cannot be reaped, and the probe must not hang with it.
    """
    args = tuple(str(a) for a in argv)
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=None if env is None else dict(env),
            start_new_session=True,
        )
    except FileNotFoundError:
        return RunResult(args, None, error=f"{args[0]}: not found")
    except PermissionError:
        return RunResult(args, None, error=f"{args[0]}: permission denied")
    except OSError as exc:
        return RunResult(args, None, error=f"{args[0]}: {exc.strerror or exc}")
    out: Optional[bytes]
    err: Optional[bytes]
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out, err = exc.stdout, exc.stderr
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        try:
            more_out, more_err = proc.communicate(timeout=1.0)
            out = (out or b"") + (more_out or b"")
            err = (err or b"") + (more_err or b"")
        except (subprocess.TimeoutExpired, OSError, ValueError):
            pass
        return RunResult(args, None, _text(out), _text(err), timed_out=True)
    return RunResult(args, proc.returncode, _text(out), _text(err))


def load_pynvml() -> Any:
    """The real NVML bindings (module `pynvml` from nvidia-ml-py), imported only when needed.

    The driver library is tried first with ctypes: where it is absent (no NVIDIA driver, CPU
    CI) this fails in microseconds and we skip importing the 20 ms bindings module at all.
    """
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        raise OSError("libnvidia-ml.so.1 cannot be loaded") from None
    import pynvml

    return pynvml


def _timeout_from_env(environ: Mapping[str, str]) -> float:
    raw = environ.get("ATTN_DOCTOR_CHILD_TIMEOUT", "")
    try:
        value = float(raw)
    except ValueError:
        return CHILD_TIMEOUT_S
    return value if value > 0 else CHILD_TIMEOUT_S


@dataclass(frozen=True)
class Sources:
    """Everything the probe touches. Defaults read the real machine and this interpreter."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    site_paths: Sequence[str] = field(default_factory=lambda: tuple(sys.path))
    run: Runner = run_command
    nvml_loader: Callable[[], Any] = load_pynvml
    which: Optional[Callable[[str], Optional[str]]] = None  # None: shutil.which on environ PATH
    python: Optional[str] = None  # None: the interpreter that owns the torch install found
    child_timeout: Optional[float] = None  # None: $ATTN_DOCTOR_CHILD_TIMEOUT or 20 s
    smi_timeout: float = SMI_TIMEOUT_S
    system_lib_dirs: Sequence[str] = SYSTEM_LIB_DIRS
    system_include_dirs: Sequence[str] = SYSTEM_INCLUDE_DIRS
    use_ldconfig: bool = True
    # TransformerEngine's last folder to glob for cuDNN, and the dynamic loader's built-in folders
    # (after LD_LIBRARY_PATH and ld.so.cache) for `dlopen("libcudnn.so")`
    cuda_default_dir: str = "/usr/local/cuda"
    loader_default_dirs: Sequence[str] = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")
    cache_dir: Optional[Path] = None  # None: no cache of loaded facts (see Sources.system)

    @classmethod
    def system(cls, *, no_cache: bool = False, child_timeout: Optional[float] = None) -> "Sources":
        """The real machine, with the loaded-facts cache in the user's cache folder (none with
        `no_cache`); `child_timeout` overrides the default wait for the torch-importing child."""
        environ = dict(os.environ)
        cache = None if no_cache else default_cache_dir(environ)
        return cls(environ=environ, cache_dir=cache, child_timeout=child_timeout)

    def find_program(self, name: str) -> Optional[str]:
        if self.which is not None:
            return self.which(name)
        return shutil.which(name, path=self.environ.get("PATH", os.defpath))

    def effective_child_timeout(self) -> float:
        if self.child_timeout is not None and self.child_timeout > 0:
            return self.child_timeout
        return _timeout_from_env(self.environ)
