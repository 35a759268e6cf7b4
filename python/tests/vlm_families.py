"""Tiny LLaVA and InternVL models built from configs, and samples laid out as their processors lay them out.

Shared by ``test_hf_image_tokens.py`` (nothing is downloaded; random float64
weights). Their processors expand each image into placeholder tokens in
``input_ids`` and give no ``image_grid_thw``:

- LLaVA (a CLIP or SigLIP tower): ``pixel_values`` ``(n_images, 3, 8, 8)``,
  each image ``(8 / 2) ** 2 = 16`` placeholder tokens (the ``"default"``
  feature strategy drops CLIP's class token; SigLIP has none);
- InternVL: ``pixel_values`` ``(n_tiles, 3, 8, 8)``, each tile ``16`` patches
  pixel-shuffled by ``downsample_ratio`` 0.5 into 4 tokens, an image of ``k``
  tiles ``<img>`` + ``4 k`` placeholders + ``</img>``.
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import torch

VOCAB = 64
IMAGE = 60  # the image placeholder id of both families
IMG_START, IMG_END = 61, 62  # InternVL's <img> and </img>
TEXT_VOCAB = 59  # text tokens are 1 .. TEXT_VOCAB - 1
SIDE, PATCH = 8, 2
LLAVA_TOKENS = (SIDE // PATCH) ** 2  # per image
INTERNVL_TILE_TOKENS = (SIDE // PATCH) ** 2 // 4  # per tile
FAMILIES = ("llava", "internvl")

_TEXT = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2)
_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
               image_size=SIDE, patch_size=PATCH)


def build(family: str, *, tower: str = "clip", vision_use_head: bool = False, seed: int = 0) -> torch.nn.Module:
    """A random float64 model of ``family`` (one of :data:`FAMILIES`); LLaVA's ``tower`` ``"clip"`` or ``"siglip"``."""
    import transformers as tr

    if family == "llava":
        if tower == "clip":
            vision: Dict[str, Any] = dict(_VISION, model_type="clip_vision_model", projection_dim=16)
        else:
            vision = dict(_VISION, model_type="siglip_vision_model", vision_use_head=vision_use_head)
        config: Any = tr.LlavaConfig(vision_config=vision, text_config=dict(_TEXT, model_type="llama"),
                                     image_token_index=IMAGE, image_seq_length=LLAVA_TOKENS)
        cls: Any = tr.LlavaForConditionalGeneration
    elif family == "internvl":
        config = tr.InternVLConfig(vision_config=dict(_VISION), text_config=dict(_TEXT, model_type="qwen2"),
                                   image_token_id=IMAGE, image_seq_length=INTERNVL_TILE_TOKENS, downsample_ratio=0.5)
        cls = tr.InternVLForConditionalGeneration
    else:
        raise ValueError(f"unknown family {family!r}: use one of {FAMILIES}")
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = cls(config).double()
    model.train()
    return model


def make_dataset(family: str, n: int, *, seed: int = 3) -> List[Dict[str, Any]]:
    """``n`` samples, 3 to 24 text tokens in two parts around the images; samples ``i % 3 == 0`` have none,
    the others 1 or 2 images (InternVL: 1 to 3 tiles each, a tile's tokens contiguous within its image)."""
    rng = np.random.default_rng(seed)
    data = []
    for i in range(n):
        words = rng.integers(3, TEXT_VOCAB, int(rng.integers(3, 25))).tolist()
        cut = int(rng.integers(0, len(words) + 1))
        count = 0 if i % 3 == 0 else int(rng.integers(1, 3))
        ids: List[int] = list(words[:cut])
        tiles = 0
        for _ in range(count):
            if family == "llava":
                ids += [IMAGE] * LLAVA_TOKENS
                tiles += 1
            else:
                k = int(rng.integers(1, 4))
                ids += [IMG_START] + [IMAGE] * (INTERNVL_TILE_TOKENS * k) + [IMG_END]
                tiles += k
            ids += [int(rng.integers(3, TEXT_VOCAB))]  # text between images
        ids += words[cut:]
        x = torch.tensor(ids, dtype=torch.long)
        labels = x.clone()
        labels[x == IMAGE] = -100
        sample: Dict[str, Any] = {"input_ids": x, "labels": labels}
        if count:
            sample["pixel_values"] = torch.as_tensor(rng.standard_normal((tiles, 3, SIDE, SIDE)))
        data.append(sample)
    return data


def image_tokens(family: str, sample: Dict[str, Any]) -> List[int]:
    """The sample's images as token counts, from how :func:`make_dataset` built it (not from its ids)."""
    ids = sample["input_ids"].tolist()
    if family == "llava":
        return [LLAVA_TOKENS] * (sum(1 for t in ids if t == IMAGE) // LLAVA_TOKENS)
    # InternVL: the placeholders between each <img> and </img>.
    out, inside = [], None
    for t in ids:
        if t == IMG_START:
            inside = 0
        elif t == IMG_END:
            out.append(inside)
            inside = None
        elif t == IMAGE and inside is not None:
            inside += 1
    return out
