"""The per-rank entry of `check --distributed`: `run_distributed(options) -> ClusterReport`.

Every rank: join the job (store, then process groups), probe its environment, run its kernel
cases on its own GPU, take part in the comm smoke test and the context-parallel check, send
its results to rank 0. Rank 0 also coordinates: it decides each phase (see gather.py), gathers,
and assembles the one report of the job.

The work runs in a worker thread; the main thread supervises it with deadlines, so a rank
that hangs (in its probe, a kernel, a collective) costs a timeout and is named in the report,
and this process can still return. `ClusterReport.hard_exit` tells the caller a thread is still
blocked inside a collective: render the report, flush, then end with `os._exit(code)`.
Nothing here prints.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from doctor.cluster import assemble
from doctor.cluster.cp_attention import CpConfig
from doctor.cluster.gather import Decision, NoWord, Session, Stopped, Timeouts, missing_since
from doctor.cluster.launch import Launch, detect
from doctor.cluster.report import ClusterReport, CommResult, CpResult
from doctor.model import Workload
from doctor.verify.results import KernelRun

SUPERVISE_POLL_S = 0.5

Probe = Callable[[bool], Dict[str, Any]]
# (snapshot, workload, CUDA device index of this rank or None) -> this rank's kernel run
KernelRunner = Callable[[Mapping[str, Any], Optional[Workload], Optional[int]], KernelRun]


class KernelsSkipped(Exception):
    """A kernel runner's way to say the stage cannot run here, and why (not an error)."""


@dataclass(frozen=True)
class ClusterOptions:
    """What `check --distributed` asks of every rank. Defaults suit a real job."""

    loaded: bool = True  # probe loaded facts (a child process imports torch)
    kernels: bool = True  # run this rank's kernel cases (doctor.verify)
    comm: bool = True  # all_reduce / all_gather smoke test
    cp: bool = True  # context-parallel attention check
    timeouts: Timeouts = field(default_factory=Timeouts)
    backend: Optional[str] = None  # None: nccl when every rank has CUDA, else gloo
    cp_config: Optional[CpConfig] = None  # None: CpConfig.for_device(...)
    comm_bytes: Optional[int] = None  # None: 256 MiB on GPUs, 1 MiB on CPU
    workload: Optional[Workload] = None  # for the kernel cases; None: the default profile
    environ: Optional[Mapping[str, str]] = None  # None: os.environ
    host: Optional[str] = None  # None: socket.gethostname()
    probe: Optional[Probe] = None  # None: doctor.probe.collect
    kernel_runner: Optional[KernelRunner] = None  # None: default_kernels (doctor.verify)


# --------------------------------------------------------------------------- defaults


def default_probe(loaded: bool) -> Dict[str, Any]:
    from doctor.probe import collect

    return collect(loaded=loaded)


def default_kernels(
    snapshot: Mapping[str, Any], workload: Optional[Workload], device_index: Optional[int]
) -> KernelRun:
    """This rank's kernel cases through doctor.verify, in its worker process, on this rank's GPU.

    The workload's own shapes on every installed backend (the default profile when None)."""
    from doctor import verify
    from doctor.snapshot import facts_from_snapshot
    from doctor.workload import DEFAULT

    facts = facts_from_snapshot(snapshot)
    ok, why = verify.kernels_available(facts)
    if not ok:
        raise KernelsSkipped(why)
    cases = verify.plan_cases(workload or DEFAULT, verify.installed_backends(facts))
    env: Dict[str, str] = {}
    if device_index is not None:
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[device_index] if device_index < len(visible) else str(device_index)
    return verify.run_cases(cases, env=env, device="cuda" if env else "auto")


def _cuda_usable() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception:  # noqa: BLE001 - a broken torch is a fact for the report
        return False


# --------------------------------------------------------------------------- one rank's work


class _Work:
    """What this rank has found so far; read by the supervisor while the worker writes."""

    def __init__(self, launch: Launch, host: str) -> None:
        self.launch = launch
        self.host = host
        self.lock = threading.Lock()
        self.phase = "ready"
        self.device = ""
        self.device_name: Optional[str] = None
        self.snapshot: Optional[Dict[str, Any]] = None
        self.probe_error: Optional[str] = None
        self.kernel_run: Optional[KernelRun] = None
        self.kernels_skipped: Optional[str] = None
        self.comm: Optional[CommResult] = None
        self.cp: Tuple[CpResult, ...] = ()
        self.errors: List[str] = []
        self.decisions: List[Decision] = []
        self.lost_rank0: Optional[str] = None
        self.done = threading.Event()

    def set(self, **values: Any) -> None:
        with self.lock:
            for k, v in values.items():
                setattr(self, k, v)

    def error(self, what: str, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(f"{what}: {type(exc).__name__}: {exc}")

    def payload(self) -> str:
        with self.lock:
            return assemble.payload_doc(
                rank=self.launch.rank,
                local_rank=self.launch.local_rank,
                host=self.host,
                device=self.device,
                device_name=self.device_name,
                snapshot=self.snapshot,
                probe_error=self.probe_error,
                kernels=self.kernel_run.results if self.kernel_run else (),
                kernels_skipped=self.kernels_skipped,
                comm=self.comm,
                cp=self.cp,
                errors=list(self.errors),
                phase=self.phase,
            )


def _device(backend: str, local_rank: int) -> Any:
    import torch

    if backend != "nccl":
        return torch.device("cpu")
    index = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)  # per thread: the worker calls this too
    return torch.device("cuda", index)


def _device_name(device: Any) -> Optional[str]:
    if device.type != "cuda":
        return None
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)} (sm{major}{minor})"


def _worker(session: Session, options: ClusterOptions, backend: str, work: _Work, deadline: float) -> None:
    """Every rank's sequence of phases; never raises (errors become data)."""
    launch = session.launch
    member = True

    def step(phase: str) -> Optional[Decision]:
        nonlocal member
        if member:
            session.arrive(phase)
        work.set(phase=phase)
        try:
            d = session.decision(phase, max(0.0, deadline - session.clock()))
        except NoWord as exc:
            work.set(lost_rank0=str(exc))
            return None
        except Stopped:  # SIGTERM on this process: rank 0's coordinator reports
            return None
        with work.lock:
            work.decisions.append(d)
        member = member and launch.rank in d.members
        return d

    try:
        device = _device(backend, launch.local_rank)
        work.set(device=str(device), device_name=_device_name(device))
        session.mark("probe")
        work.set(phase="probe")
        try:
            snapshot = (options.probe or default_probe)(options.loaded)
            work.set(snapshot=snapshot)
        except Exception as exc:  # noqa: BLE001
            work.set(probe_error=f"{type(exc).__name__}: {exc}")
            snapshot = None
        session.mark("probed")

        d = step("comm")
        if d is None:
            return
        if d.go and member and options.comm:
            from doctor.cluster import comm

            try:
                work.set(comm=comm.smoke_test(launch.rank, launch.world_size, device, session.data_group, options.comm_bytes))
            except Exception as exc:  # noqa: BLE001
                work.error("comm", exc)

        d = step("cp")
        if d is None:
            return
        if d.go and member and options.cp:
            from doctor.cluster import cp_attention

            cfg = options.cp_config or CpConfig.for_device(device.type == "cuda", launch.world_size)
            try:
                results, errors = cp_attention.check(launch.rank, launch.world_size, device, cfg, session.data_group)
                work.set(cp=results)
                with work.lock:
                    work.errors.extend(errors)
            except Exception as exc:  # noqa: BLE001
                work.error("cp", exc)

        work.set(phase="kernels")
        session.mark("kernels")
        if not options.kernels:
            work.set(kernels_skipped="kernel cases not requested")
        elif snapshot is None:
            work.set(kernels_skipped="no snapshot: the probe failed")
        else:
            try:
                index = device.index if device.type == "cuda" else None
                runner = options.kernel_runner or default_kernels
                work.set(kernel_run=runner(snapshot, options.workload, index))
            except KernelsSkipped as exc:
                work.set(kernels_skipped=str(exc))
            except Exception as exc:  # noqa: BLE001 - a broken verify stage: skipped, with why
                work.set(kernels_skipped=f"kernel cases could not run: {type(exc).__name__}: {exc}")

        work.set(phase="gather")
        if launch.rank == 0:
            session.arrive("gather")  # rank 0's coordinator gathers on this rank's behalf
            return
        d = step("gather")
        if d is None or not member:
            return
        session.gather(work.payload(), d.members)
        work.set(phase="done")
        session.mark("done")
    except Exception as exc:  # noqa: BLE001 - the supervisor reports what is known
        work.error(f"phase {work.phase}", exc)
    finally:
        work.done.set()


# --------------------------------------------------------------------------- rank 0


def _coordinate(session: Session, options: ClusterOptions, work: _Work) -> Tuple[Dict[int, Any], List[Decision], List[int], List[str]]:
    """Decide every phase, then gather. Returns (payload docs by rank, decisions, gather members, notes)."""
    t = options.timeouts
    world = session.launch.world_size
    live = set(range(world))
    decisions: List[Decision] = []
    notes: List[str] = []
    # comm waits for the probes, gather for the kernel cases (local work) and the CP check.
    phases = (("comm", t.local_s), ("cp", t.collective_s), ("gather", t.local_s + t.collective_s))
    for phase, seconds in phases:
        arrived = session.wait_arrivals(phase, live, seconds)
        missing = tuple(sorted(live - arrived))
        live = arrived
        if phase == "gather":
            d = Decision(phase, True, tuple(sorted(live | {0})), missing)
        else:
            go = len(live) == world
            reason = "" if go else f"skipped: ranks {sorted(set(range(world)) - live)} are not here"
            d = Decision(phase, go, tuple(sorted(live)), missing, reason)
        if missing:
            notes.append(f"gave up waiting at phase {phase!r} after {seconds:g} s for ranks {list(missing)}")
        session.publish(d)
        decisions.append(d)
    members = list(decisions[-1].members)
    received = session.gather(work.payload(), members) or []
    payloads = {r: json.loads(p) for r, p in enumerate(received) if p is not None}
    return payloads, decisions, members, notes


def _report_rank0(
    session: Session,
    options: ClusterOptions,
    backend: str,
    payloads: Mapping[int, Mapping[str, Any]],
    decisions: List[Decision],
    members: List[int],
    notes: List[str],
    joined: Mapping[int, Mapping[str, Any]],
    started: float,
    hard_exit: bool,
    kernel_run: Optional[KernelRun] = None,
) -> ClusterReport:
    launch = session.launch
    last = {r: session.last_phase(r) for r in range(launch.world_size) if r not in payloads}
    given_up = missing_since(decisions)
    last.update({r: last.get(r) or p for r, p in given_up.items()})
    table = assemble.rows(launch.world_size, payloads, joined, last, gathered_from=members)
    comm = assemble.merge_comm(payloads)
    if comm is None:
        decided = [d for d in decisions if d.phase == "comm"]
        if not options.comm:
            why = "not requested"
        elif not decided:
            why = "not reached: the run stopped before the comm phase"
        else:
            why = decided[0].reason or "no rank reported a result"
        comm = CommResult(backend=backend, device="", world_size=launch.world_size, ok=None, detail=why)
    cp = assemble.cp_from((payloads.get(0) or {}).get("cp") or ())
    kernels = tuple(
        (r, k) for r in sorted(payloads) for k in assemble.kernels_from(payloads[r].get("kernels") or ())
    )
    waited = {"join": options.timeouts.join_s, "local": options.timeouts.local_s}
    found = assemble.findings(table, payloads, comm, cp, kernels, waited)
    return ClusterReport(
        rank=0,
        world_size=launch.world_size,
        launcher=launch.launcher,
        backend=backend,
        complete=all(r.status == "answered" for r in table),
        ranks=table,
        findings=found,
        kernels=kernels,
        kernel_run=kernel_run,
        comm=comm,
        cp=cp,
        notes=tuple(notes),
        hard_exit=hard_exit,
        elapsed_s=time.monotonic() - started,
        snapshots=tuple((r, p["snapshot"]) for r, p in sorted(payloads.items()) if p.get("snapshot")),
    )


# --------------------------------------------------------------------------- entry


class _SigTerm:
    """While rank 0 coordinates, SIGTERM (torchrun stopping the job because a rank exited)
    cuts the waits short so the report still comes out. Main thread only; restored after."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.previous: Any = None
        self.fired = False

    def __enter__(self) -> "_SigTerm":
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.fired = True
        self.session.stop.set()

    def __exit__(self, *exc: Any) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def _setup_backend(session: Session, options: ClusterOptions, started: float) -> Tuple[Optional[str], Dict[int, Any], str]:
    """Rank 0 waits for every rank to join and picks the backend all can use.

    Returns (backend or None when the run stops here, joined ranks, why it stops)."""
    launch = session.launch
    t = options.timeouts
    if launch.rank == 0:
        world = set(range(launch.world_size))
        session.poll_until(lambda: int(session.store.add("count/joined", 0)) >= launch.world_size, started + t.join_s)
        joined = session.joined()
        missing = sorted(world - set(joined))
        cuda_everywhere = all(info.get("cuda") for info in joined.values())
        backend = options.backend or ("nccl" if cuda_everywhere else "gloo")
        d = Decision("setup", not missing, tuple(sorted(joined)), tuple(missing), backend)
        session.publish(d)
        return (backend if d.go else None), joined, "" if d.go else f"ranks {missing} never joined"
    try:
        d = session.decision("setup", max(0.0, started + t.straggler_s - session.clock()))
    except NoWord as exc:
        return None, {}, str(exc)
    if not d.go:
        return None, {}, f"rank 0 stopped the run: ranks {list(d.missing)} never joined"
    return d.reason, {}, ""


def _bare(launch: Launch, backend: str, complete: bool, notes: Tuple[str, ...], started: float, **kw: Any) -> ClusterReport:
    return ClusterReport(
        rank=launch.rank,
        world_size=launch.world_size,
        launcher=launch.launcher,
        backend=backend,
        complete=complete,
        notes=notes,
        elapsed_s=time.monotonic() - started,
        **kw,
    )


def run_distributed(options: ClusterOptions) -> ClusterReport:
    """Run the distributed check on this rank. Rank 0's report (`is_reporter`) is the job's.

    Raises InputError when no launcher set the rank variables. Every other failure (a rank
    that never joins, hangs, dies, a collective that fails) is in the report.
    """
    environ = os.environ if options.environ is None else options.environ
    launch = detect(environ)
    host = options.host or socket.gethostname()
    started = time.monotonic()
    t = options.timeouts
    try:
        session = Session.connect(launch, t, host, cuda=_cuda_usable())
    except Exception as exc:  # noqa: BLE001 - unreachable store: this rank reports alone
        where = f"{launch.master_addr}:{launch.master_port}"
        return _bare(launch, "", False, (f"could not reach rank 0's store at {where}: {type(exc).__name__}: {exc}",), started)

    with _SigTerm(session) as sigterm:
        try:
            backend, joined, why = _setup_backend(session, options, started)
        except Stopped:
            backend, joined, why = None, session.joined(), "stopped by SIGTERM while waiting for ranks to join"
        if backend is None:
            if launch.rank != 0:
                return _bare(launch, "", "never joined" not in why, (why,), started)
            own = {0: json.loads(assemble.payload_doc(0, launch.local_rank, host, phase="joined"))}
            table = assemble.rows(launch.world_size, own, joined, {})
            found = tuple(assemble.missing_findings(table, {"join": t.join_s}))
            return _bare(launch, "", False, (why,), started, ranks=table, findings=found)
        try:
            session.init_groups(backend)
            if backend == "nccl":
                _device(backend, launch.local_rank)
        except Exception as exc:  # noqa: BLE001
            note = f"process group ({backend}) could not start: {type(exc).__name__}: {exc}"
            if launch.rank != 0:
                return _bare(launch, backend, False, (note,), started)
            own = {0: json.loads(assemble.payload_doc(0, launch.local_rank, host, phase="joined", errors=[note]))}
            table = assemble.rows(launch.world_size, own, joined, {r: "joined" for r in joined})
            return _bare(launch, backend, False, (note,), started, ranks=table,
                         findings=tuple(assemble.missing_findings(table, {"join": t.join_s})))

        work = _Work(launch, host)
        deadline = started + t.straggler_s
        thread = threading.Thread(
            target=_worker, args=(session, options, backend, work, deadline), name=f"attn-doctor-rank{launch.rank}", daemon=True
        )
        thread.start()

        if launch.rank != 0:
            why = _supervise(session, work, deadline)
            stuck = not work.done.is_set()
            notes: Tuple[str, ...] = ()
            if stuck:
                notes = (f"this rank's checks did not finish (stuck in phase {work.phase!r}): {why}",)
            elif work.lost_rank0:
                notes = (work.lost_rank0,)
            if not stuck:
                _close(session)
            return _bare(launch, backend, not stuck and not work.lost_rank0, notes, started, hard_exit=stuck)

        notes_list: List[str] = []
        try:
            payloads, decisions, members, notes_list = _coordinate(session, options, work)
        except Stopped:
            payloads = {0: json.loads(work.payload())}
            with work.lock:
                decisions = list(work.decisions)
            members = [0]
            notes_list = ["SIGTERM: the launcher is stopping the job (usually because another rank exited); "
                          "report made from what had arrived"]
        except Exception as exc:  # noqa: BLE001 - e.g. the gather itself failed
            payloads = {0: json.loads(work.payload())}
            decisions, members = [], [0]
            notes_list = [f"coordination failed: {type(exc).__name__}: {exc}"]
        if not sigterm.fired:
            work.done.wait(1.0)  # rank 0's own worker has arrived at the gather by now, or is stuck
        stuck = not work.done.is_set()
        if stuck and not sigterm.fired:
            notes_list.append(f"rank 0's own checks did not finish (stuck in phase {work.phase!r})")
        report = _report_rank0(session, options, backend, payloads, decisions, members, notes_list, joined, started, stuck, work.kernel_run)
        if stuck or (not report.complete and backend == "nccl"):
            # a communicator with a rank that vanished may block in its destructor: leave it
            return replace(report, hard_exit=True)
        _close(session)
        return report


def _supervise(session: Session, work: _Work, deadline: float) -> str:
    """A non-zero rank's main thread: wait for the worker, but give up as soon as rank 0 has
    (its gather decision leaves this rank out, or rank 0's store is gone), or at `deadline`."""
    rank = session.launch.rank
    while not work.done.wait(SUPERVISE_POLL_S):
        if session.clock() >= deadline:
            return f"no progress within {session.timeouts.straggler_s:g} s"
        try:
            d = session.published("gather")
        except Exception as exc:  # noqa: BLE001 - rank 0 exited: nobody is waiting for us
            return f"rank 0's store is gone ({type(exc).__name__})"
        if d is not None and rank not in d.members:
            return "rank 0 reported without this rank"
    return ""


def _close(session: Session) -> None:
    try:
        session.close()
    except Exception:  # noqa: BLE001 - teardown problems do not change the report
        pass
