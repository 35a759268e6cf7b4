"""What the tests that run real ``torch.distributed`` processes share: spawning a gloo group on loopback.

Workers are spawned by :func:`spawn` (``torch.multiprocessing``; the test
fails instead of hanging when they do not finish in time), by :func:`run_workers`
when one of them may die on purpose, or started by the
code under test, as ``transformers.Trainer`` does; they join a gloo group on
127.0.0.1 (:func:`init_group`, or :func:`worker_group` for a body that must
leave the group cleanly).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

#: Seconds :func:`spawn` waits for its workers by default: a hang fails the test instead of blocking
#: CI (a worker of these tests takes 20-120 s on a loaded 2-core machine).
SPAWN_TIMEOUT = 300


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for ``init_method``/``MASTER_PORT``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_group(rank: int, world: int, port: int, *, timeout: Optional[float] = None) -> None:
    """Joins the gloo group of ``world`` processes at ``127.0.0.1:port`` (``timeout``: the group's, in seconds)."""
    kw = {} if timeout is None else {"timeout": datetime.timedelta(seconds=timeout)}
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, **kw)


def _child(rank: int, fn: Callable[..., Any], world: int, port: int, args: tuple) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback, whatever interfaces the machine has
    fn(rank, world, port, *args)


def spawn(fn: Callable[..., Any], world: int, *args: Any, timeout: float = SPAWN_TIMEOUT) -> None:
    """Runs ``fn(rank, world, port, *args)`` in ``world`` new processes (``port``: a free one for
    :func:`init_group`) and waits for all of them; a worker that raises fails the test with its traceback,
    and workers still running after ``timeout`` seconds are terminated and the test fails (a hang)."""
    ctx = mp.spawn(_child, args=(fn, world, free_port(), args), nprocs=world, join=False)
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=max(0.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for p in ctx.processes:
                p.terminate()
            pytest.fail(f"the {world} workers did not finish within {timeout:g} s: a hang")


def run_workers(
    fn: Callable[..., Any], world: int, *args: Any, killed: Sequence[int] = (), timeout: float = SPAWN_TIMEOUT
) -> List[Optional[int]]:
    """Like :func:`spawn`, for workers of which some (``killed``) may die on purpose: runs ``fn(rank,
    world, port, *args)`` in ``world`` new processes and returns their exit codes once every one has
    ended (``-9``: killed by SIGKILL). A worker outside ``killed`` that exits with another code than 0
    (its traceback is on stderr) terminates the others and fails the test, as do workers still running
    after ``timeout`` seconds (a hang). ``spawn`` would terminate every worker as soon as one dies."""
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=_child, args=(r, fn, world, port, args), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    running = set(range(world))
    failure = ""
    while running and not failure:
        left = deadline - time.monotonic()
        if left <= 0:
            failure = f"workers {sorted(running)} of {world} did not finish within {timeout:g} s: a hang"
            break
        wait([procs[r].sentinel for r in running], timeout=left)
        for r in sorted(running):
            code = procs[r].exitcode
            if code is None:
                continue
            running.discard(r)
            if code != 0 and r not in killed:
                failure = f"worker {r} of {world} exited with code {code} (its traceback is above)"
    if failure:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)
        pytest.fail(failure)
    return [p.exitcode for p in procs]


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
        init_group(rank, world, port)
    try:
        yield
        dist.barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    os._exit(0)


#: The tiny language model both distributed test files train: vocabulary, width, positions.
VOCAB, DIM, MAX_POS = 24, 6, 64


class TinyLM(nn.Module):
    """Embeddings of tokens and positions, tanh, a linear head: small enough to train in float64."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(MAX_POS, DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, input_ids, position_ids):
        return self.head(torch.tanh(self.tok(input_ids) + self.pos(position_ids)))


def new_model():
    """The same float64 :class:`TinyLM` in every process (seed 0)."""
    torch.manual_seed(0)
    return TinyLM().double()
