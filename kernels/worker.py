"""The kernel worker: runs attention cases in one process (one CUDA context) and streams
results back as JSON lines. Started by doctor/verify.py as `python worker.py`; never imported.

Protocol (docs/kernels.md): stdin carries one JSON document
    {"protocol": 1, "device": "auto" | "cuda" | "cpu", "cases": [CaseSpec, ...]}
and stdout carries one JSON object per line:
    {"event": "hello", ...}                     interpreter up, before torch is imported
    {"event": "env", ...}                       torch imported, CUDA initialised; versions
    {"event": "ask", "name": ..., "answers": [...]}   a library's own pick (request "ask")
    {"event": "start", "id": ...}               a case begins (so a crash can be pinned on it)
    {"event": "result", "id": ..., "status": ...}
    {"event": "done", "cases_s": ...}
Anything a library prints goes to stderr: the real stdout is kept for the protocol only.
After a CUDA error that poisons the context (illegal memory access, device assert) the
worker reports the case as crashed and exits with status 3; the runner starts a fresh one.

Started as `python worker.py --warm DEVICE`, the worker imports torch and initialises DEVICE
before it reads stdin, so `check` can start it while the probe is still running and the case
list is not known yet; its "env" event then comes before the document is sent.

Test hooks: with ATTN_DOCTOR_WORKER_SELFTEST=1 the backends selftest.{pass,fail,raise,
abort,segfault,exit,sleep,print} exist, and ATTN_DOCTOR_WORKER_NO_TORCH=1 skips torch.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, TextIO, Tuple

PROTOCOL = 1
T_PROCESS = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))

# Errors after which the CUDA context cannot be trusted: report, then exit for a fresh worker.
FATAL_PATTERNS = (
    "illegal memory access", "illegal instruction", "unspecified launch failure",
    "device-side assert", "misaligned address", "launch failure", "cudaErrorIllegalAddress",
    "CUDA_ERROR_ILLEGAL_ADDRESS", "EXECUTION_FAILED", "hardware stack error",
)
PACKAGES = (
    "torch", "triton", "flash-attn", "flash-attn-3", "flash-attn-4", "nvidia-cutlass-dsl",
    "transformer-engine", "transformer-engine-torch", "xformers", "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
)


class Protocol:
    """Writes protocol lines to the real stdout; fd 1 is pointed at stderr."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self._out: TextIO = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def send(self, event: str, **fields: Any) -> None:
        self._out.write(json.dumps({"event": event, **fields}, default=str) + "\n")
        self._out.flush()


def package_versions() -> Dict[str, str]:
    from importlib import metadata

    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except Exception:
            continue
    return found


def driver_version() -> Optional[str]:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        pass
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            for word in fh.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    return None


def start_torch(requested: str) -> Tuple[Any, Dict[str, Any]]:
    """Import torch and initialise the device; return (device, env fields)."""
    t0 = time.time()
    import torch

    import_s = time.time() - t0
    t1 = time.time()
    use_cuda = requested == "cuda" or (requested == "auto" and torch.cuda.is_available())
    env: Dict[str, Any] = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "device": "cpu",
        "import_s": round(import_s, 4), "packages": package_versions(),
        "python": sys.version.split()[0],
    }
    if use_cuda:
        torch.cuda.init()
        torch.empty(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        props = torch.cuda.get_device_properties(0)
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        env.update(
            device="cuda", gpu=props.name, capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count, memory_mib=props.total_memory // 2**20,
            cudnn=_cudnn_str(cudnn), driver=driver_version(),
        )
        device = torch.device("cuda")
    else:
        device = torch.device("cpu")
    env["cuda_init_s"] = round(time.time() - t1, 4)
    sys.path.insert(0, HERE)  # sibling modules: reference.py, runners.py
    return device, env


def _cudnn_str(v: Optional[int]) -> Optional[str]:
    if not v:
        return None
    if v >= 90000:
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    return f"{v // 1000}.{v // 100 % 10}.{v % 100}"


# --------------------------------------------------------------------------- one case


class _Capture:
    """Collects warnings and torch log records while a library call runs: SDPA explains
    why a backend refused a case only there."""

    def __enter__(self) -> "_Capture":
        import logging
        import warnings

        self.messages: List[str] = []
        self._warn = warnings.catch_warnings(record=True)
        self._caught = self._warn.__enter__()
        warnings.simplefilter("always")
        capture = self

        class _Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                capture.messages.append(record.getMessage())

        self._handler = _Handler(level=logging.WARNING)
        self._logger = logging.getLogger("torch")
        self._logger.addHandler(self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._logger.removeHandler(self._handler)
        self._warn.__exit__(*exc)
        self.messages.extend(str(w.message) for w in self._caught)

    def reasons(self, limit: int = 8) -> List[str]:
        seen: List[str] = []
        for m in self.messages:
            m = m.split("(Triggered internally")[0].strip()
            if m and m not in seen:
                seen.append(m)
        return seen[:limit]


class _StderrTee:
    """Copies what native code writes to fd 2 during a case into a buffer while still
    passing it on: c10 prints some refusal reasons (SDPA's "... not used because") there
    instead of raising Python warnings."""

    def __enter__(self) -> "_StderrTee":
        import threading

        sys.stderr.flush()
        self.chunks: List[bytes] = []
        self._saved = os.dup(2)
        r, w = os.pipe()
        os.dup2(w, 2)
        os.close(w)

        def pump() -> None:
            while True:
                data = os.read(r, 65536)
                if not data:
                    break
                self.chunks.append(data)
                os.write(self._saved, data)
            os.close(r)

        self._thread = threading.Thread(target=pump, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)  # closes the pipe's last write end: the pump sees EOF
        self._thread.join(timeout=2)
        os.close(self._saved)

    def warnings(self, limit: int = 8) -> List[str]:
        """Warning lines, without c10's "[W ...] Warning:" prefix and "(function ...)" tail."""
        from ask import native_warning_lines  # sibling module (this script's folder is on sys.path)

        return native_warning_lines(b"".join(self.chunks).decode("utf-8", "replace"))[:limit]


def _is_fatal(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    if any(p.lower() in text.lower() for p in FATAL_PATTERNS):
        return True
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        try:
            torch.cuda.synchronize()
        except Exception:
            return True
    return False


def _refusal(exc: BaseException, phase: str, reasons: List[str]) -> str:
    """One line for the report: the library's error, then the reasons it gave elsewhere
    (Python warnings, torch log records, native warnings). Long messages keep their head and
    their tail, where libraries such as xformers put the actual reason."""
    msg = f"{phase}: {type(exc).__name__}: {str(exc).strip()}"
    extra = [r for r in reasons if r not in msg]
    if extra:
        msg += " | " + " | ".join(extra)
    return clip(msg)


def clip(text: str, head: int = 700, tail: int = 1100) -> str:
    if len(text) <= head + tail + 20:
        return text
    return text[:head] + " [...] " + text[-tail:]


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def timing_fields(flops: float, ms: float) -> Dict[str, float]:
    """ms and TFLOP/s to 4 significant digits: a small case on a slow or busy machine still
    reports a positive rate (rounding to fixed decimals turned 0.0004 TFLOP/s into 0.0)."""
    ms = max(ms, 1e-9)
    return {"ms": float(f"{ms:.4g}"), "tflops": float(f"{flops / (ms * 1e-3) / 1e12:.4g}")}


def time_case(fn: Any, inp: Any, fwdbwd: bool, device: Any,
              budget_s: float = 0.1, max_reps: int = 20) -> float:
    """Median milliseconds of one call (forward, or forward + backward)."""
    import torch

    def step() -> None:
        inp.zero_grads()
        out = fn()
        if fwdbwd:
            out.backward(inp.dout)

    for _ in range(2):
        step()
    _sync(device)
    times: List[float] = []
    spent = 0.0
    while len(times) < 3 or (spent < budget_s and len(times) < max_reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
        else:
            t = time.perf_counter()
            step()
            ms = (time.perf_counter() - t) * 1e3
        times.append(ms)
        spent += ms / 1e3
    times.sort()
    return times[len(times) // 2]


def run_case(spec: Mapping[str, Any], device: Any,
             tee: Optional[_StderrTee] = None) -> Tuple[Dict[str, Any], bool]:
    """Run and judge one case. Returns (result fields, context_poisoned)."""
    import torch

    import reference as ref
    import runners

    fwdbwd = spec["direction"] == "fwdbwd"
    res: Dict[str, Any] = {"status": "failed", "detail": "", "max_rel_error": None,
                           "ms": None, "tflops": None, "checks": []}
    phase = "inputs"
    with _Capture() as cap:
        try:
            inp = ref.make_inputs(spec, device)
            phase = "setup"
            fn = runners.build(spec, inp, device)
            phase = "forward"
            sizes = [t.numel() * t.element_size() for t in inp.leaves.values()]
            sizes.append(inp.dout.numel() * inp.dout.element_size())
            if os.environ.get("ATTN_DOCTOR_NO_POISON") != "1":  # diagnostic switch
                ref.poison_allocator(sizes, device)
            out = fn()
            if fwdbwd:
                phase = "backward"
                out.backward(inp.dout)
            _sync(device)
        except runners.Unsupported as exc:
            res.update(status="unsupported", detail=str(exc))
            return res, False
        except Exception as exc:  # the library's refusal, or a CUDA error
            fatal = _is_fatal(exc)
            status = "crashed" if fatal else ("failed" if phase == "inputs" else "unsupported")
            oom = getattr(torch.cuda, "OutOfMemoryError", None)
            if oom is not None and isinstance(exc, oom):
                status = "unsupported"  # the shape does not fit this backend's memory needs
            native = tee.warnings() if tee is not None else []
            res.update(status=status, detail=_refusal(exc, phase, cap.reasons() + native))
            return res, fatal

    try:
        grads = inp.grads() if fwdbwd else {}
        got = {"out": out, **grads}
        if spec.get("bench") and not spec.get("judge", True):
            checks = [ref.finite_only(n, t) for n, t in got.items()]
            note = ""
        else:
            keep = ref.dropout_keep(spec, out) if spec.get("dropout", 0.0) else None
            want = ref.reference(spec, inp, keep, torch.float64)
            base = ref.reference(spec, inp, keep, ref.baseline_dtype(spec))
            checks = [ref.check(n, got.get(n), want[n], base[n], spec["dtype"]) for n in want]
            note = ""
            if keep is not None:
                good, note = ref.keep_fraction_ok(spec, keep)
                if not good:
                    res["detail"] = "dropout: " + note
        res["checks"] = [c.to_json() for c in checks]
        errs = [c.rel_error for c in checks if c.rel_error is not None]
        res["max_rel_error"] = max(errs) if errs else None
        bad = [c for c in checks if not c.passed]
        if bad:
            res["detail"] = "; ".join(_describe(c) for c in bad)
        elif not res["detail"]:
            worst = max(checks, key=lambda c: (c.rel_error or 0.0) / (c.tolerance or 1.0))
            res["status"] = "passed"
            res["detail"] = (f"max rel err {worst.rel_error:.2e} ({worst.name}), "
                             f"tol {worst.tolerance:.2e}" if worst.tolerance else "outputs finite")
            if note:
                res["detail"] += "; dropout " + note
        if res["status"] == "passed" and spec.get("bench"):
            ms = time_case(fn, inp, fwdbwd, device)
            res.update(timing_fields(ref.attention_flops(spec), ms))
    except Exception as exc:
        fatal = _is_fatal(exc)
        res.update(status="crashed" if fatal else "failed",
                   detail=clip(f"judging: {type(exc).__name__}: {exc}"))
        return res, fatal
    return res, False


def _describe(c: Any) -> str:
    if c.nonfinite:
        extra = f", {c.unwritten} never written (poison)" if c.unwritten else ""
        return f"{c.name}: {c.nonfinite} non-finite elements{extra}"
    if c.rel_error is None:
        return f"{c.name}: not produced"
    return (f"{c.name}: rel err {c.rel_error:.3g} > tol {c.tolerance:.3g} "
            f"(baseline {c.baseline:.3g})")


# --------------------------------------------------------------------------- self-test hooks


def selftest_case(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """Fake backends for the isolation tests (crash, hang, abort, noisy stdout)."""
    kind = spec["backend"].split(".", 1)[1]
    if kind == "segfault":
        import ctypes

        ctypes.string_at(0)
    if kind == "abort":
        os.abort()
    if kind == "exit":
        os._exit(7)
    if kind == "sleep":
        time.sleep(float(spec.get("sleep_s", 3600)))
    if kind == "print":
        print("library chatter on stdout", flush=True)
        os.write(1, b"C-level chatter on fd 1\n")
    if kind == "raise":
        return {"status": "unsupported", "detail": "RuntimeError: refused by selftest"}
    if kind == "cwarn":  # a refusal whose reason only reaches fd 2, as c10 prints it
        os.write(2, b"[W1121 sdp_utils.cpp:42] Warning: Flash attention requires q,k,v to "
                    b"have the same last dimension (function operator())\n")
        return {"status": "unsupported", "exc": "No available kernel. Aborting execution."}
    if kind == "longerror":
        return {"status": "unsupported", "exc": "does not support inputs: " + "x" * 5000
                + " `cutlassF-pt` is not supported because: the real reason"}
    if kind == "fail":
        return {"status": "failed", "detail": "out: rel err 6.2 > tol 0.01", "max_rel_error": 6.2}
    return {"status": "passed", "detail": "selftest", "max_rel_error": 0.0}


# --------------------------------------------------------------------------- ask the libraries


def ask_libraries(proto: Protocol, asks: List[Mapping[str, Any]], device: Any) -> None:
    """Before any kernel: each installed library's own backend pick for each workload
    (ask.py), one `ask` event per workload. Never fatal to the case run."""
    t0 = time.time()
    try:
        import ask as asker

        for item in asks:
            fields = {k: v for k, v in item.items() if k not in ("name", "libraries")}
            with _StderrTee():
                answers = asker.ask(fields, item.get("libraries"), device)
            proto.send("ask", name=item.get("name", "workload"), answers=answers)
    except Exception as exc:
        proto.send("ask", name="error", answers=[], error=f"{type(exc).__name__}: {exc}")
    proto.send("asked", seconds=round(time.time() - t0, 4))


# --------------------------------------------------------------------------- main


def main() -> int:
    proto = Protocol()
    # faulthandler writes to its own copy of the real stderr: it must still reach the
    # runner when a crash happens while fd 2 is being teed.
    crash_log = os.fdopen(os.dup(2), "w")
    faulthandler.enable(file=crash_log, all_threads=False)
    proto.send("hello", protocol=PROTOCOL, pid=os.getpid(), t_process=T_PROCESS,
               t_hello=time.time(), python=sys.executable)
    selftest = os.environ.get("ATTN_DOCTOR_WORKER_SELFTEST") == "1"
    no_torch = os.environ.get("ATTN_DOCTOR_WORKER_NO_TORCH") == "1" and selftest

    def start(requested: str) -> Any:
        if no_torch:
            proto.send("env", torch=None, device="none", import_s=0.0, cuda_init_s=0.0,
                       packages={}, python=sys.version.split()[0])
            return None
        dev, env = start_torch(requested)
        proto.send("env", **env)
        return dev

    warm = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--warm" else None
    device: Any = start(warm) if warm is not None else None
    doc = json.loads(sys.stdin.read() or "{}")
    if doc.get("protocol", PROTOCOL) != PROTOCOL:
        proto.send("error", detail=f"protocol {doc.get('protocol')} not understood")
        return 2
    cases = list(doc.get("cases", []))
    if warm is None:
        device = start(str(doc.get("device", "auto")))
    elif str(doc.get("device", "auto")) != warm:
        proto.send("error", detail=f"warm worker started for device {warm}, asked for "
                   f"{doc.get('device')}")
        return 2
    if doc.get("ask") and device is not None:
        ask_libraries(proto, doc["ask"], device)
    t_cases = time.time()
    for spec in cases:
        proto.send("start", id=spec["id"], t=time.time())
        t0 = time.time()
        with _StderrTee() as tee:
            if selftest and spec["backend"].startswith("selftest."):
                res, fatal = selftest_case(spec), False
            else:
                res, fatal = run_case(spec, device, tee)
        if "exc" in res:  # selftest refusals go through the same formatting as real ones
            res["detail"] = _refusal(RuntimeError(res.pop("exc")), "forward", tee.warnings())
        res["seconds"] = round(time.time() - t0, 4)
        proto.send("result", id=spec["id"], backend=spec["backend"], **res)
        if fatal:
            sys.stderr.write(f"worker: CUDA context unusable after {spec['id']}; exiting\n")
            sys.stderr.flush()
            return 3
    proto.send("done", cases_s=round(time.time() - t_cases, 4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
