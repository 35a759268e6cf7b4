"""What the tests that run real ``torch.distributed`` processes share: a free loopback port and a worker's group.

Workers are spawned by ``torch.multiprocessing.spawn`` (or started by the
code under test, as ``transformers.Trainer`` does) and talk over gloo on
127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Iterator

import torch.distributed as dist


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for ``init_method``/``MASTER_PORT``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def worker_group(rank: int, world: int, port: int, *, init: bool = True) -> Iterator[None]:
    """A worker's process group, from its start to the worker's exit.

    Joins the gloo group at ``127.0.0.1:port`` (``init=False``: the code
    under test joins it itself), runs the body, then waits for every rank
    (no rank tears gloo down while another still talks to it), destroys the
    group and leaves the process with ``os._exit(0)``: torch's gloo backend
    sometimes aborts in its C++ destructors at interpreter exit ("terminate
    called without an active exception", about 1 run in 8 with plain DDP),
    after all work is done. A body that raises still raises (after the group
    is destroyed), so ``spawn`` reports the failure.
    """
    if init:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        yield
        dist.barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    os._exit(0)
