"""PackedCollator on vision-language families of other layouts than Qwen2-VL's (tiny configs, float64, CPU).

Gemma 3 (a sliding and a full attention layer, ``token_type_ids``), PaliGemma
(``token_type_ids`` prefix/suffix, positions from 1), Idefics3 and SmolVLM
(``pixel_values`` ``(1, n_images, C, H, W)``), Mistral3 (images of different
sizes with ``image_sizes``), InternVL (tiles), LLaVA and LLaVA-Next (tiles of
each image ``(n_images, max_tiles, C, H, W)`` with ``image_sizes``), their samples laid out
as each family's processor lays them out (``hf_models.make_dataset``). The
reference is each sample run alone through the model's own ``forward`` with
the keys its processor gives (``token_type_ids``, ``image_sizes``,
``pixel_attention_mask``): packed by the collator, every sample's logits must
equal its own within 1e-12 relative with sdpa (float64 throughout: only
reordered sums differ), and within 1e-6 with eager attention, whose softmax
transformers computes in float32 (``softmax(..., dtype=torch.float32)``), so a
packed row, with more masked entries in each softmax than the sample's own,
rounds differently there (a few float32 epsilons, 1.2e-7 each).

Then: empty and image-less micro-batches (a padding image found when the
collator is made), the probe's decisions (Gemma 3's masks, PaliGemma's
required ``token_type_ids`` and first position), errors at construction, and
one 2-process DDP run of Gemma 3 against the unsplit step.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hf_models as H  # noqa: E402
import microbatch  # noqa: E402
from microbatch.hf import LayerMasks, PackedCollator, PackingError  # noqa: E402
from microbatch.torch import summed_loss  # noqa: E402

transformers.logging.set_verbosity_error()

pytestmark = pytest.mark.usefixtures("one_torch_thread")


BOUND = {"sdpa": 1e-12, "eager": 1e-6}  # relative; eager's softmax is float32
#: Images a sample: different counts (and, for Mistral3, sizes) next to each other, image-less samples between.
COUNTS = (0, 2, 1, 3, 0, 1)


def samples(name, counts=COUNTS, seed=3):
    rng = np.random.default_rng(seed)
    out = []
    for count in counts:
        t = int(rng.integers(3, 12))
        words = rng.integers(2, H.TEXT_VOCAB, t)
        out.append(H._family_sample(name, rng, min(count, 1) if name == "paligemma" else count, words, t // 3))
    return out


def alone(model, s):
    """The sample's logits run alone through the model's own forward, with every key its processor gives."""
    kw = {k: v[None] for k, v in s.items() if k in ("input_ids", "token_type_ids")}
    kw.update({k: v for k, v in s.items() if k in ("pixel_values", "image_sizes", "pixel_attention_mask")})
    return model(**kw).logits[0]


def rel(a, b):
    return float((a - b).detach().abs().max() / b.detach().abs().max())


def worst(model, batch, data):
    """The largest relative difference of a packed sample's logits from the sample alone."""
    with torch.no_grad():
        packed = model(**batch).logits[0]
        start, err = 0, 0.0
        for s in data:
            n = s["input_ids"].shape[0]
            err = max(err, rel(packed[start : start + n], alone(model, s)))
            start += n
    return err


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", H.FAMILIES)
def test_each_sample_packed_equals_it_alone(name, attention):
    model = H.build_model(name, attention).eval()
    collator = PackedCollator(model)
    data = samples(name)
    batch = collator(data)
    err = worst(model, batch, data)
    print(f"{name} {attention}: {err:.2e}")
    assert err <= BOUND[attention], (name, attention, err)
    # Images of different counts or sizes were packed: the per-image keys hold every sample's images.
    if name in ("idefics3", "smolvlm"):
        assert batch["pixel_values"].shape[1] == max(COUNTS)  # zero-padded per-sample image dimension
    if name == "llava_next":
        assert batch["pixel_values"].shape[1] == 3  # tiles zero-padded to the most of any image
    if name == "mistral3":
        assert batch["image_sizes"].shape[0] == sum(s.get("image_sizes", torch.zeros(0, 2)).shape[0] for s in data)
        assert len({tuple(r) for r in batch["image_sizes"].tolist()}) > 1  # two sizes, padded to one


@pytest.mark.parametrize("name", H.FAMILIES)
def test_empty_and_image_less_micro_batches(name):
    """An empty micro-batch: zero loss, every parameter a zero gradient; an image-less one: the samples' own loss,
    and a padding image that reaches every parameter a real image reaches (settled when the collator was made)."""
    model = H.build_model(name, "sdpa")
    collator = PackedCollator(model)
    assert collator.padding_document(image=True)["labels"].eq(-100).all()
    real = collator(samples(name, counts=(1,)))
    summed_loss(model(**real), real).backward()
    reached = {n for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    empty = collator([])
    loss = summed_loss(model(**empty), empty)
    loss.backward()
    assert loss.item() == 0.0 and empty["pixel_values"].shape[0] >= 1
    padded = {n for n, p in model.named_parameters() if p.grad is not None}
    assert padded >= reached, sorted(reached - padded)[:5]
    assert all(torch.count_nonzero(p.grad) == 0 for p in model.parameters() if p.grad is not None)
    model.zero_grad(set_to_none=True)
    text = samples(name, counts=(0, 0))
    batch = collator(text)
    assert "pixel_values" in batch and batch["input_ids"].shape[1] > sum(s["input_ids"].shape[0] for s in text)
    loss = summed_loss(model(**batch), batch)
    plain = PackedCollator(model, check_packing=False, pad_images=False)(text)
    assert "pixel_values" not in plain
    assert loss.item() == pytest.approx(summed_loss(model(**plain), plain).item(), rel=1e-12)


def test_gemma3_gets_each_documents_own_masks():
    """Gemma 3 with token_type_ids: transformers' masks for its sliding layers leak between packed documents; the
    collator builds each document's masks with the model's own create_masks_for_generate instead."""
    model = H.build_model("gemma3", "sdpa").eval()
    collator = PackedCollator(model)
    data = samples("gemma3")
    batch = collator(data)
    masks = batch["attention_mask"]
    assert isinstance(masks, LayerMasks) and set(masks) == {"full_attention", "sliding_attention"}
    T = batch["input_ids"].shape[1]
    assert all(m.shape == (1, 1, T, T) and m.dtype == torch.bool for m in masks.values())
    assert worst(model, batch, data) <= 1e-12
    # Without them, the model's own masks: documents after the first differ (future tokens, the first's image blocks).
    del batch["attention_mask"]
    assert worst(model, batch, data) > 0.05
    # Without token_type_ids the model's own masks are exact (its image tokens then attend causally).
    plain = [{k: v for k, v in s.items() if k != "token_type_ids"} for s in data]
    batch = PackedCollator(model, drop_keys=("token_type_ids",))(plain)
    assert "attention_mask" not in batch and worst(model, batch, plain) <= 1e-12
    # Only the full-attention layer: transformers' own masks are exact, and the probe keeps them.
    import copy

    config = copy.deepcopy(model.config)
    config.text_config.layer_types = ["full_attention", "full_attention"]
    torch.manual_seed(0)
    model = type(model)(config).double().eval()
    full = PackedCollator(model)
    assert "attention_mask" not in full(data) and worst(model, full(data), data) <= 1e-12


def test_gemma3_masks_unprobed_pickled_and_in_float32():
    """Unprobed (check_packing=False, or bound to the config) the collator builds the masks wherever the model's
    mask factory reads a key of the batch; pickled to a DataLoader worker it builds the same batch; in float32 the
    probe passes within float32 rounding."""
    import pickle

    model = H.build_model("gemma3", "sdpa").eval()
    data = samples("gemma3")
    probed = PackedCollator(model)(data)
    blob = pickle.dumps(PackedCollator(model))
    assert len(blob) < 100_000  # the config, the padding image: no weights
    for c in (PackedCollator(model, check_packing=False), PackedCollator(model.config, pad_images=False),
              pickle.loads(blob)):
        b = c(data)
        assert set(b) == set(probed) and worst(model, b, data) <= 1e-12
        assert all(torch.equal(b["attention_mask"][k], probed["attention_mask"][k]) for k in probed["attention_mask"])
    model = model.float()
    packed, leak = PackedCollator(model).check(model)
    assert packed <= 1.2e-4 < leak


def test_gemma3_eager_masks_are_additive():
    model = H.build_model("gemma3", "eager").eval()
    batch = PackedCollator(model)(samples("gemma3"))
    m = batch["attention_mask"]["sliding_attention"]
    assert m.dtype == torch.float64 and float(m.max()) == 0.0 and float(m.min()) == torch.finfo(torch.float64).min


def test_the_probe_refuses_gemma3_when_the_collator_cannot_build_its_masks(monkeypatch):
    """The probe sends token_type_ids with images at different offsets: without the collator's masks it finds the
    leak at construction and names its cause and fix (this fails if the probe stops sending token_type_ids)."""
    import microbatch.hf.collate as C

    model = H.build_model("gemma3", "sdpa")
    monkeypatch.setattr(C, "_mask_factory", lambda *args: None)
    with pytest.raises(PackingError) as e:
        PackedCollator(model)
    message = str(e.value)
    assert "token_type_ids" in message and "drop_keys=('token_type_ids',)" in message, message
    assert "sliding_attention" in message and e.value.measured[0] > 0.05
    # The attention implementation is not the cause: sdpa is named as the model's, not as the fix.
    assert "Use an attention implementation" not in message
    PackedCollator(model, drop_keys=("token_type_ids",))  # the fix it names


def test_without_an_image_the_probe_marks_spans_of_text(monkeypatch):
    """Where the collator has no image to probe with (pad_images=False and none found), the per-token keys are sent
    over spans of text at other offsets in each document, which is enough to find Gemma 3's sliding-layer leak."""
    monkeypatch.setattr(PackedCollator, "_discover_image", lambda self, model: "no image in this test")
    model = H.build_model("gemma3", "sdpa").eval()
    collator = PackedCollator(model, pad_images=False)
    assert collator._units == [] and collator._mask_mode
    data = samples("gemma3")
    assert worst(model, collator(data), data) <= 1e-12
    import microbatch.hf.collate as C

    monkeypatch.setattr(C, "_mask_factory", lambda *args: None)
    with pytest.raises(PackingError, match="token_type_ids"):
        PackedCollator(model, pad_images=False)


def test_gemma3_under_flex_attention_is_refused_with_the_fix():
    model = H.build_model("gemma3", "sdpa")
    model.config._attn_implementation = "flex_attention"  # its masks are not what the collator builds
    c = PackedCollator(model.config, pad_images=False)  # bound to a config: no probe, the masks built for the batch
    with pytest.raises(microbatch.SettingError, match="'sdpa' or 'eager'"):
        c(samples("gemma3"))


def test_paligemma_needs_token_type_ids_and_counts_positions_from_1():
    model = H.build_model("paligemma", "sdpa").eval()
    pad = samples("paligemma", counts=(1,), seed=11)[0]
    for collator in (PackedCollator(model), PackedCollator(model, padding_sample=pad)):
        data = samples("paligemma")
        batch = collator(data)
        assert batch["position_ids"][0, 0].item() == 1  # as PaliGemma numbers a sequence alone
        assert worst(model, batch, data) <= 1e-12
        data = [{k: v for k, v in s.items() if k != "token_type_ids"} for s in data]
        with pytest.raises(microbatch.InputError, match="token_type_ids") as e:
            collator(data)
        assert e.value.item == 0
    # What the requirement prevents: without token_type_ids a document alone attends both ways, packed causally.
    assert worst(model, PackedCollator(model, check_packing=False)(data), data) > 1e-3
    # The padding sample given is the padding document of an image-less micro-batch.
    b = PackedCollator(model, padding_sample=pad)(samples("paligemma", counts=(0,)))
    assert torch.equal(b["pixel_values"], pad["pixel_values"])


def test_per_image_layout_of_idefics3_packs_too():
    """Idefics3 samples given one image a row, (n_images, 1, C, H, W), next to the processor's (1, n_images, ...)."""
    model = H.build_model("idefics3", "sdpa").eval()
    data = samples("idefics3", counts=(2, 1, 3))
    per_image = dict(data[0], pixel_values=data[0]["pixel_values"].transpose(0, 1),
                     pixel_attention_mask=data[0]["pixel_attention_mask"].transpose(0, 1))
    mixed = [per_image] + data[1:]
    assert worst(model, PackedCollator(model)(mixed), data) <= 1e-12


def test_images_of_different_shapes_where_the_model_cannot_take_padded_ones():
    """LLaVA's tower takes one image size: images of two shapes raise, naming the sample and the size to give."""
    model = H.build_model("llava", "sdpa")
    collator = PackedCollator(model)
    data = samples("llava", counts=(1, 1))
    data[1]["pixel_values"] = torch.zeros(1, 3, 4, 8, dtype=torch.float64)
    with pytest.raises(microbatch.DtypeError, match="8 x 8") as e:
        collator(data)
    assert e.value.item == 1
    data[1]["pixel_values"] = torch.zeros(3, 8, 8, dtype=torch.float64)  # another layout: named as such
    with pytest.raises(microbatch.DtypeError, match="same layout"):
        collator(data)


def test_a_padding_image_is_settled_when_the_collator_is_made():
    """Bound to a config (nothing to run), a vision model of another layout needs padding_sample= or pad_images=False,
    said at construction, not at the first image-less micro-batch."""
    model = H.build_model("mistral3", "sdpa")
    with pytest.raises(microbatch.SettingError, match="padding_sample") as e:
        PackedCollator(model.config)
    assert e.value.item == "padding_sample"
    pad = samples("mistral3", counts=(1,))[0]
    b = PackedCollator(model.config, padding_sample=pad)(samples("mistral3", counts=(0,)))
    assert torch.equal(b["image_sizes"], pad["image_sizes"])
    unpadded = PackedCollator(model.config, pad_images=False)
    assert "pixel_values" not in unpadded(samples("mistral3", counts=(0,)))
    with pytest.raises(microbatch.SettingError, match="padding_sample"):
        unpadded.padding_document(image=True)
    with pytest.raises(microbatch.SettingError, match="no image"):
        PackedCollator(model.config, padding_sample={"input_ids": [1, 2]})
    # From the model, the smallest image Pixtral takes (it crops each image to its image_sizes).
    c = PackedCollator(model)
    assert c.padding_document(image=True)["image_sizes"].tolist() == [[4, 8]]
    # A model whose vision tower takes no image of its config's size: said at construction.
    model.config.vision_config.image_size = 3
    with pytest.raises(microbatch.SettingError, match="cannot build a padding image"):
        PackedCollator(model)


# --- DDP ------------------------------------------------------------------------

SAMPLES, GLOBAL_BATCH, SEQ_LEN, SEED, LR = 24, 8, 96, 5, 0.5
DDP_BOUND = 1e-10


def ddp_worker(rank, world, port, out):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader

    from dist_support import worker_group

    torch.set_num_threads(1)
    with worker_group(rank, world, port):
        data = H.make_dataset("gemma3", SAMPLES)
        sampler = ddp_sampler(data)
        model = H.build_model("gemma3", "sdpa")
        collator = PackedCollator(model)
        loader = DataLoader(data, batch_sampler=sampler, collate_fn=collator)
        model = DDP(model)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        record = {"params": [], "ids": [], "masks": 0, "imageless": 0}
        batches = iter(loader)
        for step in sampler.steps():
            scale = step.loss_scale("token", "mean")
            ids = []
            for j in range(step.micro_steps):
                batch = next(batches)
                mine = step.micro_batch(j)
                ids += mine
                record["masks"] += "attention_mask" in batch
                record["imageless"] += not any(int((data[i]["input_ids"] == H.IMAGE_TOKEN).sum()) for i in mine)
                last = j == step.micro_steps - 1
                with contextlib.nullcontext() if last else model.no_sync():
                    (summed_loss(model(**batch), batch, "token") * scale).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            record["params"].append(H.flat(model.module))
            record["ids"].append(ids)
        torch.save(record, out / f"rank{rank}.pt")


def ddp_sampler(data, world=None, rank=None):
    from microbatch.torch import BalancedBatchSampler

    text, images, loss = H.metadata(data)
    return BalancedBatchSampler(text, images, loss_tokens=loss, global_batch_size=GLOBAL_BATCH,
                                model=H.PLANNER_MODEL, seq_len=SEQ_LEN, seed=SEED, num_replicas=world, rank=rank,
                                micro_steps=3, verify=world is None)


def test_gemma3_ddp_with_two_processes_equals_the_unsplit_step(tmp_path):
    """The documented loop (help(microbatch.hf)) on Gemma 3 with token_type_ids and images, 2 gloo processes, 3
    steps of SGD with 3 micro-steps a rank (some of them image-less): the parameters after every step equal one
    process training on the unsplit global batch, each sample alone through the model's own forward, within 1e-10."""
    from dist_support import spawn

    spawn(ddp_worker, 2, tmp_path)
    data = H.make_dataset("gemma3", SAMPLES)
    batches = [b.tolist() for b in ddp_sampler(data, 1, 0).batches()]
    ref = H.reference("gemma3", "sdpa", data, batches, "token", lr=LR)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert len(ranks[0]["params"]) == len(batches) == 3
    report = []
    for s, batch in enumerate(batches):
        assert sorted(i for r in ranks for i in r["ids"][s]) == sorted(batch)
        report.append(H.rel(ranks[0]["params"][s], ref[s]))
    print("gemma3 DDP, parameters from the reference per step:", ", ".join(f"{x:.2e}" for x in report))
    assert max(report) <= DDP_BOUND, report
    assert H.rel(ranks[1]["params"][-1], ranks[0]["params"][-1]) == 0.0
    assert sum(r["masks"] for r in ranks) > 0 and sum(r["imageless"] for r in ranks) > 0
