"""Train a tiny language model with DDP on balanced micro-batches: the loop of ``microbatch.torch``'s docs, runnable on a CPU.

    python python/examples/train_ddp.py --world-size 2 --epochs 2

Spawns ``--world-size`` processes on the gloo backend over 127.0.0.1 (under
``torchrun``, run it with ``--torchrun`` instead: the process group comes from
the environment). Each process builds the same
:class:`microbatch.torch.BalancedBatchSampler` over a synthetic dataset with
varied lengths and images (placeholder tokens in the input), takes its own
micro-batches from a ``DataLoader``, runs forward and backward on every one (an
empty one too) under ``no_sync`` until the step's last, multiplies each
micro-batch's summed loss by the step's scale, and steps the optimizer.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from microbatch.torch import BalancedBatchSampler, collate_packed, loss_tokens, summed_loss

VOCAB, DIM, MAX_POS, IMAGE_TOKEN = 64, 16, 512, 0


def synthetic_dataset(n: int, seed: int = 0):
    """Samples with 8..200 text tokens, a third with one or two images (placeholder tokens,
    labels -100), the first quarter of each text masked as a prompt."""
    rng = np.random.default_rng(seed)
    data = []
    for i in range(n):
        text = int(rng.integers(8, 200))
        images = [int(rng.choice([16, 64]))] * int(rng.integers(1, 3)) if i % 3 == 0 else []
        ids = np.concatenate([np.full(sum(images), IMAGE_TOKEN), rng.integers(1, VOCAB, text)])
        labels = ids.copy()
        labels[: sum(images) + text // 4] = -100
        data.append({"input_ids": torch.as_tensor(ids), "labels": torch.as_tensor(labels),
                     "text_tokens": text, "image_tokens": images})
    return data


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(MAX_POS, DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, input_ids, position_ids):
        return self.head(torch.tanh(self.tok(input_ids) + self.pos(position_ids)))


def train(args) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = synthetic_dataset(args.samples)
    # Per-sample metadata as arrays (a callable meta(index) works too).
    sampler = BalancedBatchSampler(
        [s["text_tokens"] for s in dataset],
        [s["image_tokens"] for s in dataset],
        loss_tokens=[loss_tokens(s["labels"]) for s in dataset],
        global_batch_size=args.global_batch_size,
        model="qwen2.5-vl-7b", seq_len=args.seq_len, sync=args.sync,
        seed=0, verify=True,  # rank and world size from torch.distributed
    )
    loader = DataLoader(_Tokens(dataset), batch_sampler=sampler,
                        collate_fn=collate_packed, num_workers=args.workers)
    torch.manual_seed(0)
    model = DDP(TinyLM())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        for step in sampler.steps():
            scale = step.loss_scale(args.normalization, "mean")  # DDP averages over ranks
            step_loss = torch.zeros((), dtype=torch.float64)
            for j in range(step.micro_steps):
                batch = next(batches)  # possibly empty: every rank runs every micro-step
                last = j == step.micro_steps - 1
                with contextlib.nullcontext() if last else model.no_sync():
                    logits = model(batch["input_ids"], batch["position_ids"])
                    loss = summed_loss(logits, batch["labels"], batch["cu_seqlens"], args.normalization)
                    (loss * scale).backward()  # never divided by step.micro_steps
                step_loss += loss.detach().double() * scale
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            dist.all_reduce(step_loss)  # each rank's share of the step's mean loss, times world
            if rank == 0:
                print(f"epoch {epoch} step {step.index}: {step.micro_steps} micro-steps, "
                      f"loss {float(step_loss) / world:.4f}", flush=True)
    if rank == 0:
        print("done", flush=True)


class _Tokens(torch.utils.data.Dataset):
    """The samples' model inputs only (what :func:`collate_packed` packs)."""

    def __init__(self, samples):
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return {k: self.samples[i][k] for k in ("input_ids", "labels")}


def _spawned(rank: int, world: int, port: int, args) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        train(args)
        dist.barrier()  # no rank tears gloo down while another still talks to it
    finally:
        dist.destroy_process_group()
    # Torch's gloo backend sometimes aborts in its C++ destructors at interpreter
    # exit ("terminate called without an active exception"), after all work is
    # done; leave without running them, so that mp.spawn sees a clean exit.
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--torchrun", action="store_true", help="take the process group from torchrun's environment")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--samples", type=int, default=96)
    p.add_argument("--global-batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--sync", default="step", choices=["step", "micro-step", "phase"])
    p.add_argument("--normalization", default="token", choices=["token", "sample"])
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    args = p.parse_args()
    if args.torchrun:
        dist.init_process_group("gloo")
        try:
            train(args)
            dist.barrier()
        finally:
            dist.destroy_process_group()
        sys.stdout.flush()  # and leave as _spawned does
        os._exit(0)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_spawned, args=(args.world_size, port, args), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
