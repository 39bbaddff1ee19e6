"""Rank detection from torchrun's, Slurm's or any launcher's environment."""

from __future__ import annotations

import pytest

from doctor.cluster.launch import detect, first_host, slurm_port
from doctor.errors import InputError


def test_torchrun_environment() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "MASTER_ADDR": "node01", "MASTER_PORT": "29400",
           "TORCHELASTIC_RUN_ID": "job7", "TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    launch = detect(env)
    assert (launch.rank, launch.world_size, launch.local_rank) == (3, 8, 3)
    assert (launch.master_addr, launch.master_port) == ("node01", 29400)
    assert launch.launcher == "torchrun" and launch.agent_store and launch.run_id == "job7-1"
    assert not launch.is_reporter


def test_plain_env_launcher_serves_its_own_store() -> None:
    launch = detect({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1"})
    assert launch.launcher == "env" and not launch.agent_store
    assert launch.master_port == 29500 and launch.local_rank == 0 and launch.is_reporter


def test_rank_variables_take_precedence_over_slurm() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "SLURM_PROCID": "0", "SLURM_NTASKS": "16"}
    assert detect(env).world_size == 2


def test_slurm_without_torchrun() -> None:
    env = {"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1",
           "SLURM_JOB_NODELIST": "gpu-[003-010,12],login1", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "2"}
    launch = detect(env)
    assert (launch.rank, launch.world_size, launch.local_rank) == (9, 16, 1)
    assert launch.master_addr == "gpu-003" and launch.master_port == slurm_port("4242") == 19242
    assert launch.launcher == "slurm" and launch.run_id == "4242.2"


def test_slurm_honours_master_addr_and_port() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "MASTER_ADDR": "head", "MASTER_PORT": "1234"}
    launch = detect(env)
    assert (launch.master_addr, launch.master_port) == ("head", 1234)


@pytest.mark.parametrize(
    "nodelist, host",
    [("node01", "node01"), ("a[1-4]", "a1"), ("rack[02-03]-gpu[007,009]", "rack02-gpu007"), ("x,y[1-2]", "x")],
)
def test_first_host(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


@pytest.mark.parametrize(
    "env, words",
    [
        ({}, "needs a launcher"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR"),
        ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a"}, "outside 0..1"),
        ({"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "a"}, "not an integer"),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "SLURM_JOB_NODELIST"),
    ],
)
def test_not_launched_is_a_usage_error(env: dict, words: str) -> None:
    with pytest.raises(InputError, match=words) as err:
        detect(env)
    assert err.value.exit_code == 2
