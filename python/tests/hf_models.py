"""Tiny Hugging Face models built in code, a synthetic dataset for them and the unsplit reference.

Shared by ``test_hf_ddp.py``, ``test_hf_trainer.py`` and ``test_hf_families.py``
(imported by pytest and by the spawned workers; nothing is downloaded). Every
model is random, in float64, of 2 layers and hidden size 32; the vision towers
of Qwen2-VL and Qwen2.5-VL have depth 2 on 2x2-pixel patches, so an image of
``(1, h, w)`` patches becomes ``h * w / 4`` language-model tokens.

:data:`FAMILIES` are vision-language families of other image layouts, each
with a one-layer vision tower of hidden size 16 on 8 x 8-pixel images (4
language-model tokens an image; Mistral3's Pixtral tower takes images of up
to 16 x 16 pixels at one token per 4 x 4), their samples laid out as each
family's processor lays them out (:func:`make_dataset`): Gemma 3 (a sliding
and a full attention layer, window 4; ``token_type_ids`` 1 at image tokens),
PaliGemma (image first, ``token_type_ids`` 0 on the prefix, 1 on the suffix),
Idefics3 and SmolVLM (``pixel_values`` ``(1, n_images, 3, 8, 8)`` with
``pixel_attention_mask``), Mistral3 (images of different sizes zero-padded
within a sample, ``image_sizes``, a break token after each row of image
tokens), InternVL (tiles between start and end tokens), LLaVA, and LLaVA-Next
(each image's tiles ``(n_images, max_tiles, 3, 8, 8)``, zero-padded within a
sample, with its ``image_sizes``).

:func:`reference` is the oracle: one process, the whole global batch, every
sample run alone and unpacked through the model's own forward (its own
positions, its own mask), the step's loss the mean over its loss tokens
(``"token"``) or over its samples of each sample's mean (``"sample"``), SGD.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

VOCAB = 160
# Token ids of the vision models (inside VOCAB, none used as text).
IMAGE_TOKEN, VIDEO_TOKEN, VISION_START, VISION_END = 151, 152, 153, 154
TEXT_VOCAB = 150  # text tokens are 1 .. TEXT_VOCAB - 1
PATCH, TEMPORAL, MERGE, CHANNELS = 2, 2, 2, 3
PIXEL_DIM = CHANNELS * TEMPORAL * PATCH * PATCH
# Image grids (t, h, w) in patches and their language-model tokens (h * w / MERGE**2).
GRIDS = ((1, 2, 2), (1, 4, 2), (1, 4, 4))
MODELS = ("llama", "qwen2", "qwen2_vl", "qwen2_5_vl")
VISION = ("qwen2_vl", "qwen2_5_vl")
FAMILIES = ("gemma3", "paligemma", "idefics3", "smolvlm", "mistral3", "internvl", "llava", "llava_next")
# Token ids of the families' image markup (inside VOCAB, none used as text).
BOI, EOI, IMG_BREAK, IMG_END, FAKE_IMAGE, BOS = 155, 156, 157, 158, 159, 1
#: Mistral3's image sizes (pixels), 4 x 4 pixels a language-model token.
PIXTRAL_SIZES = ((16, 16), (8, 16), (16, 8))
#: LLaVA-Next's images: size (pixels) -> (8 x 8 tiles its grid pinpoints cut it into, base tile included;
#: language-model tokens, the row-end tokens of its unpadded grid included).
LLAVA_NEXT_SIZES = {(8, 8): (2, 10), (8, 16): (3, 14), (16, 8): (3, 16)}
ATTENTIONS = ("sdpa", "eager")
PLANNER_MODEL = "qwen2.5-vl-7b"


def build_model(name: str, attention: str, *, seed: int = 0) -> torch.nn.Module:
    """A random float64 model of the family ``name`` (one of :data:`MODELS` or :data:`FAMILIES`), ``config.use_cache`` left at its default."""
    import transformers as tr

    if name in FAMILIES:
        return _build_family(name, attention, seed)

    text = dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=1, eos_token_id=2,
    )
    if name == "llama":
        config: Any = tr.LlamaConfig(**text)
        cls: Any = tr.LlamaForCausalLM
    elif name == "qwen2":
        config = tr.Qwen2Config(**text)
        cls = tr.Qwen2ForCausalLM
    elif name in VISION:
        # head_dim 8: M-RoPE's sections (temporal, height, width) cover its 4 frequencies.
        text_config = dict(text, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                  "mrope_section": [2, 1, 1]})
        special = dict(image_token_id=IMAGE_TOKEN, video_token_id=VIDEO_TOKEN,
                       vision_start_token_id=VISION_START, vision_end_token_id=VISION_END)
        if name == "qwen2_vl":
            vision = dict(depth=2, embed_dim=16, hidden_size=32, num_heads=2, mlp_ratio=2,
                          in_channels=CHANNELS, patch_size=PATCH, spatial_merge_size=MERGE,
                          temporal_patch_size=TEMPORAL)
            config = tr.Qwen2VLConfig(text_config=text_config, vision_config=vision, **special)
            cls = tr.Qwen2VLForConditionalGeneration
        else:
            # Windows of 2 x 2 merged tokens (window_size in pixels), full attention in block 1.
            vision = dict(depth=2, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                          in_channels=CHANNELS, patch_size=PATCH, spatial_merge_size=MERGE,
                          temporal_patch_size=TEMPORAL, window_size=8, fullatt_block_indexes=[1])
            config = tr.Qwen2_5_VLConfig(text_config=text_config, vision_config=vision, **special)
            cls = tr.Qwen2_5_VLForConditionalGeneration
    else:
        raise ValueError(f"unknown model {name!r}: use one of {MODELS}")
    config._attn_implementation = attention
    torch.manual_seed(seed)
    model = cls(config).double()
    model.train()
    return model


def _build_family(name: str, attention: str, seed: int) -> torch.nn.Module:
    import transformers as tr

    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, max_position_embeddings=512, bos_token_id=BOS, eos_token_id=2,
                pad_token_id=0)
    siglip = dict(model_type="siglip_vision_model", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2, image_size=8, patch_size=4)
    if name == "gemma3":
        config: Any = tr.Gemma3Config(
            text_config=dict(text, model_type="gemma3_text", sliding_window=4,
                             layer_types=["sliding_attention", "full_attention"]),
            vision_config=dict(siglip, vision_use_head=False), mm_tokens_per_image=4,
            image_token_index=IMAGE_TOKEN, boi_token_index=BOI, eoi_token_index=EOI)
        cls: Any = tr.Gemma3ForConditionalGeneration
    elif name == "paligemma":
        config = tr.PaliGemmaConfig(text_config=dict(text, model_type="gemma"),
                                    vision_config=dict(siglip, projection_dim=32, vision_use_head=False),
                                    image_token_index=IMAGE_TOKEN, projection_dim=32, hidden_size=32)
        cls = tr.PaliGemmaForConditionalGeneration
    elif name in ("idefics3", "smolvlm"):
        vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      image_size=8, patch_size=2)
        make = tr.Idefics3Config if name == "idefics3" else tr.SmolVLMConfig
        config = make(text_config=dict(text, model_type="llama"), vision_config=vision, image_token_id=IMAGE_TOKEN,
                      scale_factor=2, pad_token_id=0)
        cls = tr.Idefics3ForConditionalGeneration if name == "idefics3" else tr.SmolVLMForConditionalGeneration
    elif name == "mistral3":
        vision = dict(model_type="pixtral", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, head_dim=8, image_size=16, patch_size=2)
        config = tr.Mistral3Config(text_config=dict(text, model_type="mistral"), vision_config=vision,
                                   image_token_index=IMAGE_TOKEN, spatial_merge_size=2)
        cls = tr.Mistral3ForConditionalGeneration
    elif name == "internvl":
        vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      image_size=[8, 8], patch_size=[2, 2])
        config = tr.InternVLConfig(text_config=dict(text, model_type="qwen2"), vision_config=vision,
                                   image_token_id=IMAGE_TOKEN, downsample_ratio=0.5)
        cls = tr.InternVLForConditionalGeneration
    elif name == "llava":
        vision = dict(siglip, model_type="clip_vision_model", projection_dim=16)
        config = tr.LlavaConfig(vision_config=vision, text_config=dict(text, model_type="llama"),
                                image_token_index=IMAGE_TOKEN, vision_feature_layer=-1)
        cls = tr.LlavaForConditionalGeneration
    elif name == "llava_next":
        vision = dict(siglip, model_type="clip_vision_model", projection_dim=16)
        config = tr.LlavaNextConfig(vision_config=vision, text_config=dict(text, model_type="llama"),
                                    image_token_index=IMAGE_TOKEN, vision_feature_layer=-1,
                                    image_grid_pinpoints=[[8, 8], [8, 16], [16, 8], [16, 16]])
        cls = tr.LlavaNextForConditionalGeneration
    else:
        raise ValueError(f"unknown family {name!r}: use one of {FAMILIES}")
    torch.manual_seed(seed)
    model = cls(config).double()
    model.set_attn_implementation(attention)
    model.train()
    return model


def _family_sample(name: str, rng: np.random.Generator, count: int, words: np.ndarray, prompt: int) -> Dict[str, torch.Tensor]:
    """One sample of ``count`` images and the text ``words`` (its first ``prompt`` masked), as ``name``'s processor lays it out."""
    ids: List[int] = []
    sample: Dict[str, torch.Tensor] = {}

    def pixels(k: int, h: int = 8, w: int = 8) -> torch.Tensor:
        return torch.as_tensor(rng.uniform(-1, 1, (k, 3, h, w)))

    if name == "mistral3":
        sizes = [PIXTRAL_SIZES[int(rng.integers(0, len(PIXTRAL_SIZES)))] for _ in range(count)]
        for h, w in sizes:
            for r in range(h // 4):
                ids += [IMAGE_TOKEN] * (w // 4) + [IMG_BREAK if r < h // 4 - 1 else IMG_END]
        if sizes:  # zero-padded to the sample's largest image, the real sizes beside
            H, W = max(h for h, _ in sizes), max(w for _, w in sizes)
            px = torch.zeros(len(sizes), 3, H, W, dtype=torch.float64)
            for k, (h, w) in enumerate(sizes):
                px[k, :, :h, :w] = pixels(1, h, w)[0]
            sample["pixel_values"] = px
            sample["image_sizes"] = torch.tensor(sizes, dtype=torch.long)
    elif name == "llava_next":
        sizes = list(LLAVA_NEXT_SIZES)
        chosen = [sizes[int(rng.integers(0, len(sizes)))] for _ in range(count)]
        for hw in chosen:
            ids += [IMAGE_TOKEN] * LLAVA_NEXT_SIZES[hw][1] + [VISION_END]
        if chosen:  # each image's tiles, zero-padded to the sample's most
            tiles = [LLAVA_NEXT_SIZES[hw][0] for hw in chosen]
            px = torch.zeros(count, max(tiles), 3, 8, 8, dtype=torch.float64)
            for k, t in enumerate(tiles):
                px[k, :t] = pixels(t)
            sample["pixel_values"] = px
            sample["image_sizes"] = torch.tensor(chosen, dtype=torch.long)
    elif name == "internvl":
        tiles = [int(rng.integers(1, 3)) for _ in range(count)]
        for t in tiles:
            ids += [VISION_START] + [IMAGE_TOKEN] * (4 * t) + [VISION_END]
        if tiles:
            sample["pixel_values"] = pixels(sum(tiles))
    else:
        markup = {"gemma3": ([BOI], [EOI]), "idefics3": ([FAKE_IMAGE], [FAKE_IMAGE]),
                  "smolvlm": ([FAKE_IMAGE], [FAKE_IMAGE])}.get(name, ([], []))
        for _ in range(count):
            ids += markup[0] + [IMAGE_TOKEN] * 4 + markup[1]
        if count and name in ("idefics3", "smolvlm"):  # one sample, its images along dim 1
            sample["pixel_values"] = pixels(count).unsqueeze(0)
            sample["pixel_attention_mask"] = torch.ones(1, count, 8, 8, dtype=torch.bool)
        elif count:
            sample["pixel_values"] = pixels(count)
    if name == "paligemma":
        ids += [BOS]
    head = len(ids)
    ids += words.tolist()
    x = torch.tensor(ids, dtype=torch.long)
    labels = x.clone()
    labels[: head + prompt] = -100
    if name == "gemma3":
        sample["token_type_ids"] = (x == IMAGE_TOKEN).long()
    elif name == "paligemma":  # prefix (image, prompt) 0, suffix 1
        sample["token_type_ids"] = (torch.arange(len(ids)) >= head + prompt).long()
    sample["input_ids"] = x
    sample["labels"] = labels
    return sample


def make_dataset(name: str, n: int, *, seed: int = 7, image_every: int = 3) -> List[Dict[str, torch.Tensor]]:
    """``n`` samples: 3 to 24 text tokens, a masked prompt, every 7th without loss tokens; for the
    vision models one sample in ``image_every`` has 1 to 3 images (the rest none; PaliGemma's one)."""
    rng = np.random.default_rng(seed)
    data = []
    for i in range(n):
        if name in FAMILIES:
            t = int(rng.integers(3, 25))
            words = rng.integers(2 if name == "paligemma" else 1, TEXT_VOCAB, t)
            prompt = int(rng.integers(0, t // 2 + 1))
            count = (1 if name == "paligemma" else int(rng.integers(1, 4))) if i % image_every == 0 else 0
            sample = _family_sample(name, rng, count, words, prompt)
            if i % 7 == 3:
                sample["labels"][:] = -100
            data.append(sample)
            continue
        t = int(rng.integers(3, 25))
        words = rng.integers(1, TEXT_VOCAB, t)
        prompt = int(rng.integers(0, t // 2 + 1))
        sample: Dict[str, torch.Tensor] = {}
        if name in VISION:
            count = int(rng.integers(1, 4)) if i % image_every == 0 else 0
            grids = [GRIDS[int(rng.integers(0, len(GRIDS)))] for _ in range(count)]
            ids: List[int] = []
            types: List[int] = []
            for g in grids:
                k = g[1] * g[2] // MERGE**2
                ids += [VISION_START] + [IMAGE_TOKEN] * k + [VISION_END]
                types += [0] + [1] * k + [0]
            head = len(ids)
            ids += words.tolist()
            types += [0] * t
            x = torch.tensor(ids, dtype=torch.long)
            labels = x.clone()
            labels[: head + prompt] = -100
            sample["mm_token_type_ids"] = torch.tensor(types, dtype=torch.long)
            if grids:
                rows = sum(g[0] * g[1] * g[2] for g in grids)
                sample["pixel_values"] = torch.as_tensor(rng.standard_normal((rows, PIXEL_DIM)))
                sample["image_grid_thw"] = torch.tensor(grids, dtype=torch.long)
        else:
            x = torch.as_tensor(words, dtype=torch.long)
            labels = x.clone()
            labels[:prompt] = -100
        if i % 7 == 3:
            labels[:] = -100
        sample["input_ids"] = x
        sample["labels"] = labels
        data.append(sample)
    return data


def image_tokens(sample: Dict[str, torch.Tensor]) -> List[int]:
    """The sample's images as language-model token counts (what the planner takes)."""
    g = sample.get("image_grid_thw")
    if g is not None:
        return [int(r[0] * r[1] * r[2]) // MERGE**2 for r in g]
    if "image_sizes" in sample and sample["pixel_values"].dim() == 5:  # LLaVA-Next
        return [LLAVA_NEXT_SIZES[(int(h), int(w))][1] for h, w in sample["image_sizes"].tolist()]
    if "image_sizes" in sample:  # Mistral3: one token a 4 x 4 pixels
        return [int(h) // 4 * (int(w) // 4) for h, w in sample["image_sizes"].tolist()]
    # The other families: each image one run of placeholders (InternVL's tiles included).
    ids = sample["input_ids"]
    runs, n = [], 0
    for t in ids.tolist() + [-1]:
        if t == IMAGE_TOKEN:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs


def metadata(data: Sequence[Dict[str, torch.Tensor]]) -> Tuple[np.ndarray, List[List[int]], np.ndarray]:
    """(text tokens, image tokens, loss tokens) per sample, for :class:`microbatch.torch.BalancedBatchSampler`."""
    from microbatch.torch import loss_tokens

    images = [image_tokens(s) for s in data]
    text = np.array([len(s["input_ids"]) - sum(im) for s, im in zip(data, images)])
    loss = np.array([loss_tokens(s["labels"]) for s in data])
    return text, images, loss


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def sample_loss(model: torch.nn.Module, sample: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, int]:
    """One sample alone, through the model's own forward: (the sum of its token losses, its loss tokens)."""
    kw = {k: v[None] for k, v in sample.items() if k in ("input_ids", "mm_token_type_ids", "token_type_ids")}
    for k in ("pixel_values", "image_grid_thw", "image_sizes", "pixel_attention_mask"):
        if k in sample:
            kw[k] = sample[k]
    logits = model(**kw).logits[0]
    y = sample["labels"]
    per = F.cross_entropy(logits[:-1], y[1:], ignore_index=-100, reduction="sum")
    return per, int((y[1:] != -100).sum())


def reference(
    name: str,
    attention: str,
    data: Sequence[Dict[str, torch.Tensor]],
    batches: Sequence[Sequence[int]],
    normalization: str,
    *,
    lr: float,
    max_grad_norm: Optional[float] = None,
    losses: Optional[List[float]] = None,
) -> List[torch.Tensor]:
    """The oracle: parameters after each optimizer step of SGD on the unsplit, unpacked global batches
    (gradients clipped to ``max_grad_norm`` when given; each step's loss appended to ``losses``)."""
    model = build_model(name, attention)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    params = []
    for batch in batches:
        total = torch.zeros((), dtype=torch.float64)
        tokens = 0
        for i in batch:
            s, k = sample_loss(model, data[int(i)])
            if normalization == "token":
                total = total + s
                tokens += k
            elif k:
                total = total + s / k
        loss = total / (tokens if normalization == "token" else len(batch))
        if losses is not None:
            losses.append(float(loss.detach()))
        opt.zero_grad()
        loss.backward()
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        opt.step()
        params.append(flat(model))
    return params


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """The relative difference ``|a - b| / |b|`` (Euclidean norms over all parameters)."""
    return float((a - b).norm() / b.norm())
