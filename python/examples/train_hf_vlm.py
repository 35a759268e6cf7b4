"""Train a tiny Qwen2-VL with Hugging Face transformers on balanced micro-batches, under torchrun on the CPU.

    torchrun --standalone --nproc_per_node 2 python/examples/train_hf_vlm.py
    torchrun --standalone --nproc_per_node 2 python/examples/train_hf_vlm.py --trainer

Builds a random Qwen2-VL (``--model qwen2.5-vl``: Qwen2.5-VL) from a small
config (nothing is downloaded) and a synthetic dataset of samples with 8 to
120 text tokens and 0 to 3 images of 4 to 16 image tokens each, in the layout
the model's processor gives (``input_ids`` with the image placeholders,
``labels`` with the prompt and the images masked, ``mm_token_type_ids``,
``pixel_values``, ``image_grid_thw``). Every rank plans the same steps with
:class:`microbatch.torch.BalancedBatchSampler` and packs its micro-batches
with :class:`microbatch.hf.PackedCollator`; the gloo backend over loopback
runs the DDP all-reduce.

By default the loop of ``help(microbatch.hf)`` runs as written:
``summed_loss(model(**batch), batch, normalization)`` times the step's loss
scale, ``no_sync`` until the step's last micro-step. ``--trainer`` trains the
same model with :class:`microbatch.hf.trainer.BalancedTrainer`
(``transformers.Trainer.train()`` with ``gradient_accumulation_steps`` =
``--micro-steps``). Rank 0 prints every step's loss (the mean over the
step's loss tokens, all ranks) and the plan's imbalance: the slowest rank's
vision and language time over the mean (1.0 is perfect), and the naive plan's
predicted step time over the plan's. Without torchrun it runs as one process.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
from typing import Any, Dict, List

import numpy as np
import torch
import torch.distributed as dist
import transformers
from torch.utils.data import DataLoader

from microbatch.hf import PackedCollator
from microbatch.torch import BalancedBatchSampler, Step, loss_tokens, summed_loss

VOCAB, IMAGE, VIDEO, START, END = 512, 500, 501, 502, 503
PATCH, MERGE, TEMPORAL = 14, 2, 2


def build_model(name: str) -> torch.nn.Module:
    """A random 2-layer Qwen2-VL (or Qwen2.5-VL) with a 2-block vision tower; ``use_cache`` left at its default."""
    text: Dict[str, Any] = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, bos_token_id=1, eos_token_id=2,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]})
    special: Dict[str, Any] = dict(image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END)
    config: Any
    vision: Dict[str, Any]
    if name == "qwen2-vl":
        vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=PATCH,
                      spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL)
        config = transformers.Qwen2VLConfig(text_config=text, vision_config=vision, **special)
        cls: Any = transformers.Qwen2VLForConditionalGeneration
    else:
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                      patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL,
                      window_size=4 * PATCH * MERGE, fullatt_block_indexes=[1])
        config = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision, **special)
        cls = transformers.Qwen2_5_VLForConditionalGeneration
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)  # the same initial weights on every rank
    return cls(config)


def synthetic_dataset(n: int, seed: int = 0) -> List[Dict[str, torch.Tensor]]:
    """Samples as a Qwen2-VL processor makes them: images first, then the text; prompt and images masked."""
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(n):
        ids: List[int] = []
        types: List[int] = []
        grids = []
        for _ in range(int(rng.choice([0, 0, 1, 2, 3]))):
            h, w = (MERGE * int(rng.integers(2, 5)) for _ in range(2))  # 4 to 16 image tokens
            grids.append((1, h, w))
            k = h * w // MERGE**2
            ids += [START] + [IMAGE] * k + [END]
            types += [0] + [1] * k + [0]
        head = len(ids)
        t = int(rng.integers(8, 121))
        ids += rng.integers(3, IMAGE, t).tolist()
        types += [0] * t
        x = torch.tensor(ids)
        labels = x.clone()
        labels[: head + t // 3] = -100  # the images and the prompt carry no loss
        sample = {"input_ids": x, "labels": labels, "mm_token_type_ids": torch.tensor(types)}
        if grids:
            rows = sum(g[1] * g[2] for g in grids)
            sample["pixel_values"] = torch.as_tensor(
                rng.standard_normal((rows, 3 * TEMPORAL * PATCH * PATCH)), dtype=torch.float32)
            sample["image_grid_thw"] = torch.tensor(grids)
        data.append(sample)
    return data


def metadata(dataset: List[Dict[str, torch.Tensor]]):
    """Per sample: text tokens (all but the image tokens), each image's tokens, loss tokens."""
    images = [[int(g.prod()) // MERGE**2 for g in s["image_grid_thw"]] if "image_grid_thw" in s else []
              for s in dataset]
    text = [len(s["input_ids"]) - sum(im) for s, im in zip(dataset, images)]
    loss = [loss_tokens(s["labels"]) for s in dataset]
    return text, images, loss


def describe(step: Step, loss: float) -> str:
    r = step.plan.report
    return (f"step {step.index}: loss {loss:.4f}, {step.micro_steps} micro-steps, imbalance vision "
            f"{r.imbalance_vision:.3f} language {r.imbalance_language:.3f}, naive plan {r.gain:.2f}x slower")


def train_loop(args: argparse.Namespace, model: torch.nn.Module, dataset: List[Dict[str, torch.Tensor]]) -> None:
    """The documented loop (``help(microbatch.hf)``), under DDP when there is a process group."""
    rank, world = dist.get_rank(), dist.get_world_size()
    text, images, loss = metadata(dataset)
    sampler = BalancedBatchSampler(text, images, loss_tokens=loss, global_batch_size=args.global_batch_size,
                                   model="qwen2.5-vl-7b", seq_len=args.seq_len, micro_steps=args.micro_steps,
                                   seed=0, verify=True)  # rank and world size from torch.distributed
    collator = PackedCollator(model)  # before DDP: it probes the model once
    loader: DataLoader[Any] = DataLoader(dataset, batch_sampler=sampler, collate_fn=collator)  # type: ignore[arg-type]
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        for step in sampler.steps():
            scale = step.loss_scale(args.normalization, "mean")  # DDP averages over ranks
            step_loss = torch.zeros((), dtype=torch.float64)
            for j in range(step.micro_steps):
                batch = next(batches)  # never empty: the collator pads empty and image-less micro-batches
                last = j == step.micro_steps - 1
                with contextlib.nullcontext() if last else ddp.no_sync():
                    summed = summed_loss(ddp(**batch), batch, args.normalization)
                    (summed * scale).backward()  # never divided by step.micro_steps
                step_loss += summed.detach().double() * scale
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            dist.all_reduce(step_loss)  # each rank's share of the step's mean loss, times world
            if rank == 0:
                print(f"epoch {epoch} " + describe(step, float(step_loss) / world), flush=True)


def train_trainer(args: argparse.Namespace, model: torch.nn.Module, dataset: List[Dict[str, torch.Tensor]]) -> None:
    """The same with ``transformers.Trainer``: :class:`microbatch.hf.trainer.BalancedTrainer`."""
    from microbatch.hf.trainer import BalancedTrainer

    text, images, loss = metadata(dataset)
    training = transformers.TrainingArguments(
        output_dir=args.output_dir, gradient_accumulation_steps=args.micro_steps, num_train_epochs=args.epochs,
        learning_rate=args.lr, lr_scheduler_type="constant", logging_steps=1, report_to="none",
        save_strategy="no", disable_tqdm=True, use_cpu=True,
        ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None,
        # Every parameter gets a gradient on every rank: the collator gives image-less
        # micro-batches a padding image, so DDP need not search for unused parameters.
        ddp_find_unused_parameters=False,
    )
    trainer = BalancedTrainer(
        model=model, args=training, train_dataset=dataset, text_tokens=text, image_tokens=images,
        loss_tokens=loss, global_batch_size=args.global_batch_size, seq_len=args.seq_len,
        cost_model="qwen2.5-vl-7b", normalization=args.normalization,
    )

    class Report(transformers.TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            logs = kwargs.get("logs")
            if state.is_world_process_zero and logs and "loss" in logs:
                sampler = trainer.balanced_batch_sampler()
                steps = sampler.steps()
                step = steps[(state.global_step - 1) % len(steps)]
                print(f"epoch {sampler.epoch} " + describe(step, float(logs["loss"])), flush=True)

    trainer.add_callback(Report())
    trainer.train()


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--model", default="qwen2-vl", choices=["qwen2-vl", "qwen2.5-vl"])
    p.add_argument("--trainer", action="store_true", help="train with BalancedTrainer (transformers.Trainer)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--samples", type=int, default=96)
    p.add_argument("--global-batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--micro-steps", type=int, default=4, help="micro-steps per optimizer step (fixed)")
    p.add_argument("--normalization", default="token", choices=["token", "sample"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--output-dir", default="train_hf_vlm_output", help="Trainer's output_dir (--trainer)")
    args = p.parse_args()
    torch.set_num_threads(1)
    model = build_model(args.model)
    dataset = synthetic_dataset(args.samples)
    if args.trainer:
        train_trainer(args, model, dataset)  # TrainingArguments sets up the process group
    else:
        if "WORLD_SIZE" in os.environ:
            dist.init_process_group("gloo")  # torchrun sets the rest
        else:  # one process: a process group of one, so that the loop is the same
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
        train_loop(args, model, dataset)
    rank = dist.get_rank() if dist.is_initialized() else 0
    if dist.is_initialized():
        dist.barrier()  # no rank tears gloo down while another still talks to it
        dist.destroy_process_group()
    if rank == 0:
        print("done", flush=True)
    # Torch's gloo backend sometimes aborts in its C++ destructors at interpreter exit
    # ("terminate called without an active exception"), after all work is done: leave
    # without running them.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
