"""Running kernel cases in an isolated worker process (kernels/worker.py): JSON lines in and
out; a case that crashes the worker or hangs past its timeout is recorded as `crashed` /
`timeout` with the tail of its stderr, and a fresh worker continues with the rest. This module
never imports torch."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Protocol, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from doctor.model import CaseResult, Workload

from doctor.resources import kernels_dir
from doctor.verify.cases import DEFAULT_TIMEOUT_S, PROTOCOL, STARTUP_TIMEOUT_S, STATUSES, CaseSpec
from doctor.verify.results import CaseDetail, Environment, KernelRun, Phases, TensorCheck, Timing



def worker_path() -> Path:
    """kernels/worker.py as shipped (doctor/_data/kernels) or in the source tree."""
    path = kernels_dir() / "worker.py"
    if not path.is_file():
        raise FileNotFoundError(f"kernel worker not found at {path}")
    return path


class Observer(Protocol):
    """Progress of a kernel run, for a UI (doctor/commands/progress.py); library code never prints."""

    def on_start(self, total: int) -> None: ...

    def on_case(self, result: CaseResult) -> None: ...

    def on_done(self, run: KernelRun) -> None: ...


class NoObserver:
    """The default: nobody is watching."""

    def on_start(self, total: int) -> None:
        pass

    def on_case(self, result: CaseResult) -> None:
        pass

    def on_done(self, run: KernelRun) -> None:
        pass


def _tail(path: Path, limit: int = 2000) -> str:
    """The end of a worker's stderr, without faulthandler's list of extension modules."""
    try:
        text = path.read_bytes()[-4 * limit:].decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if not ln.startswith("Extension modules:")]
    return "\n".join(lines).strip()[-limit:]


def _exit_text(rc: Optional[int]) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}"


class _Worker:
    """One worker process: JSON in on stdin, events out through a reader thread. A warm
    worker (`warm=True`) imports torch and initialises the device before the document is sent
    (`send`); a cold one is sent its document at once."""

    def __init__(self, python: str, device: str, env: Optional[Mapping[str, str]],
                 stderr_path: Path, *, warm: bool = False) -> None:
        self.t_spawn = time.time()
        self.python, self.device, self.env = python, device, dict(env or {})
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            [python, "-u", str(worker_path()), *(("--warm", device) if warm else ())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env=full_env, start_new_session=True,
        )
        self.events: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def send(self, cases: Sequence[CaseSpec], ask: Sequence[Mapping[str, Any]] = ()) -> None:
        doc = json.dumps({"protocol": PROTOCOL, "device": self.device, "ask": list(ask),
                          "cases": [c.to_json() for c in cases]})
        threading.Thread(target=self._feed, args=(doc,), daemon=True).start()

    def _feed(self, doc: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(doc.encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                ev = json.loads(raw)
            except ValueError:
                continue  # not a protocol line
            if isinstance(ev, dict):
                ev["_received"] = time.time()  # a warm worker's events wait in the queue
                self.events.put(ev)
        self.events.put(None)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: only our worker
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.wait()

    def wait(self) -> Optional[int]:
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return None
        finally:
            self._stderr.close()

    def stderr_tail(self) -> str:
        return _tail(self.stderr_path)


class WarmWorker:
    """A kernel worker started before the case list is known: it imports torch and
    initialises the GPU while the probe runs, and `run_cases(..., warm=)` gives it the cases.
    `close()` stops it if it was not used (or is done); safe to call twice."""

    def __init__(self, python: str = sys.executable, device: str = "auto",
                 env: Optional[Mapping[str, str]] = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="attn-doctor-warm-")
        self.worker: Optional[_Worker] = _Worker(python, device, env,
                                                 Path(self._tmp.name) / "warm.stderr", warm=True)

    def take(self, python: str, device: str, env: Optional[Mapping[str, str]]) -> Optional[_Worker]:
        """The worker, once, if it was started the way this run would start one."""
        w, self.worker = self.worker, None
        if w is not None and (w.python, w.device, w.env) == (python, device, dict(env or {})):
            return w
        if w is not None:
            w.kill()
        return None

    def close(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None
        self._tmp.cleanup()

    def __enter__(self) -> "WarmWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Run:
    """What one run_cases call collects."""

    def __init__(self, watch: Observer) -> None:
        self.watch = watch
        self.results: Dict[str, CaseResult] = {}
        self.details: Dict[str, CaseDetail] = {}
        self.env_ev: Dict[str, Any] = {}
        self.asked: List[Dict[str, Any]] = []
        self.ph: Dict[str, float] = {"worker_start_s": 0.0, "import_s": 0.0, "cuda_init_s": 0.0,
                                     "restart_s": 0.0}
        self.workers = 0
        self.first_env: Optional[float] = None

    def record(self, spec: CaseSpec, status: str, detail: str, *, max_rel: Optional[float] = None,
               ms: Optional[float] = None, tflops: Optional[float] = None,
               seconds: Optional[float] = None, checks: Tuple[TensorCheck, ...] = (),
               tail: str = "") -> None:
        r = CaseResult(id=spec.id, backend=spec.backend, status=status, detail=detail,
                       max_rel_error=max_rel, ms=ms, tflops=tflops)
        self.results[spec.id] = r
        self.details[spec.id] = CaseDetail(spec.id, spec.purpose, seconds, checks, tail)
        self.watch.on_case(r)


def _run_sequence(run: _Run, cases: Sequence[CaseSpec], *, python: str, timeout_s: float,
               env: Optional[Mapping[str, str]], device: str, startup_timeout_s: float,
               ask: Sequence[Mapping[str, Any]], warm: Optional[WarmWorker], tmp: str) -> None:
    """Run `cases` in one worker at a time; after a crash or a timeout, a fresh worker takes
    the rest. `ask` goes to the first worker, which also gives the run's environment and
    start-up phases."""
    pending: List[CaseSpec] = list(cases)
    record = run.record
    while pending:
        try:
            w_warm = warm.take(python, device, env) if warm is not None and run.workers == 0 else None
            w = w_warm or _Worker(python, device, env, Path(tmp) / f"worker{run.workers}.stderr")
            w.send(pending, ask=ask if run.workers == 0 else ())
        except OSError as exc:
            for c in pending:
                record(c, "skipped", f"kernel worker could not be started with {python}: {exc}")
            pending.clear()
            break
        run.workers += 1
        first = run.workers == 1
        by_id = {c.id: c for c in pending}
        current: Optional[CaseSpec] = None
        started = False
        t_case: Optional[float] = None
        deadline = time.time() + startup_timeout_s
        while True:
            try:
                ev = w.events.get(timeout=max(0.0, deadline - time.time()))
            except queue.Empty:
                w.kill()
                tail = w.stderr_tail()
                if current is not None:
                    limit = current.timeout_s or timeout_s
                    record(current, "timeout", f"no result within {limit:g} s; worker killed",
                           seconds=time.time() - (t_case or w.t_spawn), tail=tail)
                    pending.remove(current)
                else:
                    why = "did not start" if not started else "stalled between cases"
                    for c in pending:
                        record(c, "skipped", f"kernel worker {why} within {startup_timeout_s:g} s",
                               tail=tail)
                    pending.clear()
                break
            if ev is None:  # worker exited
                rc = w.wait()
                tail = w.stderr_tail()
                if current is not None:
                    record(current, "crashed", f"worker {_exit_text(rc)} during the case",
                           seconds=time.time() - (t_case or w.t_spawn), tail=tail)
                    pending.remove(current)
                elif not started:
                    last = tail.splitlines()[-1] if tail else _exit_text(rc)
                    for c in pending:
                        record(c, "skipped", f"kernel worker failed to start: {last}", tail=tail)
                    pending.clear()
                break
            kind = ev.get("event")
            now = time.time()
            received = float(ev.pop("_received", None) or now)  # earlier for a warm worker
            if kind == "hello":
                if first:
                    run.ph["worker_start_s"] = received - w.t_spawn
            elif kind == "env":
                started = True
                if first:
                    run.first_env = now
                    run.env_ev = ev
                    run.ph["import_s"] = float(ev.get("import_s") or 0.0)
                    run.ph["cuda_init_s"] = float(ev.get("cuda_init_s") or 0.0)
                else:
                    run.ph["restart_s"] += received - w.t_spawn
                deadline = now + timeout_s
            elif kind == "ask":
                run.asked.append({k: v for k, v in ev.items() if k != "event"})
                deadline = now + timeout_s
            elif kind == "start":
                current = by_id.get(str(ev.get("id")))
                t_case = now
                limit = (current.timeout_s if current and current.timeout_s else timeout_s)
                deadline = now + limit
            elif kind == "result":
                spec = by_id.get(str(ev.get("id")))
                if spec is not None and spec in pending:
                    checks = tuple(TensorCheck(**{k: c.get(k) for k in
                                                  ("name", "rel_error", "baseline",
                                                   "tolerance", "nonfinite", "unwritten")})
                                   for c in ev.get("checks") or [])
                    status = str(ev.get("status"))
                    record(spec, status if status in STATUSES else "failed",
                           str(ev.get("detail", "")), max_rel=ev.get("max_rel_error"),
                           ms=ev.get("ms"), tflops=ev.get("tflops"),
                           seconds=ev.get("seconds"), checks=checks,
                           tail=w.stderr_tail() if status == "crashed" else "")
                    pending.remove(spec)
                current = None
                deadline = now + timeout_s
            elif kind == "done":
                w.wait()
                break
        if w.proc.poll() is None:
            w.kill()


def run_cases(cases: Sequence[CaseSpec], *, python: str = sys.executable,
              timeout_s: float = DEFAULT_TIMEOUT_S, observer: Optional[Observer] = None,
              env: Optional[Mapping[str, str]] = None, device: str = "auto",
              startup_timeout_s: float = STARTUP_TIMEOUT_S,
              ask: Sequence[Mapping[str, Any]] = (),
              warm: Optional[WarmWorker] = None) -> KernelRun:
    """Run the cases in worker processes; restart after a crash or timeout. `ask`: workloads
    (Workload field dicts, see ask_request) for which the first worker asks each installed
    library which backend it would pick, before any kernel runs (`KernelRun.asked`). `warm`:
    a worker already started (same python, device and env) serves as the first one.

    One worker at a time: several CUDA contexts on one GPU time-slice, and on an H100 four
    workers took 19.1 s for the 68-case matrix where one took 13.6 s
    (benchmarks/results/gpu-check.md)."""
    t0 = time.time()
    watch: Observer = observer if observer is not None else NoObserver()
    watch.on_start(len(cases))
    run = _Run(watch)
    with tempfile.TemporaryDirectory(prefix="attn-doctor-") as tmp:
        _run_sequence(run, cases, python=python, timeout_s=timeout_s, env=env, device=device,
                   startup_timeout_s=startup_timeout_s, ask=ask, warm=warm, tmp=tmp)
    end = time.time()
    ordered = tuple(run.results[c.id] for c in cases if c.id in run.results)
    kernel_run = KernelRun(
        results=ordered,
        details=tuple(run.details[c.id] for c in cases if c.id in run.details),
        phases=Phases(total_s=end - t0, workers=run.workers,
                      cases_s=(end - run.first_env) if run.first_env is not None else 0.0, **run.ph),
        environment=_environment(run.env_ev),
        cases=tuple(cases),
        asked=tuple(run.asked),
    )
    timings, fastest = _timings(kernel_run)
    kernel_run = replace(kernel_run, timings=timings, fastest=fastest)
    watch.on_done(kernel_run)
    return kernel_run


def _environment(ev: Mapping[str, Any]) -> Environment:
    names = {f.name for f in fields(Environment)} - {"packages"}
    kw = {k: (str(v) if v is not None else None) for k, v in ev.items() if k in names}
    pk = ev.get("packages") or {}
    return Environment(packages=tuple(sorted((str(k), str(v)) for k, v in pk.items())), **kw)


def _timings(run: KernelRun) -> Tuple[Tuple[Timing, ...], Tuple[Timing, ...]]:
    """Per shape and backend: the timed case, whether its correctness twins passed, and
    the fastest backend whose cases for that shape all passed."""
    by_id = {r.id: r for r in run.results}
    timings: List[Timing] = []
    for c in run.cases:
        r = by_id.get(c.id)
        if not c.bench or c.shape is None or r is None or r.ms is None or r.status != "passed":
            continue
        twins = [by_id.get(o.id) for o in run.cases
                 if o.shape == c.shape and o.backend == c.backend and o.id != c.id]
        correct = bool(twins) and all(t is not None and t.status == "passed" for t in twins)
        timings.append(Timing(c.shape, c.backend, c.id, float(r.ms),
                              float(r.tflops) if r.tflops is not None else None, correct))
    fastest: Dict[str, Timing] = {}
    for t in timings:
        if t.correct and (t.shape not in fastest or t.ms < fastest[t.shape].ms):
            fastest[t.shape] = t
    return tuple(timings), tuple(fastest.values())




def ask_request(workload: Workload, name: str = "workload") -> Dict[str, Any]:
    """The worker's `ask` entry for a workload: its fields as kernels/ask.py reads them."""
    keys = ("dtype", "head_dim_qk", "head_dim_v", "num_heads", "num_kv_heads", "seq_len_q",
            "seq_len_kv", "batch_size", "mask", "window_size", "softcap", "alibi", "dropout",
            "qkv_format", "qkv_packed", "varlen", "training", "deterministic", "fp8")
    req: Dict[str, Any] = {k: getattr(workload, k) for k in keys}
    req["window_size"] = list(workload.window_size) if workload.window_size else None
    req["cp_size"] = workload.cp_size
    req["name"] = name
    return req
