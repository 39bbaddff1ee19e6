"""Which rank this process is, read from the launcher's environment.

torchrun (and most launchers) set RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT.
Under Slurm without torchrun (`srun python -m ...`) the same facts come from SLURM_PROCID,
SLURM_NTASKS, SLURM_LOCALID and the first host of SLURM_JOB_NODELIST; the port is derived from
the job id so that every task of the job computes the same one. Pure: pass the environment in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Mapping, Optional

from doctor.errors import InputError

DEFAULT_PORT = 29500
SLURM_PORT_BASE = 15000  # job-derived ports land in [15000, 25000): clear of ephemeral ports
SLURM_PORT_SPAN = 10000

NOT_LAUNCHED_HINT = (
    "run it under a launcher, e.g. `torchrun --nproc-per-node 8 -m doctor check --distributed`"
    " or `srun --ntasks-per-node 8 attn-doctor check --distributed` (see docs/cluster.md)"
)


@dataclass(frozen=True)
class Launch:
    """Where this process sits in the job and how to reach rank 0."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    launcher: str  # "torchrun" | "slurm" | "env"
    run_id: str  # the same on every rank of one launch: keys in the shared store are prefixed by it
    agent_store: bool = False  # torchrun's agent already serves the store at master_addr:master_port

    @property
    def is_reporter(self) -> bool:
        """Rank 0 gathers the results and prints the report."""
        return self.rank == 0


def _int(environ: Mapping[str, str], name: str) -> int:
    raw = environ.get(name, "")
    try:
        return int(raw)
    except ValueError:
        raise InputError(f"{name}={raw!r} is not an integer", hint=NOT_LAUNCHED_HINT) from None


def _expand_first(bracket: str) -> str:
    """The first host of one bracket expression's body: "01-04,07" -> "01"."""
    first = bracket.split(",", 1)[0]
    return first.split("-", 1)[0]


def split_nodelist(nodelist: str) -> List[str]:
    """Top-level comma-separated entries of a Slurm hostlist (commas inside [] stay)."""
    entries: List[str] = []
    depth = 0
    current = ""
    for ch in nodelist:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            if current:
                entries.append(current)
            current = ""
            continue
        current += ch
    if current:
        entries.append(current)
    return entries


def first_host(nodelist: str) -> str:
    """The first host of a compressed Slurm hostlist: "gpu-[003-005,9],login1" -> "gpu-003"."""
    entries = split_nodelist(nodelist.strip())
    if not entries:
        raise InputError("SLURM_JOB_NODELIST is empty", hint="set MASTER_ADDR to the first node")
    return re.sub(r"\[([^\]]*)\]", lambda m: _expand_first(m.group(1)), entries[0])


def slurm_port(job_id: Optional[str]) -> int:
    """A port every task of a Slurm job agrees on without talking: derived from the job id."""
    if job_id and job_id.isdigit():
        return SLURM_PORT_BASE + int(job_id) % SLURM_PORT_SPAN
    return DEFAULT_PORT


def _check(rank: int, world_size: int, local_rank: int, source: str) -> None:
    if world_size < 1:
        raise InputError(f"{source}: world size {world_size} is not positive", hint=NOT_LAUNCHED_HINT)
    if not 0 <= rank < world_size:
        raise InputError(
            f"{source}: rank {rank} is outside 0..{world_size - 1}", hint=NOT_LAUNCHED_HINT
        )
    if local_rank < 0:
        raise InputError(f"{source}: local rank {local_rank} is negative", hint=NOT_LAUNCHED_HINT)


def detect(environ: Mapping[str, str]) -> Launch:
    """This process's place in the job. Raises InputError (exit 2) when no launcher set it."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        rank, world = _int(environ, "RANK"), _int(environ, "WORLD_SIZE")
        local = _int(environ, "LOCAL_RANK") if "LOCAL_RANK" in environ else rank
        if "MASTER_ADDR" not in environ:
            raise InputError("RANK and WORLD_SIZE are set but MASTER_ADDR is not", hint=NOT_LAUNCHED_HINT)
        port = _int(environ, "MASTER_PORT") if "MASTER_PORT" in environ else DEFAULT_PORT
        torchrun = "TORCHELASTIC_RUN_ID" in environ
        run_id = (
            f"{environ['TORCHELASTIC_RUN_ID']}-{environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
            if torchrun
            else environ.get("SLURM_JOB_ID", f"{environ['MASTER_ADDR']}:{port}")
        )
        _check(rank, world, local, "RANK/WORLD_SIZE")
        return Launch(
            rank=rank,
            world_size=world,
            local_rank=local,
            master_addr=environ["MASTER_ADDR"],
            master_port=port,
            launcher="torchrun" if torchrun else "env",
            run_id=run_id,
            agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
        )
    if "SLURM_PROCID" in environ:
        rank = _int(environ, "SLURM_PROCID")
        world_name = "SLURM_NTASKS" if "SLURM_NTASKS" in environ else "SLURM_NPROCS"
        if world_name not in environ:
            raise InputError("SLURM_PROCID is set but SLURM_NTASKS is not", hint=NOT_LAUNCHED_HINT)
        world = _int(environ, world_name)
        local = _int(environ, "SLURM_LOCALID") if "SLURM_LOCALID" in environ else 0
        addr = environ.get("MASTER_ADDR")
        if not addr:
            nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
            if not nodelist:
                raise InputError(
                    "under Slurm but neither MASTER_ADDR nor SLURM_JOB_NODELIST is set",
                    hint="export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -1)",
                )
            addr = first_host(nodelist)
        job = environ.get("SLURM_JOB_ID")
        port = _int(environ, "MASTER_PORT") if "MASTER_PORT" in environ else slurm_port(job)
        _check(rank, world, local, "SLURM_PROCID/SLURM_NTASKS")
        step = environ.get("SLURM_STEP_ID", "0")
        return Launch(
            rank=rank,
            world_size=world,
            local_rank=local,
            master_addr=addr,
            master_port=port,
            launcher="slurm",
            run_id=f"{job or addr}.{step}",
        )
    raise InputError(
        "--distributed needs a launcher: none of RANK/WORLD_SIZE or SLURM_PROCID is set",
        hint=NOT_LAUNCHED_HINT,
    )
