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
    """One worker process: JSON in on stdin, events out through a reader thread."""

    def __init__(self, python: str, cases: Sequence[CaseSpec], device: str,
                 env: Optional[Mapping[str, str]], stderr_path: Path,
                 ask: Sequence[Mapping[str, Any]] = ()) -> None:
        self.t_spawn = time.time()
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            [python, "-u", str(worker_path())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env=full_env, start_new_session=True,
        )
        self.events: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        doc = json.dumps({"protocol": PROTOCOL, "device": device, "ask": list(ask),
                          "cases": [c.to_json() for c in cases]})
        threading.Thread(target=self._feed, args=(doc,), daemon=True).start()
        threading.Thread(target=self._read, daemon=True).start()

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


def run_cases(cases: Sequence[CaseSpec], *, python: str = sys.executable,
              timeout_s: float = DEFAULT_TIMEOUT_S, observer: Optional[Observer] = None,
              env: Optional[Mapping[str, str]] = None, device: str = "auto",
              startup_timeout_s: float = STARTUP_TIMEOUT_S,
              ask: Sequence[Mapping[str, Any]] = ()) -> KernelRun:
    """Run the cases in worker processes; restart after a crash or timeout. `ask`: workloads
    (Workload field dicts, see ask_request) for which the first worker asks each installed
    library which backend it would pick, before any kernel runs (`KernelRun.asked`)."""
    t0 = time.time()
    watch: Observer = observer if observer is not None else NoObserver()
    watch.on_start(len(cases))
    pending: List[CaseSpec] = list(cases)
    results: Dict[str, CaseResult] = {}
    details: Dict[str, CaseDetail] = {}
    env_ev: Dict[str, Any] = {}
    ph: Dict[str, float] = {"worker_start_s": 0.0, "import_s": 0.0, "cuda_init_s": 0.0,
                            "cases_s": 0.0, "restart_s": 0.0}
    workers = 0
    asked: List[Dict[str, Any]] = []

    def record(spec: CaseSpec, status: str, detail: str, *, max_rel: Optional[float] = None,
               ms: Optional[float] = None, tflops: Optional[float] = None,
               seconds: Optional[float] = None, checks: Tuple[TensorCheck, ...] = (),
               tail: str = "") -> None:
        r = CaseResult(id=spec.id, backend=spec.backend, status=status, detail=detail,
                       max_rel_error=max_rel, ms=ms, tflops=tflops)
        results[spec.id] = r
        details[spec.id] = CaseDetail(spec.id, spec.purpose, seconds, checks, tail)
        watch.on_case(r)

    with tempfile.TemporaryDirectory(prefix="attn-doctor-") as tmp:
        while pending:
            try:
                w = _Worker(python, pending, device, env, Path(tmp) / f"worker{workers}.stderr",
                            ask=ask if workers == 0 else ())
            except OSError as exc:
                for c in pending:
                    record(c, "skipped", f"kernel worker could not be started with {python}: "
                           f"{exc}")
                pending.clear()
                break
            workers += 1
            by_id = {c.id: c for c in pending}
            current: Optional[CaseSpec] = None
            started = False
            t_case = t_env = None
            deadline = time.time() + startup_timeout_s
            while True:
                try:
                    ev = w.events.get(timeout=max(0.0, deadline - time.time()))
                except queue.Empty:
                    w.kill()
                    tail = w.stderr_tail()
                    if current is not None:
                        limit = current.timeout_s or timeout_s
                        record(current, "timeout", f"no result within {limit:g} s; worker "
                               "killed", seconds=time.time() - (t_case or t0), tail=tail)
                        pending.remove(current)
                    else:
                        why = "did not start" if not started else "stalled between cases"
                        for c in pending:
                            record(c, "skipped", f"kernel worker {why} within "
                                   f"{startup_timeout_s:g} s", tail=tail)
                        pending.clear()
                    break
                if ev is None:  # worker exited
                    rc = w.wait()
                    tail = w.stderr_tail()
                    if current is not None:
                        record(current, "crashed", f"worker {_exit_text(rc)} during the case",
                               seconds=time.time() - (t_case or t0), tail=tail)
                        pending.remove(current)
                    elif not started:
                        last = tail.splitlines()[-1] if tail else _exit_text(rc)
                        for c in pending:
                            record(c, "skipped", f"kernel worker failed to start: {last}",
                                   tail=tail)
                        pending.clear()
                    break
                kind = ev.get("event")
                now = time.time()
                if kind == "hello":
                    if workers == 1:
                        ph["worker_start_s"] = now - w.t_spawn
                elif kind == "env":
                    started = True
                    t_env = now
                    if workers == 1:
                        env_ev = ev
                        ph["import_s"] = float(ev.get("import_s") or 0.0)
                        ph["cuda_init_s"] = float(ev.get("cuda_init_s") or 0.0)
                    else:
                        ph["restart_s"] += now - w.t_spawn
                    deadline = now + timeout_s
                elif kind == "ask":
                    asked.append({k: v for k, v in ev.items() if k != "event"})
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
            if t_env is not None:
                ph["cases_s"] += time.time() - t_env
            if w.proc.poll() is None:
                w.kill()

    ordered = tuple(results[c.id] for c in cases if c.id in results)
    run = KernelRun(
        results=ordered,
        details=tuple(details[c.id] for c in cases if c.id in details),
        phases=Phases(total_s=time.time() - t0, workers=workers, **ph),
        environment=_environment(env_ev),
        cases=tuple(cases),
        asked=tuple(asked),
    )
    timings, fastest = _timings(run)
    run = replace(run, timings=timings, fastest=fastest)
    watch.on_done(run)
    return run


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
