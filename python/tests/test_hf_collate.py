"""PackedCollator on real transformers models (tiny configs, random weights, float64, CPU, nothing downloaded).

The reference is each sample run alone, unpacked, through the model's own
``forward`` (positions, M-RoPE included, computed by the model), with
``config.use_cache`` left at its default (``True``). Packed by the collator,
every sample's logits must equal its own to rounding (1e-12 relative in
float64 with sdpa, where 0.0 is what is measured), for Llama, Qwen2,
Qwen2-VL and Qwen2.5-VL (0-3 images a sample, of different grid sizes), with
sdpa and eager attention. Eager attention in transformers computes its
softmax in float32 (``softmax(..., dtype=torch.float32)``), so a packed row,
whose masked entries differ from the unpacked row's, rounds differently
there: its bound is 1e-6, a few float32 epsilons (1.2e-7; 8e-8 measured).
"""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import microbatch  # noqa: E402
from microbatch.hf import PackedCollator, PackingError  # noqa: E402
from microbatch.torch import summed_loss  # noqa: E402

transformers.logging.set_verbosity_error()


pytestmark = pytest.mark.usefixtures("one_torch_thread")


VOCAB = 64
IMAGE, VIDEO, START, END = 60, 61, 62, 63
TEXT = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
VISION = dict(depth=1, hidden_size=32, num_heads=2, patch_size=2, temporal_patch_size=1,
              spatial_merge_size=2, in_channels=3)
BOUND = {"sdpa": 1e-12, "eager": 1e-6}  # relative; eager's softmax is float32
MODELS = ["llama", "qwen2", "qwen2-vl", "qwen2.5-vl"]
VLMS = {"qwen2-vl", "qwen2.5-vl"}


def build(name, attention="sdpa", seed=0):
    torch.manual_seed(seed)
    if name == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**TEXT))
    elif name == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**TEXT))
    else:
        text = dict(TEXT, rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0})
        ids = dict(image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END)
        if name == "qwen2-vl":
            config = transformers.Qwen2VLConfig(text_config=text, vision_config=dict(VISION, embed_dim=16, mlp_ratio=2), **ids)
            model = transformers.Qwen2VLForConditionalGeneration(config)
        else:
            vision = dict(VISION, out_hidden_size=32, intermediate_size=32, window_size=8, fullatt_block_indexes=[0])
            config = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)
            model = transformers.Qwen2_5_VLForConditionalGeneration(config)
    model = model.double()
    model.set_attn_implementation(attention)
    return model


def image(h, w, gen):
    """One image of h x w patches (pixel rows of 3 * 1 * 2 * 2) and its h * w / 4 placeholders."""
    return torch.randn(h * w, 12, generator=gen, dtype=torch.float64), torch.tensor([[1, h, w]]), h * w // 4


def samples(vlm, seed=0, images=(0, 2, 1, 3, 0)):
    """Text samples of different lengths, with labels partly masked; for a VLM with images of different grids."""
    gen = torch.Generator().manual_seed(seed)
    grids = [(2, 2), (2, 4), (4, 2), (4, 4)]
    out = []
    for i, count in enumerate(images):
        ids = torch.randint(1, 50, (3 + 2 * i,), generator=gen).tolist()
        pixels, thw = [], []
        if vlm:
            for k in range(count):
                px, g, n = image(*grids[(i + k) % len(grids)], gen)
                ids += [START] + [IMAGE] * n + [END] + torch.randint(1, 50, (2,), generator=gen).tolist()
                pixels.append(px)
                thw.append(g)
        s = {"input_ids": torch.tensor(ids)}
        labels = s["input_ids"].clone()
        labels[labels >= 60] = -100
        labels[1] = -100
        s["labels"] = labels
        if pixels:
            s["pixel_values"] = torch.cat(pixels)
            s["image_grid_thw"] = torch.cat(thw)
        out.append(s)
    return out


def alone(model, s):
    """The sample's logits run alone, unpacked, positions computed by the model, its cache default untouched."""
    kw = {k: s[k] for k in ("pixel_values", "image_grid_thw") if k in s}
    if kw:
        ids = s["input_ids"]
        kw["mm_token_type_ids"] = ((ids == IMAGE).long() + 2 * (ids == VIDEO).long()).unsqueeze(0)
    return model(input_ids=s["input_ids"].unsqueeze(0), **kw).logits[0]


def rel(a, b):
    return float((a - b).detach().abs().max() / b.detach().abs().max())


def use_cache_default(model):
    config = model.config.get_text_config()
    return getattr(config, "use_cache", None)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", MODELS)
def test_packed_logits_equal_each_sample_alone(name, attention):
    model = build(name, attention).eval()
    assert use_cache_default(model) is True  # the default that hid the leak
    collator = PackedCollator(model)
    data = samples(name in VLMS)
    batch = collator(data)
    assert batch["use_cache"] is False and batch["input_ids"].shape[0] == 1
    if name in VLMS:
        assert batch["position_ids"].shape == (4, 1, batch["input_ids"].shape[1])
        assert "cu_seq_lens_q" not in batch  # a vision tower would take them for its own
        assert batch["image_grid_thw"].shape[0] == sum(s.get("image_grid_thw", torch.zeros(0, 3)).shape[0] for s in data)
    else:
        assert batch["cu_seq_lens_q"].dtype == torch.int32
    with torch.no_grad():
        packed = model(**batch).logits[0]
        start = 0
        for s in data:
            n = s["input_ids"].shape[0]
            own = alone(model, s)
            assert rel(packed[start : start + n], own) <= BOUND[attention], (name, attention, start)
            start += n
        assert start == packed.shape[0]


@pytest.mark.parametrize("name", ["qwen2", "qwen2.5-vl"])
def test_summed_loss_of_the_packed_batch_is_the_sum_of_the_samples(name):
    model = build(name)
    collator = PackedCollator(model, check_packing=False)
    data = samples(name in VLMS, seed=3)
    batch = collator(data)
    out = model(**batch)
    for norm in ("token", "sample"):
        want = 0.0
        for s in data:
            logits = alone(model, s)
            ce = torch.nn.functional.cross_entropy(logits[:-1], s["labels"][1:], ignore_index=-100, reduction="sum")
            count = int((s["labels"][1:] != -100).sum())
            want += ce.item() / (count if norm == "sample" and count else 1)
        got = summed_loss(out, batch, norm).item()
        assert got == pytest.approx(want, rel=1e-12)


def grads(model):
    return {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", MODELS)
def test_empty_micro_batch_runs_with_zero_loss_and_reaches_every_parameter(name):
    model = build(name)
    collator = PackedCollator(model)
    batch = collator([])
    assert batch["input_ids"].shape[1] >= 1 and bool((batch["labels"] == -100).all())
    if name in VLMS:  # the padding document carries one image, so the vision tower runs
        assert batch["pixel_values"].shape[0] > 0
    for norm in ("token", "sample"):
        model.zero_grad(set_to_none=True)
        loss = summed_loss(model(**batch), batch, norm)
        assert loss.item() == 0.0
        loss.backward()
        missing = [n for n, g in grads(model).items() if g is None]
        assert not missing, f"no gradient for {missing[:5]}"
        nonzero = [n for n, g in grads(model).items() if torch.count_nonzero(g)]
        assert not nonzero, f"a non-zero gradient for {nonzero[:5]}"


@pytest.mark.parametrize("name", sorted(VLMS))
def test_image_less_micro_batch_gets_a_zero_weighted_image(name):
    model = build(name)
    collator = PackedCollator(model)
    data = samples(True, seed=5, images=(0, 0, 0))
    batch = collator(data)
    assert batch["image_grid_thw"].tolist() == [[1, 2, 2]]  # one padding image, the smallest
    T = sum(s["input_ids"].shape[0] for s in data)
    assert bool((batch["labels"][0, T:] == -100).all())
    # The real samples' loss and gradient are those of the batch without the padding document...
    loss = summed_loss(model(**batch), batch, "token")
    loss.backward()
    with_pad = {n: g.clone() for n, g in grads(model).items()}
    model.zero_grad(set_to_none=True)
    plain = PackedCollator(model, check_packing=False, pad_images=False)(data)
    assert "pixel_values" not in plain
    loss_plain = summed_loss(model(**plain), plain, "token")
    loss_plain.backward()
    assert loss.item() == pytest.approx(loss_plain.item(), rel=1e-13)
    # ... except that every vision parameter now gets a (zero) gradient, which DDP needs.
    for n, g in with_pad.items():
        assert g is not None, n
        other = model.get_parameter(n).grad
        if other is None:
            assert "visual" in n and torch.count_nonzero(g) == 0, n
        else:
            assert torch.allclose(g, other, rtol=1e-12, atol=1e-14), n
    assert any(model.get_parameter(n).grad is None for n in with_pad)  # the case this covers


def test_the_same_fields_as_transformers_data_collator_with_flattening():
    """Field by field against ``DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=True)``.

    Equal values and dtypes for every key both define (``input_ids``,
    ``labels``, ``position_ids``, ``cu_seq_lens_q``, ``cu_seq_lens_k``,
    ``max_length_q``, ``max_length_k``), samples without tokens left out by
    both. What differs, and why:

    - ``use_cache=False``: only ours. transformers builds the packed mask
      from ``position_ids`` only when no cache is created, and
      ``config.use_cache`` is ``True`` by default: with HF's batch as is,
      ``model(**batch)`` lets the documents attend to each other.
    - An empty micro-batch: HF raises ``ValueError``; ours gives a padding
      document with zero loss (every rank must run every micro-step).
    - Multimodal RoPE models: ours gives ``position_ids`` of shape
      ``(4, 1, T)`` (HF's collator has no notion of them) and, for models
      with a vision tower, no varlen keys (the tower would receive them);
      per-image keys are concatenated (HF's collator drops them).
    """
    model = build("llama")
    ours = PackedCollator(model)
    hf = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=True)
    data = samples(False, seed=9)
    data.insert(1, {"input_ids": torch.zeros(0, dtype=torch.int64), "labels": torch.zeros(0, dtype=torch.int64)})
    unlabelled = [{"input_ids": s["input_ids"]} for s in data]  # the inputs serve as labels
    for case in (data, unlabelled):
        a = ours(case)
        b = hf([{k: v.tolist() for k, v in s.items()} for s in case])
        shared = sorted(set(a) & set(b))
        assert shared == ["cu_seq_lens_k", "cu_seq_lens_q", "input_ids", "labels", "max_length_k", "max_length_q", "position_ids"]
        for k in shared:
            if isinstance(b[k], torch.Tensor):
                assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
            else:
                assert a[k] == b[k] and type(a[k]) is type(b[k]), k
        assert set(a) - set(b) == {"use_cache"} and set(b) - set(a) == set()
    with pytest.raises(ValueError):
        hf([])
    assert ours([])["input_ids"].shape == (1, 1)


@pytest.mark.parametrize("name", ["llama", "qwen2-vl"])
def test_the_leak_comes_back_without_use_cache_false(name):
    """The mechanism of issue 19, point 1: with the cache on (the default), transformers ignores the packing."""
    model = build(name).eval()
    collator = PackedCollator(model)
    data = samples(name in VLMS)
    batch = collator(data)
    del batch["use_cache"]
    with torch.no_grad():
        packed = model(**batch).logits[0]
    n0 = data[0]["input_ids"].shape[0]
    second = packed[n0 : n0 + data[1]["input_ids"].shape[0]]
    assert rel(second, alone(model, data[1])) > 0.05  # the second document attends to the first


def test_the_probe_catches_a_collator_that_leaves_the_cache_on(monkeypatch):
    """The probe runs the collator's own batch: a regression that drops use_cache=False is refused at construction."""
    model = build("qwen2")
    original = PackedCollator._pack

    def leaky(self, docs, present, *args):
        batch = original(self, docs, present, *args)
        del batch["use_cache"]
        return batch

    monkeypatch.setattr(PackedCollator, "_pack", leaky)
    with pytest.raises(PackingError) as e:
        PackedCollator(model)
    assert "mixes packed documents" in str(e.value) and e.value.measured[0] > 0.05
    assert isinstance(e.value, microbatch.SettingError) and e.value.kind == "Packing"
    PackedCollator(model, check_packing=False)  # the escape hatch, at the user's risk


@pytest.mark.parametrize("name", ["llama", "qwen2.5-vl"])
def test_the_probe_refuses_a_model_whose_attention_ignores_packing(name, monkeypatch):
    """A model whose mask code never detects packing (simulated: transformers' detection switched off).

    What it catches: any model, attention implementation or transformers
    version under which two tiny packed documents give other logits than
    each alone. What it cannot catch: a leak that appears only at lengths,
    image sizes or inputs other than the probe's.
    """
    import transformers.masking_utils as mu

    model = build(name)
    PackedCollator(model)  # passes as is
    monkeypatch.setattr(mu, "find_packed_sequence_indices", lambda position_ids: None)
    with pytest.raises(PackingError) as e:
        PackedCollator(model)
    packed, leak = e.value.measured
    assert packed > 0.05 and leak > 0.05
    assert type(model).__name__ in str(e.value) and "attn_implementation='sdpa'" in str(e.value)


def test_m_rope_needs_the_text_row():
    """With the 3 M-RoPE rows only (no text row 0), transformers does not detect packing either."""
    model = build("qwen2-vl").eval()
    data = samples(True)
    batch = PackedCollator(model)(data)
    batch["position_ids"] = batch["position_ids"][1:]
    with torch.no_grad():
        packed = model(**batch).logits[0]
    n0 = data[0]["input_ids"].shape[0]
    assert rel(packed[n0 : n0 + data[1]["input_ids"].shape[0]], alone(model, data[1])) > 0.05


@pytest.mark.parametrize("name", ["qwen2", "qwen2.5-vl"])
def test_bound_to_the_config_or_pickled_the_batch_is_the_same(name):
    model = build(name)
    data = samples(name in VLMS)
    a = PackedCollator(model)(data)
    from_config = PackedCollator(model.config)
    assert from_config.mrope == (name in VLMS)
    blob = pickle.dumps(PackedCollator(model, check_packing=False))
    assert len(blob) < 100_000  # the weights stay behind (a DataLoader worker gets the config only)
    for c in (from_config, pickle.loads(blob)):
        b = c(data)
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k], k


def test_per_token_keys_are_packed_and_unknown_keys_refused():
    model = build("qwen2-vl")
    collator = PackedCollator(model, check_packing=False, drop_keys=("id",))
    data = samples(True, images=(1, 0, 2))
    types = [((s["input_ids"] == IMAGE).long()).unsqueeze(0) for s in data]  # (1, L) as processors give
    for s, t in zip(data, types):
        s["mm_token_type_ids"] = t
        s["attention_mask"] = torch.ones_like(t)
        s["id"] = "dropped"
    b = collator(data)
    assert b["mm_token_type_ids"].shape == b["input_ids"].shape
    assert torch.equal(b["mm_token_type_ids"][0], torch.cat([t[0] for t in types]))
    assert "attention_mask" not in b and "id" not in b
    # A sample without the per-token key: derived from its placeholders (mm_token_type_ids only).
    del data[1]["mm_token_type_ids"]
    assert torch.equal(collator(data)["mm_token_type_ids"], b["mm_token_type_ids"])
    plain = PackedCollator(model, check_packing=False)
    with pytest.raises(microbatch.InputError, match="'id'") as e:
        plain(data)
    assert e.value.item == 0
    data[2]["attention_mask"] = torch.tensor([1] * (data[2]["input_ids"].shape[0] - 1) + [0])
    with pytest.raises(microbatch.InputError, match="padding") as e:
        collator(data)
    assert e.value.item == 2


def test_samples_the_model_would_refuse_are_named():
    model = build("qwen2-vl")
    c = PackedCollator(model, check_packing=False)
    good = samples(True, images=(1, 2))
    cases = []
    s = dict(good[1], input_ids=good[1]["input_ids"][:-3])  # one placeholder run too short... and text cut
    s["input_ids"] = torch.cat([good[1]["input_ids"][:4], good[1]["input_ids"][5:]])
    cases.append(("placeholder", s))
    cases.append(("patches", dict(good[1], pixel_values=good[1]["pixel_values"][:-1])))
    cases.append(("no image_grid_thw", {k: v for k, v in good[1].items() if k != "image_grid_thw"}))
    cases.append(("position_ids", dict(good[1], position_ids=torch.arange(good[1]["input_ids"].shape[0]))))
    cases.append(("positions", dict(good[1], labels=good[1]["labels"][:-1])))
    for what, bad in cases:
        with pytest.raises(microbatch.InputError) as e:
            c([good[0], bad])
        assert e.value.item == 1, what
    own = PackedCollator(model, check_packing=False, drop_keys=("position_ids",))  # the collator's own instead
    assert torch.equal(own([good[0], cases[3][1]])["position_ids"], c(good)["position_ids"])
    # Two images whose placeholders touch: the model's positions would be wrong.
    px, g, n = image(2, 2, torch.Generator().manual_seed(0))
    merged = {"input_ids": torch.tensor([1, START] + [IMAGE] * (2 * n) + [END]),
              "pixel_values": torch.cat([px, px]), "image_grid_thw": torch.cat([g, g])}
    with pytest.raises(microbatch.InputError, match="runs") as e:
        c([merged])
    assert e.value.item == 0


def test_a_padding_sample_is_the_padding_document_and_carries_an_image():
    """Made with pad_images=False, an image-less micro-batch gets no image; a padding_sample given is the padding
    document (its image included); one without an image is refused when the collator is made."""
    model = build("qwen2-vl")
    config = model.config
    assert PackedCollator(config, pad_images=False)(samples(True, images=(0,))).get("pixel_values") is None
    pad = samples(True, images=(1,))[0]
    b = PackedCollator(config, padding_sample=pad)(samples(True, images=(0,)))
    assert torch.equal(b["pixel_values"], pad["pixel_values"]) and bool((b["labels"][0, -len(pad["labels"]):] == -100).all())
    with pytest.raises(microbatch.SettingError, match="no image") as e:  # a padding sample without an image: said now
        PackedCollator(config, padding_sample={"input_ids": [1, 2]})
    assert e.value.item == "padding_sample"


def test_settings_and_inputs_that_are_not_models_or_samples():
    with pytest.raises(microbatch.SettingError) as e:
        PackedCollator(torch.nn.Linear(2, 2))
    assert e.value.item == "model_or_config"
    config = transformers.LlamaConfig(**TEXT)
    with pytest.raises(microbatch.SettingError):
        PackedCollator(config, token_keys=("labels",))
    with pytest.raises(microbatch.SettingError):
        PackedCollator(config, token_keys=("x",), item_keys=("x",))
    c = PackedCollator(config)
    with pytest.raises(microbatch.InputError):
        c({"input_ids": [1, 2]})
    with pytest.raises(microbatch.InputError) as e:
        c([{"input_ids": [1]}, {"labels": [1]}])
    assert e.value.item == 1
    with pytest.raises(microbatch.DtypeError) as e:
        c([{"input_ids": [1, 2]}, {"input_ids": [[1, 2], [3]]}])
    assert e.value.item == 1
    with pytest.raises(microbatch.DtypeError):
        c([{"input_ids": [1.5, 2.0]}])
    x = torch.tensor([3, 4, 5])
    assert c([{"input_ids": x, "token_type_ids": torch.zeros(3, requires_grad=True)}])["input_ids"].tolist() == [[3, 4, 5]]
    with pytest.raises(microbatch.InputError) as e:  # a per-token key in some samples only
        c([{"input_ids": x, "token_type_ids": [0, 0, 0]}, {"input_ids": x}])
    assert e.value.item == 1
    with pytest.raises(microbatch.DtypeError) as e:
        c([{"input_ids": x, "token_type_ids": [0, 0]}])
    assert e.value.item == 0
    for bad in (VOCAB, -1):  # the model would raise IndexError in its embedding, for the whole batch
        with pytest.raises(microbatch.InputError, match="vocabulary") as e:
            c([{"input_ids": [1]}, {"input_ids": [2, bad]}])
        assert e.value.item == 1
    with pytest.raises(microbatch.DtypeError):
        PackedCollator(config, label_pad=1.5)
    err = pickle.loads(pickle.dumps(PackingError("m", measured=(1.0, 2.0))))
    assert err.measured == (1.0, 2.0) and err.kind == "Packing"


@pytest.mark.parametrize("name", sorted(VLMS))
def test_videos_are_positioned_per_sample_too(name):
    model = build(name).eval()
    gen = torch.Generator().manual_seed(1)
    video = {"input_ids": torch.tensor([5, 6, START] + [VIDEO] * 4 + [END, 7]),
             "pixel_values_videos": torch.randn(16, 12, generator=gen, dtype=torch.float64),
             "video_grid_thw": torch.tensor([[4, 2, 2]])}  # 4 frames of 2 x 2 patches: 4 placeholders
    if name == "qwen2.5-vl":
        video["second_per_grid_ts"] = torch.tensor([0.5])
    data = samples(True, images=(1, 0)) + [video] + samples(True, images=(2,), seed=4)
    batch = PackedCollator(model)(data)
    assert batch["video_grid_thw"].tolist() == [[4, 2, 2]]
    with torch.no_grad():
        packed = model(**batch).logits[0]
        start = 0
        for s in data:
            kw = {k: s[k] for k in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw",
                                    "second_per_grid_ts") if k in s}
            ids = s["input_ids"]
            kw["mm_token_type_ids"] = ((ids == IMAGE).long() + 2 * (ids == VIDEO).long()).unsqueeze(0)
            own = model(input_ids=ids.unsqueeze(0), **kw).logits[0]
            assert rel(packed[start : start + ids.shape[0]], own) <= 1e-12
            start += ids.shape[0]


def other_family(name):
    """Tiny models of families the collator knows nothing specific about (None where this transformers lacks one)."""
    cls = lambda n: getattr(transformers, n, None)  # noqa: E731
    base = dict(TEXT, head_dim=8)
    text = {
        "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=4)),
        "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(sliding_window=4)),
        "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(pad_token_id=0)),
        "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
        "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(pad_token_id=0)),
    }
    if name in text:
        c, m, kw = text[name]
        if cls(c) is None or cls(m) is None:
            return None
        return cls(m)(cls(c)(**base, **kw))
    if cls("Qwen3VLConfig") is None:
        return None
    rope = {"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0, "mrope_interleaved": True}
    config = transformers.Qwen3VLConfig(
        text_config=dict(base, rope_parameters=rope),
        vision_config=dict(VISION, depth=2, intermediate_size=32, out_hidden_size=32, num_position_embeddings=16,
                           deepstack_visual_indexes=[0]),
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END)
    return transformers.Qwen3VLForConditionalGeneration(config)


@pytest.mark.parametrize("name", ["mistral", "gemma3", "phi3", "qwen3", "smollm3", "qwen3-vl"])
def test_other_families_through_what_the_collator_reads_from_the_model(name):
    """Nothing family-specific in the collator: these pass through what it reads (get_rope_index, token ids, vision config)."""
    torch.manual_seed(0)
    model = other_family(name)
    if model is None:
        pytest.skip(f"this transformers has no {name}")
    model = model.double().eval()
    collator = PackedCollator(model)
    assert collator.mrope == (name == "qwen3-vl")
    data = samples(name == "qwen3-vl")
    with torch.no_grad():
        packed = model(**collator(data)).logits[0]
        start = 0
        for s in data:
            n = s["input_ids"].shape[0]
            assert rel(packed[start : start + n], alone(model, s)) <= 1e-12, (name, start)
            start += n
    batch = collator([])
    summed_loss(model(**batch), batch).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_a_vision_model_of_another_layout_gets_a_padding_image_when_the_collator_is_made():
    """LLaVA (pixel_values (n, 3, H, W), no grid): the collator sizes a padding image by running the vision tower."""
    if getattr(transformers, "LlavaConfig", None) is None:
        pytest.skip("this transformers has no LLaVA")
    torch.manual_seed(0)
    vision = dict(model_type="clip_vision_model", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2, image_size=8, patch_size=4, projection_dim=16)
    config = transformers.LlavaConfig(vision_config=vision, text_config=dict(TEXT, model_type="llama"),
                                      image_token_index=IMAGE, vision_feature_layer=-1)
    model = transformers.LlavaForConditionalGeneration(config).double()
    collator = PackedCollator(model)
    data = samples(False, images=(0, 0))
    batch = collator(data)
    assert batch["pixel_values"].shape == (1, 3, 8, 8)  # (8 / 4)^2 = 4 placeholders
    assert int((batch["input_ids"] == IMAGE).sum()) == 4
    loss = summed_loss(model(**batch), batch, "token")
    loss.backward()
    padded = {n: p.grad for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    real = dict(data[0], input_ids=torch.cat([data[0]["input_ids"], torch.full((4,), IMAGE)]),
                labels=torch.cat([data[0]["labels"], torch.full((4,), -100)]), pixel_values=torch.randn(1, 3, 8, 8))
    with_image = collator([real])
    summed_loss(model(**with_image), with_image).backward()
    # The padding image reaches every parameter a real image reaches, with a zero gradient in the vision tower.
    for n, p in model.named_parameters():
        assert (padded[n] is None) == (p.grad is None), n
        if padded[n] is not None and ("vision" in n or "projector" in n):
            assert torch.count_nonzero(padded[n]) == 0, n
    model.eval()
    with torch.no_grad():
        packed = model(**batch).logits[0]
        start = 0
        for s in data:
            n = s["input_ids"].shape[0]
            assert rel(packed[start : start + n], alone(model, s)) <= 1e-12
            start += n


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_probe_bound_in_lower_precisions(dtype, monkeypatch):
    """A model in float32 passes within float32 rounding, in 16 bits within a tenth of a leak; a leak fails in each."""
    import transformers.masking_utils as mu

    model = build("qwen2-vl").to(getattr(torch, dtype))
    collator = PackedCollator(model)
    packed, leak = collator.check(model)
    assert packed <= (1.2e-4 if dtype == "float32" else 0.1 * leak)
    monkeypatch.setattr(mu, "find_packed_sequence_indices", lambda position_ids: None)
    with pytest.raises(PackingError):
        collator.check(model)
