"""Joining the job, agreeing on phases, and gathering results to rank 0, all with timeouts.

Two planes, both torch.distributed:

- control: the job's c10d key-value store (rank 0's TCPStore, or torchrun's agent store).
  Each rank posts which phase it reached; before every collective phase rank 0 waits, up to
  that phase's timeout, for the ranks still in the run, then publishes a decision: run the
  collective (every rank is there) or skip it, and who is still in. Nobody enters a collective
  without a "go", so a rank that hung or died costs one timeout, never a hang, and rank 0
  knows exactly which ranks answered and how far the others got. Waits poll short `check`
  calls (a blocking store `wait` would hold the client's lock against the other thread).
- data: a gloo process group (CPU, works everywhere) for the result objects (gather_object
  to rank 0), next to the job's backend (NCCL on GPUs, gloo on CPU) for the comm and CP
  checks. When some ranks dropped out, the gather runs on a subgroup of those still in.

Timeouts bound everything: store connection and process-group init (`join_s`), each phase.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from doctor.cluster.launch import Launch

KEY_PREFIX = "attn-doctor"
POLL_FIRST_S = 0.02
POLL_MAX_S = 0.25


@dataclass(frozen=True)
class Timeouts:
    """Seconds each stage may take before the ranks that have not reached it are given up."""

    join_s: float = 300.0  # every rank reaches the store and the process group
    local_s: float = 600.0  # each rank's local work: the probe; the kernel cases
    collective_s: float = 300.0  # each collective phase: comm, cp, gather
    straggler: Optional[float] = None  # a non-zero rank gives up on itself; None: derived

    @classmethod
    def uniform(cls, seconds: float) -> "Timeouts":
        return cls(join_s=seconds, local_s=seconds, collective_s=seconds)

    @property
    def total_s(self) -> float:
        """Rank 0 is done within this (join, probe, comm, cp, kernels, gather)."""
        return self.join_s + 2 * self.local_s + 4 * self.collective_s

    @property
    def straggler_s(self) -> float:
        """When a rank gives up on its own stuck work: after rank 0 has surely reported."""
        if self.straggler is not None:
            return self.straggler
        return self.total_s + max(10.0, 0.1 * self.total_s)


@dataclass(frozen=True)
class Decision:
    """Rank 0's word on one phase."""

    phase: str
    go: bool  # run the collective (comm / cp); for "gather": always True
    members: Tuple[int, ...]  # ranks still in the run
    missing: Tuple[int, ...] = ()  # ranks given up at this phase
    reason: str = ""

    def to_json(self) -> str:
        return json.dumps(
            {"phase": self.phase, "go": self.go, "members": list(self.members), "missing": list(self.missing), "reason": self.reason}
        )

    @classmethod
    def from_json(cls, text: str) -> "Decision":
        d = json.loads(text)
        return cls(d["phase"], bool(d["go"]), tuple(d["members"]), tuple(d["missing"]), d.get("reason", ""))


class Stopped(Exception):
    """The wait was cut short (the launcher is stopping the job)."""


class NoWord(Exception):
    """Rank 0 published no decision in time (it died or hung)."""


def _text(raw: Any) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else str(raw)


class Session:
    """This rank's membership of one diagnostic run: the store, the groups, the phases."""

    def __init__(
        self,
        launch: Launch,
        store: Any,
        timeouts: Timeouts,
        host: str,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.launch = launch
        self.store = store  # a PrefixStore private to this run
        self.timeouts = timeouts
        self.host = host
        self.clock = clock
        self.sleep = sleep
        self.stop = threading.Event()
        self.objects_group: Any = None  # gloo group for gather_object
        self.data_group: Any = None  # the job's backend (None: the default group)
        self.raw_store: Any = None  # the TCPStore itself: rank 0 serves it while this lives

    # ----------------------------------------------------------------- joining

    @classmethod
    def connect(cls, launch: Launch, timeouts: Timeouts, host: str, cuda: bool) -> "Session":
        """Reach the job's store (rank 0 serves it unless torchrun's agent does) and say hello.

        `cuda`: this rank can use a GPU (rank 0 picks NCCL only when every rank can)."""
        import torch.distributed as dist

        is_master = launch.rank == 0 and not launch.agent_store
        raw = dist.TCPStore(
            launch.master_addr,
            launch.master_port,
            None,
            is_master,
            timedelta(seconds=timeouts.join_s),
            wait_for_workers=False,
        )
        store = dist.PrefixStore(f"{KEY_PREFIX}/{launch.run_id}/", raw)
        session = cls(launch, store, timeouts, host)
        session.raw_store = raw
        hello = {"host": host, "local_rank": launch.local_rank, "cuda": cuda}
        store.set(f"joined/{launch.rank}", json.dumps(hello))
        store.add("count/joined", 1)
        session.mark("joined")
        return session

    def init_groups(self, backend: str) -> None:
        """The default process group on the job's backend, plus a gloo group for objects."""
        import torch.distributed as dist

        timeout = timedelta(seconds=self.timeouts.join_s)
        if backend == "nccl":
            # NCCL's own watchdog aborts the process after its timeout: leave ours room to report.
            timeout = timedelta(seconds=self.timeouts.join_s + 4 * self.timeouts.collective_s)
        dist.init_process_group(
            backend=backend,
            store=dist.PrefixStore("pg/", self.store),
            rank=self.launch.rank,
            world_size=self.launch.world_size,
            timeout=timeout,
        )
        if backend == "gloo":
            self.objects_group = None
        else:
            self.objects_group = dist.new_group(
                backend="gloo", timeout=timedelta(seconds=self.timeouts.collective_s)
            )
        self.mark("ready")

    # ----------------------------------------------------------------- control plane

    def _has(self, key: str) -> bool:
        return bool(self.store.check([key]))

    def _get(self, key: str) -> Optional[str]:
        return _text(self.store.get(key)) if self._has(key) else None

    def mark(self, phase: str) -> None:
        """Record the last phase this rank reached (best effort: never raises)."""
        try:
            self.store.set(f"seen/{self.launch.rank}", phase)
            # a round trip on the same connection: the store has applied the set before this
            # returns, so a rank that dies right after marking still leaves its phase behind
            self.store.check([f"seen/{self.launch.rank}"])
        except Exception:  # noqa: BLE001 - rank 0 may be gone; marks are evidence, not control
            pass

    def joined(self) -> Dict[int, Dict[str, Any]]:
        """Rank -> {host, local_rank} for every rank that reached the store."""
        out: Dict[int, Dict[str, Any]] = {}
        for r in range(self.launch.world_size):
            raw = self._get(f"joined/{r}")
            if raw is not None:
                out[r] = json.loads(raw)
        return out

    def last_phase(self, rank: int) -> Optional[str]:
        return self._get(f"seen/{rank}")

    def arrive(self, phase: str) -> None:
        self.store.set(f"at/{phase}/{self.launch.rank}", "1")
        self.store.add(f"count/{phase}", 1)
        self.mark(phase)

    def poll_until(self, done: Callable[[], bool], deadline: float) -> bool:
        """Poll `done` with backoff until it holds (True) or `deadline` passes (False)."""
        delay = POLL_FIRST_S
        while True:
            if self.stop.is_set():
                raise Stopped()
            if done():
                return True
            if self.clock() >= deadline:
                return False
            self.sleep(min(delay, max(0.0, deadline - self.clock())))
            delay = min(delay * 2, POLL_MAX_S)

    def wait_arrivals(self, phase: str, expected: Set[int], seconds: float) -> Set[int]:
        """Rank 0: the ranks of `expected` that reached `phase` within `seconds`."""
        if not expected:
            return set()
        deadline = self.clock() + seconds
        self.poll_until(lambda: int(self.store.add(f"count/{phase}", 0)) >= len(expected), deadline)
        return {r for r in expected if self._has(f"at/{phase}/{r}")}

    def publish(self, decision: Decision) -> None:
        self.store.set(f"decision/{decision.phase}", decision.to_json())

    def published(self, phase: str) -> Optional[Decision]:
        """Rank 0's decision on `phase` if it has made one (no waiting)."""
        raw = self._get(f"decision/{phase}")
        return Decision.from_json(raw) if raw else None

    def decision(self, phase: str, seconds: float) -> Decision:
        """Wait for rank 0's decision on `phase`; NoWord if none comes within `seconds`."""
        key = f"decision/{phase}"
        if not self.poll_until(lambda: self._has(key), self.clock() + seconds):
            raise NoWord(f"rank 0 published no decision for phase {phase!r} within {seconds:g} s")
        return Decision.from_json(self._get(key) or "")

    # ----------------------------------------------------------------- data plane

    def gather(self, payload: str, members: Sequence[int]) -> Optional[List[Optional[str]]]:
        """gather_object of `payload` to rank 0 among `members`; rank 0 gets them by rank."""
        import torch.distributed as dist

        world = self.launch.world_size
        members = sorted(members)
        if members == [0] and self.launch.rank == 0:
            out: List[Optional[str]] = [None] * world
            out[0] = payload
            return out
        if len(members) == world:
            group = self.objects_group
        else:
            group = dist.new_group(
                ranks=members,
                backend="gloo",
                timeout=timedelta(seconds=self.timeouts.collective_s),
                use_local_synchronization=True,
            )
        received = _gather_text(payload, len(members), self.launch.rank == 0, group)
        if received is None:
            return None
        out = [None] * world
        for r, obj in zip(members, received):
            out[r] = obj
        return out

    def close(self) -> None:
        """Tear the process groups down (only when no thread is inside a collective)."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _gather_text(text: str, n: int, is_dst: bool, group: Any) -> Optional[List[str]]:
    """gather_object for strings without numpy (torch's gather_object needs it to decode, and a
    torch install need not have it): lengths first, then the UTF-8 bytes padded to the longest."""
    import torch
    import torch.distributed as dist

    data = torch.tensor(list(text.encode("utf-8")), dtype=torch.uint8)
    size = torch.tensor([data.numel()], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(n)] if is_dst else None
    dist.gather(size, sizes, dst=0, group=group)
    longest = torch.zeros(1, dtype=torch.int64)
    if is_dst:
        assert sizes is not None
        longest = torch.stack(sizes).max().reshape(1)
    dist.broadcast(longest, src=0, group=group)
    padded = torch.zeros(int(longest.item()), dtype=torch.uint8)
    padded[: data.numel()] = data
    chunks = [torch.zeros(int(longest.item()), dtype=torch.uint8) for _ in range(n)] if is_dst else None
    dist.gather(padded, chunks, dst=0, group=group)
    if not is_dst:
        return None
    assert sizes is not None and chunks is not None
    return [bytes(c[: int(k.item())].tolist()).decode("utf-8") for c, k in zip(chunks, sizes)]


def missing_since(decisions: Sequence[Decision]) -> Dict[int, str]:
    """Rank -> the phase at which rank 0 gave it up."""
    out: Dict[int, str] = {}
    for d in decisions:
        for r in d.missing:
            out.setdefault(r, d.phase)
    return out
