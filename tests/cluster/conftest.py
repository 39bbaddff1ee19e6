"""A one-rank gloo process group in the test process, for checks that need torch.distributed."""

from __future__ import annotations

import socket
from typing import Iterator

import pytest


@pytest.fixture()
def one_rank() -> Iterator[None]:
    dist = pytest.importorskip("torch.distributed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, 1, True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
