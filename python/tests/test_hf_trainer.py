"""``microbatch.hf.BalancedTrainer``: ``transformers.Trainer.train()`` on the plan equals the unsplit step.

Two processes on gloo (accelerate's own DDP, set up by ``TrainingArguments``
from the environment torchrun would give) and one process train tiny
float64 models (``hf_models.py``) for 3 optimizer steps of SGD with Trainer's
defaults where they matter: gradient clipping (at 0.5, which these steps'
gradient norms exceed, asserted: it acts on the whole step's gradient, and
the reference clips too), ``average_tokens_across_devices``,
``remove_unused_columns``. The parameters after the 3 steps must be those of
one process on the unsplit, unpacked global batches (``hf_models.reference``)
to 1e-10, and the logged loss of every step the reference's step loss. Each rank must see
exactly the plan's micro-batches in order (accelerate's ``BatchSamplerShard``
would otherwise hand it every second one); one configuration has more
micro-steps than a rank has samples (empty micro-batches) and a vision model
with images in one sample of three (image-less micro-batches, with
``ddp_find_unused_parameters=False``). A trainer that divides by the
accumulation steps, as Trainer does by default, must miss the reference.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
import torch.multiprocessing as mp  # noqa: E402

import hf_models as H  # noqa: E402
from dist_support import free_port, worker_group  # noqa: E402

SAMPLES, GLOBAL_BATCH, SEQ_LEN, SEED, LR, CLIP = 44, 16, 64, 5, 0.5, 0.5
#: (model, normalization, gradient_accumulation_steps) under 2 processes; 9 micro-steps for
#: 8 samples a rank: empty micro-batches.
DDP_CONFIGS = (("llama", "token", 4), ("qwen2_vl", "sample", 9), ("qwen2_5_vl", "token", 4))
ONE_PROCESS = ("qwen2", "sample", 5)


def make_trainer(name, normalization, accumulation, out, *, divide=False):
    import transformers

    from microbatch.hf.trainer import BalancedTrainer

    class Recording(BalancedTrainer):
        """Records every training micro-batch's place in the plan; ``divide``: Trainer's default division."""

        marks: list = []

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            from microbatch.hf.trainer import LOSS_SCALE_KEY

            mark = inputs.get(LOSS_SCALE_KEY)
            if mark is not None:
                self.marks.append((mark.step, mark.micro_step))
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    if divide:
        Recording.loss_is_scaled_for_ga = False
    Recording.marks = []
    data = H.make_dataset(name, SAMPLES)
    args = transformers.TrainingArguments(
        output_dir=str(out), gradient_accumulation_steps=accumulation, num_train_epochs=1,
        learning_rate=LR, optim="sgd", lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=CLIP,
        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, use_cpu=True,
        ddp_backend="gloo" if "WORLD_SIZE" in os.environ else None, ddp_find_unused_parameters=False, seed=SEED, dataloader_num_workers=0,
    )
    return Recording(
        model=H.build_model(name, "sdpa"), args=args, train_dataset=data, global_batch_size=GLOBAL_BATCH,
        seq_len=SEQ_LEN, cost_model=H.PLANNER_MODEL, normalization=normalization,
    )


def run(name, normalization, accumulation, out, **kw):
    trainer = make_trainer(name, normalization, accumulation, out, **kw)
    trainer.train()
    sampler = trainer.balanced_sampler
    steps = sampler.steps()
    data = trainer.train_dataset
    return {
        "imageless": sum(
            not any(H.image_tokens(data[i]) for i in s.micro_batch(j)) for s in steps for j in range(s.micro_steps)
        ),
        "params": H.flat(trainer.model),
        "marks": list(trainer.marks),
        "steps": len(steps),
        "micro_steps": [s.micro_steps for s in steps],
        "empty": sum(not s.micro_batch(j) for s in steps for j in range(s.micro_steps)),
        "batches": [b.tolist() for b in sampler.batches()],
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        "grad_norms": [h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h],
        "global_step": trainer.state.global_step,
    }


def worker(rank, world, port, out):
    os.environ.update(OMP_NUM_THREADS="1", RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    # Trainer joins the group itself, from the environment above.
    with worker_group(rank, world, port, init=False):
        records = {c: run(*c, out / f"run{rank}") for c in DDP_CONFIGS}
        torch.save(records, out / f"rank{rank}.pt")


def check(record, name, normalization, accumulation, what):
    data = H.make_dataset(name, SAMPLES)
    losses = []
    ref = H.reference(name, "sdpa", data, record["batches"], normalization, lr=LR, max_grad_norm=CLIP, losses=losses)
    assert record["steps"] == len(ref) == 3 == record["global_step"], what
    assert record["micro_steps"] == [accumulation] * 3, f"{what}: the plan's micro-steps are not Trainer's"
    assert record["marks"] == [(s, j) for s in range(3) for j in range(accumulation)], (
        f"{what}: the rank trained other micro-batches than its plan's: {record['marks']}"
    )
    assert record["losses"] == pytest.approx(losses, rel=1e-3, abs=1e-4), f"{what}: logged losses"
    assert max(record["grad_norms"]) > CLIP, f"{what}: clipping never acted ({record['grad_norms']})"
    return H.rel(record["params"], ref[-1])


def test_trainer_under_ddp_equals_the_unsplit_step(tmp_path, monkeypatch):
    world = 2
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(worker, args=(world, free_port(), tmp_path), nprocs=world, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    for c in DDP_CONFIGS:
        name, normalization, accumulation = c
        what = f"Trainer, {world} processes, {name}, {normalization}, {accumulation} micro-steps"
        for r in range(world):
            assert H.rel(ranks[r][c]["params"], ranks[0][c]["params"]) == 0.0, f"{what}: rank {r} differs"
            assert ranks[r][c]["batches"] == ranks[0][c]["batches"], f"{what}: rank {r} planned other batches"
        diff = check(ranks[0][c], *c, what)
        print(f"{what}: {diff:.2e}")
        assert diff <= 1e-10, f"{what}: parameters {diff:.3g} from the reference"
        if accumulation == 9:
            assert ranks[0][c]["empty"] > 0, f"{what}: no empty micro-batch"
        if name in H.VISION:
            assert all(r[c]["imageless"] > 0 for r in ranks), f"{what}: a rank had no image-less micro-batch"


def test_trainer_in_one_process_equals_the_unsplit_step(tmp_path):
    name, normalization, accumulation = ONE_PROCESS
    what = f"Trainer, 1 process, {name}, {normalization}, {accumulation} micro-steps"
    diff = check(run(*ONE_PROCESS, tmp_path / "a"), *ONE_PROCESS, what)
    print(f"{what}: {diff:.2e}")
    assert diff <= 1e-10, f"{what}: parameters {diff:.3g} from the reference"
    # Trainer's default (the loss divided by the accumulation steps) misses it: the test can fail.
    broken = run(*ONE_PROCESS, tmp_path / "b", divide=True)
    data = H.make_dataset(name, SAMPLES)
    ref = H.reference(name, "sdpa", data, broken["batches"], normalization, lr=LR, max_grad_norm=CLIP)
    assert H.rel(broken["params"], ref[-1]) > 1e-6, "dividing by the accumulation steps matches the reference"


def test_trainer_rejects_what_it_cannot_plan(tmp_path):
    import transformers

    from microbatch.errors import SettingError
    from microbatch.hf.trainer import BalancedTrainer

    model = H.build_model("llama", "sdpa")
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    data = H.make_dataset("llama", 8)
    with pytest.raises(SettingError, match="set by BalancedTrainer"):
        BalancedTrainer(model=model, args=args, train_dataset=data, seq_len=64, sampler_settings={"micro_steps": 3})
    with pytest.raises(SettingError, match="unknown normalization"):
        BalancedTrainer(model=model, args=args, train_dataset=data, seq_len=64, normalization="mean")
    with pytest.raises(SettingError, match="by keyword"):
        BalancedTrainer(model, args, seq_len=64)


def test_example_train_hf_vlm_with_trainer_under_torchrun():
    from test_hf_ddp import run_example

    import tempfile

    with tempfile.TemporaryDirectory() as out:
        run_example("--trainer", "--output-dir", out)


def test_trainer_checks_each_accumulation_group_is_one_step(tmp_path):
    import transformers

    from microbatch.errors import SettingError
    from microbatch.hf import PackedCollator
    from microbatch.hf.trainer import LOSS_SCALE_KEY, BalancedTrainer

    model = H.build_model("llama", "sdpa")
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True,
                                          gradient_accumulation_steps=2, disable_tqdm=True)
    data = H.make_dataset("llama", 8)
    trainer = BalancedTrainer(model=model, args=args, train_dataset=data, seq_len=64, global_batch_size=4,
                              data_collator=PackedCollator(model, check_packing=False))
    batches = list(trainer.get_train_dataloader())
    steps = trainer.balanced_sampler.steps()
    assert len(batches) == len(trainer.balanced_sampler) == 2 * len(steps) == 4
    marks = [(b[LOSS_SCALE_KEY].step, b[LOSS_SCALE_KEY].micro_step) for b in batches]
    assert marks == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [b[LOSS_SCALE_KEY].scale for b in batches] == [s.loss_scale("token", "mean") for s in steps for _ in "ab"]
    group, items = trainer.get_batch_samples(iter(batches), 2, torch.device("cpu"))
    assert len(group) == 2 and items is None  # no num_items_in_batch: the plan's scale replaces it
    # Every second micro-batch, as a sampler sharded again across 2 ranks would give.
    with pytest.raises(SettingError, match=r"\(step, micro-step\) \[\(0, 0\), \(1, 0\)\]"):
        trainer.get_batch_samples(iter(batches[::2]), 2, torch.device("cpu"))
