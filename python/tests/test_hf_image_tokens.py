"""Image tokens of every family and unused parameters under DDP (issue 43, items 6 and 7).

``BalancedTrainer`` reads each sample's image tokens from the config's
placeholder ids in ``input_ids`` (``microbatch.torch.sample_tokens``), so
LLaVA and InternVL samples, which carry no ``image_grid_thw``, are planned
with their images: the trainer's plans must be those of a sampler given the
image tokens as the samples were built (and must differ from the plans of
the same samples as text). A sample with images whose tokens cannot be
counted is an error, never text. ``unused_parameters`` finds the parameters
that DDP without its search stops on (checked against a real DDP run), and
``BalancedTrainer`` refuses them at construction when DDP will not search.

Models: ``vlm_families.py`` (tiny LLaVA with CLIP or SigLIP, InternVL) and
``hf_models.py`` (Qwen2-VL), float64, random weights, built from configs.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import hf_models as H  # noqa: E402
import vlm_families as V  # noqa: E402

import microbatch  # noqa: E402
from microbatch.torch import BalancedBatchSampler, loss_tokens, sample_tokens  # noqa: E402

SAMPLES, GLOBAL_BATCH, SEQ_LEN, ACCUMULATION, SEED = 24, 8, 160, 2, 11


def unpacked(samples):
    """A collator for the tests that only plan (no micro-batch is packed)."""
    return {"samples": samples}


def trainer_for(model, data, out, **kw):
    from microbatch.hf.trainer import BalancedTrainer

    settings = dict(output_dir=str(out), gradient_accumulation_steps=ACCUMULATION, num_train_epochs=1,
                    report_to="none", save_strategy="no", disable_tqdm=True, use_cpu=True, seed=SEED)
    settings.update(kw.pop("args", {}))
    kw.setdefault("data_collator", unpacked)
    return BalancedTrainer(model=model, args=transformers.TrainingArguments(**settings), train_dataset=data,
                           global_batch_size=GLOBAL_BATCH, seq_len=SEQ_LEN, cost_model=H.PLANNER_MODEL, **kw)


def plans(sampler):
    return [(s.plan.fingerprint, s.plan.report.predicted) for s in sampler.steps()]


def reference(text, images, loss):
    """The plans of a sampler given the metadata (the trainer's settings: one rank, its seed)."""
    return plans(BalancedBatchSampler(text, images, loss_tokens=loss, global_batch_size=GLOBAL_BATCH,
                                      model=H.PLANNER_MODEL, seq_len=SEQ_LEN, micro_steps=ACCUMULATION, sync="step",
                                      num_replicas=1, rank=0, seed=SEED))


@pytest.mark.parametrize("family", V.FAMILIES)
def test_trainer_plans_samples_without_image_grid_thw_with_their_image_tokens(family, tmp_path):
    data = V.make_dataset(family, SAMPLES)
    assert not any("image_grid_thw" in s for s in data)
    images = [V.image_tokens(family, s) for s in data]
    assert sum(map(len, images)) >= SAMPLES // 2 and len({n for im in images for n in im}) >= (family == "internvl") + 1
    lengths = np.array([len(s["input_ids"]) for s in data])
    text = lengths - np.array([sum(im) for im in images])
    loss = np.array([loss_tokens(s["labels"]) for s in data])

    trainer = trainer_for(V.build(family), data, tmp_path)
    got = plans(trainer.balanced_batch_sampler())
    assert got == reference(text, images, loss), f"{family}: the trainer planned other image tokens"
    # The test can fail: the same samples planned as text (what reading image_grid_thw alone gave).
    as_text = reference(lengths, [[] for _ in data], loss)
    assert all(a[1] != b[1] for a, b in zip(got, as_text)), f"{family}: images and text plan alike"

    # The sampler with sample_tokens as its metadata callable plans the same.
    from microbatch.hf.trainer import placeholder_ids

    ids = placeholder_ids(trainer.model)
    assert ids == (V.IMAGE,)
    meta = BalancedBatchSampler(lambda i: sample_tokens(data[i], placeholders=ids), num_samples=SAMPLES,
                                global_batch_size=GLOBAL_BATCH, model=H.PLANNER_MODEL, seq_len=SEQ_LEN,
                                micro_steps=ACCUMULATION, sync="step", num_replicas=1, rank=0, seed=SEED)
    assert plans(meta) == got


def test_sample_tokens_counts_runs_of_placeholders_and_agrees_with_image_grid_thw():
    # Qwen2-VL: image_grid_thw and the placeholders give the same images.
    data = H.make_dataset("qwen2_vl", 30)
    for s in data:
        text, images, loss = sample_tokens(s, placeholders=(H.IMAGE_TOKEN, H.VIDEO_TOKEN))
        assert images == H.image_tokens(s)
        assert text == len(s["input_ids"]) - sum(images) and loss == loss_tokens(s["labels"])
    # Runs: of one id each (an image next to a video is two), a (1, L) row, videos.
    I, Vd = 9, 8
    s = {"input_ids": torch.tensor([[1, I, I, Vd, Vd, Vd, 2, I, 3]]), "pixel_values": torch.zeros(2, 3),
         "pixel_values_videos": torch.zeros(3, 3)}
    assert sample_tokens(s, placeholders=[Vd, I]) == (3, [2, 3, 1], 8)
    assert sample_tokens({"input_ids": [I, I, I, I]}, placeholders=[I]) == (0, [4], 3)
    assert sample_tokens({"input_ids": [5, 6], "labels": [-100, 6]}, placeholders=[I]) == (2, [], 1)
    assert sample_tokens({"input_ids": []}, placeholders=[I]) == (0, [], 0)


def test_image_tokens_that_cannot_be_counted_are_an_error_never_text(tmp_path):
    image = {"input_ids": torch.tensor([1, 2, 3]), "pixel_values": torch.zeros(1, 3, 8, 8)}
    # No placeholder id known, or none in input_ids: refused, naming the sample.
    with pytest.raises(microbatch.InputError, match=r"sample 4 holds images \(pixel_values\) but no image placeholder"):
        sample_tokens(image, index=4)
    with pytest.raises(microbatch.InputError, match=r"none of its 3 input_ids is an image placeholder \(ids \[60\]\)"):
        sample_tokens(image, placeholders=[60])
    assert sample_tokens(image, placeholders=[60], image_keys=()) == (3, [], 2)  # the key is not an image key
    for bad, words in (({"input_ids": torch.ones(2, 3, dtype=torch.long)}, "must be 1-D"),
                       ({"input_ids": [1.5, 2.0]}, "must hold integers"),
                       ({"input_ids": [1, 2], "labels": [2]}, "1 labels but 2 input_ids")):
        with pytest.raises(microbatch.DtypeError, match=words):
            sample_tokens(bad, placeholders=[60])
    with pytest.raises(microbatch.DtypeError, match="placeholders must be token ids"):
        sample_tokens({"input_ids": [1, 2]}, placeholders=["<image>"])

    # The trainer: a LLaVA whose config names no placeholder plans nothing as text.
    model = V.build("llava")
    data = V.make_dataset("llava", SAMPLES)
    # As BLIP-2's or Chameleon's default config: no placeholder id (past the strict config's check).
    object.__setattr__(model.config, "image_token_index", None)
    trainer = trainer_for(model, data, tmp_path / "a")
    with pytest.raises(microbatch.InputError, match="no image placeholder token id is known") as e:
        trainer.balanced_batch_sampler().steps()[0]
    assert data[e.value.item]["pixel_values"] is not None
    # A key that the model's forward does not take is not an image (remove_unused_columns drops it).
    text_only = [{"input_ids": s["input_ids"][:5], "image_id": 7} for s in data]
    trainer = trainer_for(V.build("llava"), text_only, tmp_path / "b")
    assert len(trainer.balanced_batch_sampler().steps()) == SAMPLES // GLOBAL_BATCH


def test_placeholder_ids_from_the_config_or_its_text_config():
    from microbatch.hf.trainer import placeholder_ids

    assert placeholder_ids(H.build_model("qwen2_vl", "sdpa")) == (H.IMAGE_TOKEN, H.VIDEO_TOKEN)
    assert placeholder_ids(V.build("internvl").config) == (V.IMAGE,)
    assert placeholder_ids(transformers.LlamaConfig()) == ()
    assert placeholder_ids(transformers.LlavaNextVideoConfig(image_token_index=5, video_token_index=4)) == (4, 5)
    config = transformers.LlavaConfig(image_token_index=7)
    object.__setattr__(config, "image_token_index", None)
    config.text_config.image_token_id = 3  # read on the text config too
    assert placeholder_ids(config) == (3,)
    assert placeholder_ids(transformers.Blip2Config()) == ()  # its image_token_index is None


def test_unused_parameters_are_those_ddp_stops_on_and_the_trainer_refuses_them(tmp_path, monkeypatch):
    import torch.distributed as dist

    from dist_support import free_port, init_group
    from microbatch.hf import PackedCollator
    from microbatch.hf.trainer import unused_parameters
    from microbatch.torch import summed_loss

    model = V.build("llava")
    collator = PackedCollator(model)  # its probe finds the padding image
    batch = collator([])
    assert "pixel_values" in batch
    unused = unused_parameters(model, batch)
    assert "model.vision_tower.post_layernorm.weight" in unused
    assert {n.split(".layers.")[1].split(".")[0] for n in unused if ".layers." in n} == {"1"}  # the last CLIP layer
    assert not any(n.startswith(("model.language_model", "lm_head", "model.multi_modal_projector")) for n in unused)
    assert unused_parameters(V.build("internvl")) == []  # the default batch: PackedCollator(model)'s padding
    siglip = unused_parameters(V.build("llava", tower="siglip", vision_use_head=True))
    assert "model.vision_tower.head.probe" in siglip  # the pooling head, beside the last layer and norm

    # A real DDP (one gloo process) without its search stops on exactly these parameters.
    def two_steps(m):
        ddp = torch.nn.parallel.DistributedDataParallel(m, find_unused_parameters=False)
        for _ in range(2):
            summed_loss(ddp(**{k: v for k, v in batch.items() if k != "labels"}), batch, "token").backward()

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    init_group(0, 1, free_port())
    try:
        with pytest.raises(RuntimeError, match="Expected to have finished reduction"):
            two_steps(model)
        model.zero_grad(set_to_none=True)
        for name in unused:
            model.get_parameter(name).requires_grad_(False)
        two_steps(model)
        assert unused_parameters(model, batch) == []
    finally:
        dist.destroy_process_group()

    # BalancedTrainer refuses them at construction when DDP will not search, with the fix.
    data = V.make_dataset("llava", SAMPLES)
    fresh = V.build("llava")
    with pytest.raises(microbatch.SettingError) as e:
        trainer_for(fresh, data, tmp_path / "a", data_collator=collator, args=dict(ddp_find_unused_parameters=False))
    message = str(e.value)
    assert all(n in message for n in unused[:8]) and "18 in all" in message
    assert "requires_grad_(False)" in message and "ddp_find_unused_parameters=True" in message
    assert e.value.item == unused[0]
    # Trainer's default (DDP searches) is not checked; frozen, the same setting builds.
    trainer_for(fresh, data, tmp_path / "b", data_collator=collator)
    for name in unused:
        fresh.get_parameter(name).requires_grad_(False)
    trainer_for(fresh, data, tmp_path / "c", data_collator=collator, args=dict(ddp_find_unused_parameters=False))
