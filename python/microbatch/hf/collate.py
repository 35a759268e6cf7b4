"""A packed-sequence collator bound to a Hugging Face model: ``model(**collator(samples))`` keeps the documents apart.

See :mod:`microbatch.hf` for the training loop. Everything model-specific is
read from the model (or its config) at construction: whether it uses
multimodal RoPE (a ``get_rope_index`` method, as in the Qwen2-VL family),
its image and video token ids, its vision tower's patch and merge sizes, the
per-token keys its ``forward`` and its mask factory
(``create_masks_for_generate``) take, the image layout its
``get_image_features`` accepts. A packing probe then runs the model on tiny
packed documents shaped like the batches training sends (the per-token keys
the model takes, images, documents longer than a small sliding window) and
raises :class:`PackingError` when the packed logits differ from each document
run alone, so a model whose attention ignores packing is refused instead of
leaking attention between documents.
"""

from __future__ import annotations

import copy
import inspect
import math
import operator
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch

from ..errors import DtypeError, InputError, SettingError
from .._torch_common import IGNORE_INDEX, as_tensor, packed_layout, unwrap
from .._torch_common import tokens as _tokens  # `tokens` is a local name below

__all__ = ["PackedCollator", "PackingError", "LayerMasks", "TOKEN_KEYS", "ITEM_KEYS"]

#: Sample keys that hold one value per token: packed like ``input_ids`` into ``(1, T)``.
TOKEN_KEYS: Tuple[str, ...] = ("token_type_ids", "mm_token_type_ids")

#: Sample keys that hold one row per image or video (or per frame, per patch):
#: concatenated along dim 0 in sample order, the order of the placeholders in
#: ``input_ids``. A sample without the key contributes nothing. Where the
#: samples' shapes differ beyond dim 0 (images of different sizes, samples
#: with different numbers of images or patches in a second dimension), each
#: is zero-padded at the end of those dimensions to the largest first, as the
#: families' processors pad a batch: where the packing probe found that exact
#: on the model, or, not probed, where the batch carries ``image_sizes`` or
#: ``pixel_attention_mask`` (what such models read the padding from).
ITEM_KEYS: Tuple[str, ...] = (
    "pixel_values",
    "image_grid_thw",
    "pixel_values_videos",
    "video_grid_thw",
    "second_per_grid_ts",
    "image_sizes",
    "pixel_attention_mask",
    "spatial_shapes",
    "image_position_ids",
)

_CORE = ("input_ids", "labels", "attention_mask", "position_ids")


class PackingError(SettingError):
    """The model cannot be fed packed documents safely: its attention would mix them.

    Raised by :class:`PackedCollator` when its packing probe finds that a
    document packed after another gives other logits than the document alone,
    or when the probe batch cannot run on the model at all. The message names
    the model, its attention implementation, the per-token keys involved and
    the measured differences, and says what to change. :attr:`measured`
    holds ``(packed, leak)``: the largest relative difference of the packed
    documents from the same documents run alone, and that of a document run
    after another under one causal mask (what a leak looks like on this
    model); ``None`` when the probe could not run.

    >>> from microbatch.hf import PackingError
    >>> import microbatch
    >>> e = PackingError("attention leaks", measured=(0.8, 0.9))
    >>> isinstance(e, microbatch.SettingError), e.kind, e.measured
    (True, 'Packing', (0.8, 0.9))
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str = "Packing",
        item: Any = None,
        measured: Optional[Tuple[float, float]] = None,
    ) -> None:
        super().__init__(message, kind=kind, item=item)
        self.measured = measured

    def __reduce__(self):
        return (_rebuild_packing, (str(self), self.kind, self.item, self.measured))


def _rebuild_packing(message: str, kind: str, item: Any, measured: Any) -> "PackingError":
    return PackingError(message, kind=kind, item=item, measured=measured)


class LayerMasks(dict):
    """The attention masks of a packed batch, one per kind of attention layer (``"full_attention"``, ``"sliding_attention"``, ...).

    :class:`PackedCollator` puts one in ``batch["attention_mask"]`` for a
    model that reads a per-token key (such as Gemma 3's ``token_type_ids``)
    into masks that transformers would build wrongly for packed documents: a
    dict of ``(1, 1, T, T)`` masks in the layout of the model's attention
    implementation (bool for ``"sdpa"``, additive float for ``"eager"``),
    which the model uses as given. Move it with the rest of the batch:
    :meth:`to` moves every mask.

    >>> import torch
    >>> from microbatch.hf import LayerMasks
    >>> masks = LayerMasks(full_attention=torch.ones(1, 1, 2, 2, dtype=torch.bool))
    >>> moved = masks.to("cpu")
    >>> type(moved).__name__, sorted(moved), moved["full_attention"].shape
    ('LayerMasks', ['full_attention'], torch.Size([1, 1, 2, 2]))
    """

    def to(self, *args: Any, **kwargs: Any) -> "LayerMasks":
        """A copy with every mask moved by ``Tensor.to(*args, **kwargs)`` (a device, usually)."""
        return LayerMasks({k: v.to(*args, **kwargs) for k, v in self.items()})


# --- reading the model ------------------------------------------------------


def _is_config(x: Any) -> bool:
    return not isinstance(x, torch.nn.Module) and hasattr(x, "to_dict") and hasattr(x, "model_type")


def _first(obj: Any, names: Iterable[str]) -> Any:
    for n in names:
        v = getattr(obj, n, None)
        if v is not None:
            return v
    return None


def _as_int(v: Any) -> Optional[int]:
    if isinstance(v, (list, tuple)):
        v = v[0] if v else None
    return None if v is None else int(v)


def _size2(v: Any) -> Optional[Tuple[int, int]]:
    """An image size read from a config (an int, or ``[h, w]``) as ``(h, w)``."""
    if isinstance(v, Mapping):
        v = (v.get("height"), v.get("width"))
    if isinstance(v, (list, tuple)):
        if len(v) != 2 or v[0] is None or v[1] is None:
            return None
        return int(v[0]), int(v[1])
    return None if v is None else (int(v), int(v))


def _params(fn: Any) -> Tuple[Tuple[str, ...], bool, Tuple[str, ...]]:
    """``fn``'s keyword-passable parameters, whether it takes ``**kwargs``, and those without a default."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return (), True, ()
    names, required = [], []
    var_kw = False
    for n, p in sig.parameters.items():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n != "self":
            names.append(n)
            if p.default is inspect.Parameter.empty:
                required.append(n)
    return tuple(names), var_kw, tuple(required)


def _rope_shell(cls: Any, config: Any) -> Any:
    """An instance of ``cls`` without weights, holding only ``config``: enough for ``get_rope_index``.

    ``get_rope_index`` of the Qwen2-VL family reads ``self.config`` and calls
    other methods only; the shell keeps the collator small when it is pickled
    to DataLoader workers.
    """
    shell = cls.__new__(cls)
    torch.nn.Module.__init__(shell)
    object.__setattr__(shell, "config", config)
    return shell


_ROPE_ARGS = ("input_ids", "mm_token_type_ids", "image_grid_thw", "video_grid_thw", "second_per_grid_ts", "attention_mask")

#: Attention implementations whose masks the collator can build: a bool mask for sdpa, an additive one for eager.
_MASK_IMPLEMENTATIONS = ("sdpa", "eager")


def _mask_factory(model: Any, config: Any, keys: Sequence[str]) -> Optional[Tuple[Any, Tuple[str, ...]]]:
    """The class whose ``create_masks_for_generate`` builds the model's attention masks from one of ``keys``
    (Gemma 3's ``token_type_ids``, ...), and those keys; ``None`` when no class of the model's does.

    Looked up in the model's modules, then in the transformers module that
    defines the model's (or, for a config, its mapped model's) class: the
    method is a static one on the family's generation class.
    """
    classes: List[Any] = []
    if model is not None:
        classes += [type(m) for m in model.modules()]
        roots = [type(model)]
    else:
        roots = []
        try:
            from transformers.models.auto import modeling_auto as auto

            for name in ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING", "MODEL_FOR_CAUSAL_LM_MAPPING", "MODEL_MAPPING"):
                try:
                    found = getattr(auto, name)[type(config)]
                except Exception:  # noqa: BLE001 - not in this mapping
                    continue
                roots += list(found) if isinstance(found, (tuple, list)) else [found]
        except Exception:  # noqa: BLE001 - no auto mappings: nothing to look up
            pass
    for root in roots:
        mod = sys.modules.get(getattr(root, "__module__", ""), None)
        if mod is not None:
            classes += [v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, torch.nn.Module)]
    for cls in dict.fromkeys(classes):
        if "create_masks_for_generate" not in vars(cls):
            continue
        names, _, _ = _params(getattr(cls, "create_masks_for_generate"))
        taken = tuple(k for k in keys if k in names)
        if taken:
            return cls, taken
    return None


def _visual(key: str) -> bool:
    """Whether a per-image key carries an image or video itself (``pixel_values``, ``pixel_values_videos``, ...)."""
    return "pixel" in key or key in ("images", "image_patches", "videos")


def _feature_rows(out: Any) -> int:
    """The number of feature vectors (language-model tokens) ``get_image_features`` returned."""
    f = out if isinstance(out, (torch.Tensor, list, tuple)) else getattr(out, "pooler_output", None)
    if f is None and hasattr(out, "last_hidden_state"):
        f = out.last_hidden_state
    parts = [f] if isinstance(f, torch.Tensor) else list(f) if isinstance(f, (list, tuple)) else []
    rows = 0
    for p in parts:
        if not isinstance(p, torch.Tensor) or p.dim() < 2:
            return 0
        rows += p.numel() // p.shape[-1]
    return rows


def _pad_to(t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """``t`` zero-padded at the end of every dimension but the first to ``shape[1:]``."""
    if tuple(t.shape[1:]) == tuple(shape[1:]):
        return t
    out = t.new_zeros((t.shape[0], *shape[1:]))
    out[tuple(slice(0, n) for n in t.shape)] = t
    return out


#: Per-token keys the collator derives from a document's placeholders when a sample lacks them.
_DERIVED = ("mm_token_type_ids",)


class PackedCollator:
    """Packs a micro-batch into one row that ``model(**batch)`` runs as separate documents.

    A ``collate_fn`` for a ``DataLoader`` over Hugging Face samples, bound to
    the model (or its config) it feeds. Each call concatenates the samples
    into one row ``(1, T)``, with what the model needs to keep the documents
    apart and to position each one as if it were alone:

    - ``input_ids`` ``(1, T)`` int64; ``labels`` ``(1, T)`` int64, each
      document's labels (its ``input_ids`` when absent) with its first
      position set to ``label_pad``, so no document is predicted from the one
      before it;
    - ``position_ids``: ``(1, T)`` int64 restarting at every document (at the
      first position the model gives a sequence itself: 0, or 1 for a model
      such as PaliGemma, found by the probe), or, for a model with multimodal
      RoPE (a ``get_rope_index`` method: the Qwen2-VL family),
      ``(1 + k, 1, T)``: row 0 the text positions (restarting per document:
      transformers builds the packed mask from it), rows ``1..k`` the
      model's own ``get_rope_index`` of each document alone, concatenated;
    - ``use_cache=False``: transformers detects packing from ``position_ids``
      only when no cache is created, and ``config.use_cache`` is ``True`` by
      default (with it, the documents attend to each other);
    - ``cu_seq_lens_q``, ``cu_seq_lens_k`` (int32, the documents' cumulative
      lengths) and ``max_length_q``, ``max_length_k`` (ints): the varlen keys
      flash-attention reads (``varlen_kwargs``: by default for models without
      a vision tower; a vision tower receives the same keyword arguments and
      would take them for its own);
    - per-token keys (:data:`TOKEN_KEYS` and ``token_keys``) packed to ``(1, T)``;
    - per-image keys (:data:`ITEM_KEYS` and ``item_keys``: ``pixel_values``,
      ``image_grid_thw``, ``image_sizes``, ...) concatenated along dim 0 in
      sample order; where the samples' shapes differ beyond dim 0 (images of
      different sizes, as Pixtral/Mistral3 take them with their real
      ``image_sizes``; a per-sample image dimension ``(1, n_images, C, H,
      W)`` with different image counts, as Idefics3/SmolVLM take them), each
      is zero-padded at the end of those dimensions to the largest, as the
      family's processor pads a batch (the model crops each image to its
      ``image_sizes``, counts an image's patches from them, or drops all-zero
      images). Bound to a model, the probe packs images of two shapes where
      the model takes them and pads only where that is exact; where it
      cannot check it (a vision tower of one image size) or finds it inexact,
      or, not probed, where the batch carries neither ``image_sizes`` nor
      ``pixel_attention_mask``, samples of different shapes raise
      :class:`microbatch.DtypeError` saying what shape to give;
    - ``attention_mask`` only for a model that reads a per-token key into its
      attention mask (its ``create_masks_for_generate`` takes the key: Gemma 3
      and PaliGemma with ``token_type_ids``, for example) where the probe
      finds that transformers builds that mask wrongly for packed documents
      (Gemma 3's sliding-window layers look its image blocks up by each
      document's own positions, not by its place in the row): the masks of
      each document alone, from the model's own ``create_masks_for_generate``,
      placed on the diagonal of the row, one per kind of attention layer
      (a :class:`LayerMasks`), in the layout of the attention implementation
      (``"sdpa"`` or ``"eager"``). Move it with the batch (``.to(device)``).
      A dense ``(T, T)`` mask per layer kind, as transformers itself builds
      for packed rows with these implementations.

    A sample without tokens is left out (as ``DataCollatorWithFlattening``
    does). A sample's ``attention_mask`` must be all ones (packed documents
    carry no padding) and is dropped: transformers ignores ``position_ids``
    for packing when a mask is given. Any other key raises
    :class:`microbatch.InputError` naming it (list it in ``token_keys``,
    ``item_keys`` or ``drop_keys``), so nothing reaches the model misaligned.

    **Empty and image-less micro-batches.** An empty micro-batch becomes one
    padding document whose labels are all ``label_pad``: it runs, its summed
    loss is exactly 0, and every parameter gets a (zero) gradient, so DDP's
    all-reduce stays in step. For a vision-language model, a micro-batch
    without any image (or video) also gets a padding document with one small
    image, so the vision tower runs on every rank (DDP raises "Expected to
    have finished reduction" otherwise). The padding image is settled when
    the collator is made, never at the first image-less micro-batch: built
    from the config for models that take ``image_grid_thw`` (the Qwen2-VL
    family); for other layouts (LLaVA, Gemma 3, PaliGemma, InternVL,
    Idefics3, Mistral3, ...), when bound to a model, one image of
    ``vision_config.image_size`` in the layout the model's
    ``get_image_features`` accepts (``(1, C, H, W)`` or ``(1, 1, C, H, W)``,
    with ``image_sizes`` and ``pixel_attention_mask`` where it takes them;
    the smallest size that runs where it takes ``image_sizes``), its
    placeholder count read from the features, kept once the whole model has
    run a padding document with it. Where none can be found, or when bound to
    a config, the constructor raises :class:`microbatch.SettingError`: pass
    ``padding_sample=`` (one sample with one small image, made with the
    model's processor), or ``pad_images=False`` when no padding image is
    wanted (one process, or ``find_unused_parameters=True``).

    **The packing probe.** Bound to a model (not a config) with
    ``check_packing=True``, the constructor runs the model in eval mode
    without gradients on tiny documents packed as training batches are: with
    the per-token keys of :data:`TOKEN_KEYS` and ``token_keys`` that the
    model's ``forward`` takes (values 1 at image placeholders, 0 elsewhere,
    as Gemma 3's and the Qwen2-VL family's processors give them; a
    ``padding_sample``'s own values where it has them), with images where the
    collator has one (the padding image, at different offsets in each
    document, and a second document with two images or a smaller one), and
    longer than a small sliding window so every kind of attention layer the
    config has (``layer_types``: sliding and full) masks something. It
    compares each document's logits with the document run alone through the
    model's own ``forward`` (its own positions and masks). It decides:

    - the first position (0, or 1 where the model numbers from 1);
    - whether the collator builds the masks itself (only where the model's
      own masks are wrong for packed documents and its
      ``create_masks_for_generate`` takes the key);
    - which per-token keys every sample must carry: those without which a
      document packed differs from itself alone (PaliGemma's
      ``token_type_ids``: without them a document attends both ways over its
      whole length alone, causally when packed); a sample without one raises
      :class:`microbatch.InputError`;
    - whether padding images to a common shape is exact.

    A difference above the dtype's rounding that none of these removes raises
    :class:`PackingError`, naming the real cause (the per-token keys, the
    attention implementation) and the change that fixes it; so does a batch
    the model cannot run. Run it again with :meth:`check` after changing the
    attention implementation. The probe costs about a dozen forward passes of
    tens of tokens plus the images; under FSDP every rank must construct the
    collator (the forwards are collectives there). A leak that appears only
    with lengths, images or inputs other than the probe's is not caught.

    Bound to a config, nothing is probed: positions start at 0, and the
    collator builds the masks itself wherever the model class's
    ``create_masks_for_generate`` takes a per-token key of the batch.

    The collator holds the config and, for multimodal RoPE, a weightless
    instance of the class that owns ``get_rope_index`` (the module itself
    only if its ``get_rope_index`` needs more than the config), and the
    padding image, so it pickles small to ``DataLoader`` workers.

    Args:
        model_or_config: the model (a ``PreTrainedModel``, possibly wrapped in
            DDP, FSDP or ``torch.compile``) or its ``PretrainedConfig``.
        label_pad: the label of each document's first position and of the
            padding documents (``-100``: what cross-entropy ignores).
        check_packing: run the packing probe (only with a model).
        varlen_kwargs: emit the flash-attention varlen keys; ``None``: for
            models without a vision tower.
        pad_images: give image-less micro-batches of a vision model a padding
            image; ``None``: for models with a vision tower.
        padding_sample: the padding document (a sample dict, labels ignored);
            ``None``: built from the config or found from the model (for a
            vision model, with one image). For a vision model it must carry
            an image; bound to a model, the probe runs it.
        token_keys, item_keys: more keys packed per token or concatenated per image.
        drop_keys: sample keys to leave out of the batch (``position_ids``
            too: the collator computes its own; an ``attention_mask`` is
            always checked for padding). The probe does not send the
            per-token keys listed here.

    Raises:
        PackingError: the probe found that the model mixes packed documents,
            or the model needs inputs the collator cannot build.
        SettingError: settings that do not fit the model; a vision model
            without a padding image (see above).

    Each call raises :class:`microbatch.InputError` (or its subclass
    :class:`microbatch.DtypeError`) naming the sample and key for a sample it
    cannot pack: a key it does not know, a per-token key of another length
    than ``input_ids``, a per-token key the model needs missing, padding in
    ``attention_mask``, image placeholders that do not match
    ``image_grid_thw`` or ``pixel_values``, image tensors whose shapes cannot
    be padded to one another.

    Example (a tiny Llama, random weights, nothing downloaded):

    >>> import torch, transformers
    >>> from microbatch.hf import PackedCollator
    >>> config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    >>> model = transformers.LlamaForCausalLM(config)
    >>> collator = PackedCollator(model)       # probes the model: it keeps documents apart
    >>> batch = collator([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9], "labels": [8, 9]}])
    >>> batch["input_ids"].tolist(), batch["labels"].tolist(), batch["position_ids"].tolist()
    ([[5, 6, 7, 8, 9]], [[-100, 6, 7, -100, 9]], [[0, 1, 2, 0, 1]])
    >>> batch["cu_seq_lens_q"].tolist(), batch["max_length_q"], batch["use_cache"]
    ([0, 3, 5], 3, False)
    >>> logits = model(**batch).logits
    >>> alone = model(torch.tensor([[8, 9]])).logits
    >>> torch.allclose(logits[:, 3:], alone, atol=1e-5)
    True
    >>> collator([])["labels"].tolist()        # an empty micro-batch: one padding document
    [[-100]]

    A vision-language model of another layout than Qwen2-VL's (a tiny LLaVA):
    the padding image is found when the collator is made.

    >>> vision = dict(model_type="clip_vision_model", hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, image_size=8, patch_size=4)
    >>> llava = transformers.LlavaForConditionalGeneration(transformers.LlavaConfig(
    ...     vision_config=vision, text_config=dict(config.to_dict(), model_type="llama"),
    ...     image_token_index=31, vision_feature_layer=-1))
    >>> c = PackedCollator(llava)
    >>> pad = c([{"input_ids": [5, 6]}])       # an image-less micro-batch: a padding image
    >>> pad["pixel_values"].shape, int((pad["input_ids"] == 31).sum())
    (torch.Size([1, 3, 8, 8]), 4)
    """

    def __init__(
        self,
        model_or_config: Any,
        *,
        label_pad: int = IGNORE_INDEX,
        check_packing: bool = True,
        varlen_kwargs: Optional[bool] = None,
        pad_images: Optional[bool] = None,
        padding_sample: Optional[Mapping[str, Any]] = None,
        token_keys: Sequence[str] = (),
        item_keys: Sequence[str] = (),
        drop_keys: Sequence[str] = (),
    ) -> None:
        if _is_config(model_or_config):
            model, config = None, model_or_config
        else:
            model = unwrap(model_or_config)
            config = getattr(model, "config", None)
            if config is None or not _is_config(config):
                raise SettingError(
                    f"PackedCollator needs a transformers model or its config, got {type(model_or_config).__name__}: "
                    "for other models use microbatch.torch.collate_packed",
                    item="model_or_config",
                )
        self.config = config
        try:
            self.label_pad = operator.index(label_pad)
        except TypeError:
            raise DtypeError(f"label_pad must be an integer, got {type(label_pad).__name__}", item="label_pad") from None
        self._user_token_keys: Tuple[str, ...] = tuple(token_keys)
        self.token_keys: Tuple[str, ...] = tuple(dict.fromkeys(TOKEN_KEYS + tuple(token_keys)))
        self.item_keys: Tuple[str, ...] = tuple(dict.fromkeys(ITEM_KEYS + tuple(item_keys)))
        self.drop_keys: Tuple[str, ...] = tuple(drop_keys)
        for k in self.token_keys + self.item_keys:
            if k in _CORE:
                raise SettingError(f"{k!r} cannot be a token or item key: the collator builds it", item=k)
        both = set(self.token_keys) & set(self.item_keys)
        if both:
            k = sorted(both)[0]
            raise SettingError(f"{k!r} is listed both as a per-token and as a per-image key", item=k)

        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        vision = getattr(config, "vision_config", None)
        self.vision: bool = vision is not None
        self.image_token_id = _as_int(_first(config, ("image_token_id", "image_token_index")))
        self.video_token_id = _as_int(_first(config, ("video_token_id", "video_token_index")))
        self._vision_start = _as_int(getattr(config, "vision_start_token_id", None))
        self._vision_end = _as_int(getattr(config, "vision_end_token_id", None))
        self._merge = _as_int(getattr(vision, "spatial_merge_size", None)) if vision is not None else None
        self._grid = self.vision and self._merge is not None and self.image_token_id is not None
        self._window = _as_int(getattr(text, "sliding_window", None))

        # Multimodal RoPE: the get_rope_index of the module that owns it (or of the config's model class).
        self._rope: Optional[Callable[..., Any]] = None
        self._rope_params: Tuple[str, ...] = ()
        # The deepest module that owns it (an outer one may only delegate to it), as a weightless shell
        # when the shell computes it (it reads only the config), else the module itself.
        owners = [m for m in model.modules() if callable(getattr(m, "get_rope_index", None))] if model is not None else []
        if model is None:
            cls = _model_class(config)
            if cls is not None:
                self._rope = _rope_shell(cls, config).get_rope_index
        elif owners:
            for m in reversed(owners):
                rope = _rope_shell(type(m), getattr(m, "config", config)).get_rope_index
                if _rope_works(rope):
                    self._rope = rope
                    break
            else:
                self._rope = owners[-1].get_rope_index
        if self._rope is not None:
            owner_cls = type(getattr(self._rope, "__self__", None))
            params = inspect.signature(self._rope).parameters
            missing = [
                n for n, p in params.items()
                if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                and n not in _ROPE_ARGS
            ]
            if missing:
                raise PackingError(
                    f"{owner_cls.__name__}.get_rope_index needs {missing}, which PackedCollator cannot build: "
                    "compute position_ids per sample yourself and pack with microbatch.torch.collate_packed",
                    item="model_or_config",
                )
            self._rope_params = tuple(n for n in params if n in _ROPE_ARGS)
        self.mrope: bool = self._rope is not None

        self.varlen_kwargs: bool = (not self.vision) if varlen_kwargs is None else bool(varlen_kwargs)
        self.pad_images: bool = self.vision if pad_images is None else bool(pad_images)
        self._pad_token = _as_int(_first(text, ("pad_token_id", "eos_token_id", "bos_token_id")))
        vocab = _as_int(getattr(text, "vocab_size", None))
        if self._pad_token is None or (vocab is not None and not 0 <= self._pad_token < vocab):
            self._pad_token = 0
        self._vocab = vocab

        # What the probe decides (the defaults hold for a collator bound to a config).
        self._position_base = 0
        self._required: Tuple[str, ...] = ()
        # Images of different shapes zero-padded to a common one: None (not probed) where the batch carries
        # image_sizes or pixel_attention_mask, True where the probe found it exact, False where it did not.
        self._pad_items: Optional[bool] = None
        self._pad_reason: Optional[str] = None
        # Per-token keys the model reads into its attention masks, and the class whose
        # create_masks_for_generate builds them: the collator builds the packed masks from it where the model's
        # own are wrong (bound to a config: always, as nothing is probed).
        found = _mask_factory(model, config, [k for k in self.token_keys if k not in self.drop_keys])
        self._mask_cls: Any = found[0] if found is not None else None
        self._mask_keys: Tuple[str, ...] = found[1] if found is not None else ()
        self._mask_config: Any = None
        if found is not None:
            try:  # rendered as eager masks (always materialized, 0 where attended), read back as bool
                self._mask_config = copy.deepcopy(config)
                self._mask_config._attn_implementation = "eager"
            except Exception:  # noqa: BLE001 - a config that cannot be copied: the model's own masks only
                self._mask_cls, self._mask_keys, self._mask_config = None, (), None
        self._mask_mode: bool = self._mask_cls is not None
        self._mask_dtype: torch.dtype = _config_dtype(config)
        if model is not None:
            self._mask_dtype = _device_dtype(model)[1]

        # The padding document (with an image for a vision model) and the images the probe packs.
        self._padding: Optional[Dict[str, Any]] = None
        self._units: List[Dict[str, Any]] = []
        if padding_sample is not None:
            if not isinstance(padding_sample, Mapping) or "input_ids" not in padding_sample:
                raise SettingError("padding_sample must be a sample dict with 'input_ids'", item="padding_sample")
            p = dict(padding_sample)
            p["labels"] = [self.label_pad] * len(_tokens(p["input_ids"], "padding_sample's input_ids", "padding_sample"))
            self._check_sample(p, "padding_sample")
            if self.vision and self.pad_images and not any(_visual(k) for k in p if k in self.item_keys):
                raise SettingError(
                    f"padding_sample has no image (no per-image key such as 'pixel_values'): "
                    f"{type(config).__name__} is a vision model, and image-less micro-batches are padded with an "
                    "image so the vision tower gets a gradient on every rank; give the padding sample one small "
                    "image, or pass pad_images=False",
                    item="padding_sample",
                )
            self._padding = p
            doc = self._document(p, "padding_sample")
            if doc is None:
                raise SettingError("padding_sample has no tokens", item="padding_sample")
            if doc["has_vision"]:
                self._units = [{"ids": doc["input_ids"].tolist(), "items": doc["items"], "types": doc["tokens"], "layout": "whole"}]
        if self._grid:
            m = int(self._merge)  # type: ignore[arg-type]
            try:
                self._units = [self._grid_unit(m, m, 10), self._grid_unit(m, 2 * m, 20)]
            except SettingError:
                if self.pad_images and self._padding is None:
                    raise
        discovery: Optional[str] = None
        if model is not None and self.vision and not self._grid and not self._units:
            discovery = self._discover_image(model_or_config)
        if self.vision and self.pad_images and self._padding is None and not self._grid:
            how = (
                "bound to a config, it cannot run the vision tower to size one: make it from the model"
                if model is None
                else f"{discovery}"
            )
            raise SettingError(
                f"PackedCollator cannot build a padding image for {type(config).__name__} ({how}). Image-less "
                "micro-batches of a vision model get a padding document with one image so the vision tower gets a "
                "gradient on every rank (DDP raises 'Expected to have finished reduction' otherwise): pass "
                "padding_sample= (one sample with one small image, made with the model's processor), or "
                "pad_images=False if no rank needs it (one process, or DDP with find_unused_parameters=True)",
                item="padding_sample",
            )
        if model is not None and check_packing:
            self.check(model_or_config)

    # --- the padding document ----------------------------------------------

    def _image(self, grid_h: int, grid_w: int, seed: int = 0) -> Dict[str, Any]:
        """One image of ``grid_h`` x ``grid_w`` patches in the Qwen2-VL layout: pixel rows, its grid, its placeholder count."""
        vision = self.config.vision_config
        patch = _as_int(getattr(vision, "patch_size", None))
        temporal = _as_int(getattr(vision, "temporal_patch_size", None)) or 1
        channels = _as_int(_first(vision, ("in_channels", "in_chans", "num_channels"))) or 3
        if patch is None or self._merge is None:
            raise SettingError(
                f"cannot build a padding image for {type(self.config).__name__}: its vision_config has no "
                "patch_size/spatial_merge_size; pass padding_sample= (one sample with one small image)",
                item="padding_sample",
            )
        patches = grid_h * grid_w
        width = channels * temporal * patch * patch
        g = torch.Generator().manual_seed(1234 + seed)
        # float32, as processors give pixel values; the model casts them to its vision tower's dtype.
        pixels = torch.rand(patches, width, generator=g, dtype=torch.float32) * 2 - 1
        return {
            "pixel_values": pixels,
            "image_grid_thw": torch.tensor([[1, grid_h, grid_w]], dtype=torch.int64),
            "tokens": patches // (self._merge * self._merge),
        }

    def _grid_unit(self, grid_h: int, grid_w: int, seed: int) -> Dict[str, Any]:
        """One image in the Qwen2-VL layout as the probe places it: its tokens (vision start, placeholders, end) and rows."""
        im = self._image(grid_h, grid_w, seed)
        ids = [self._vision_start] if self._vision_start is not None else []
        ids += [int(self.image_token_id)] * im["tokens"]  # type: ignore[arg-type]
        if self._vision_end is not None:
            ids.append(self._vision_end)
        return {"ids": ids, "items": {"pixel_values": im["pixel_values"], "image_grid_thw": im["image_grid_thw"]},
                "types": {}, "layout": "rows"}

    def _image_document(self, text: Sequence[int], images: Sequence[Tuple[int, int]], after: Sequence[int] = (), seed: int = 0) -> Dict[str, Any]:
        """A sample: ``text``, then each image (vision-start, placeholders, vision-end), then ``after``."""
        ids: List[int] = list(text)
        pixels, grids = [], []
        for k, (h, w) in enumerate(images):
            unit = self._grid_unit(h, w, seed + k)
            ids.extend(unit["ids"])
            pixels.append(unit["items"]["pixel_values"])
            grids.append(unit["items"]["image_grid_thw"])
        ids.extend(after)
        s: Dict[str, Any] = {"input_ids": torch.tensor(ids, dtype=torch.int64)}
        if images:
            s["pixel_values"] = torch.cat(pixels)
            s["image_grid_thw"] = torch.cat(grids)
        return s

    def _discover_image(self, model_or_wrapper: Any) -> str:
        """Finds a padding image for a vision model of another layout than Qwen2-VL's; returns why it failed, or ''.

        Runs ``get_image_features`` on one image of ``vision_config.image_size``
        as ``(1, C, H, W)``, then ``(1, 1, C, H, W)``, with the
        ``image_sizes`` / ``pixel_attention_mask`` it takes (first all it
        takes, then only those it requires); the placeholder count is the
        number of feature rows. Where the model takes ``image_sizes`` (it
        crops each image to its size), the smallest image of whole merged
        patches that runs is used instead. The padding document found must run
        through the whole model. Sets the padding sample and the probe's images.
        """
        target = model_or_wrapper if hasattr(model_or_wrapper, "_fsdp_wrapped_module") else unwrap(model_or_wrapper)
        model = unwrap(model_or_wrapper)
        vision = self.config.vision_config
        hw = _size2(getattr(vision, "image_size", None))
        features = getattr(model, "get_image_features", None)
        if self.image_token_id is None:
            return "its config has no image_token_id / image_token_index"
        if hw is None:
            return "its vision_config has no image_size"
        if not callable(features):
            return f"{type(model).__name__} has no get_image_features"
        names, _, required = _params(features)
        image = int(self.image_token_id)
        device, dtype = _device_dtype(model)
        channels = _as_int(_first(vision, ("num_channels", "in_channels", "in_chans"))) or 3
        h, w = hw
        g = torch.Generator().manual_seed(4321)
        pixels = torch.rand(1, channels, h, w, generator=g, dtype=torch.float32) * 2 - 1
        errors: List[str] = []

        def rows(items: Dict[str, torch.Tensor]) -> int:
            kw = {k: v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device) for k, v in items.items()}
            try:
                return _feature_rows(features(**kw))
            except Exception as e:  # noqa: BLE001 - a layout this model does not take: try the next
                errors.append(f"{tuple(items['pixel_values'].shape)}: {type(e).__name__}: {str(e)[:120]}")
                return 0

        def with_extras(px: torch.Tensor, size: Tuple[int, int], keep: Iterable[str]) -> Dict[str, torch.Tensor]:
            items = {"pixel_values": px}
            if "image_sizes" in keep:
                items["image_sizes"] = torch.tensor([list(size)], dtype=torch.int64)
            if "pixel_attention_mask" in keep:
                items["pixel_attention_mask"] = torch.ones((*px.shape[:-3], *size), dtype=torch.bool)
            return items

        extras = [k for k in ("image_sizes", "pixel_attention_mask") if k in names]
        unit: Optional[Dict[str, Any]] = None
        was_training = target.training
        target.eval()
        try:
            with torch.no_grad():
                options = list(dict.fromkeys((tuple(extras), tuple(k for k in extras if k in required))))
                options = [keep for keep in options if all(r in keep or r == "pixel_values" for r in required)]

                def find(layouts: Iterable[torch.Tensor], size: Tuple[int, int], keeps: Sequence[Tuple[str, ...]]) -> Optional[Dict[str, Any]]:
                    for px in layouts:
                        for keep in keeps:
                            items = with_extras(px, size, keep)
                            n = rows(items)
                            if n > 0:
                                # A 5-D tensor is one sample's images along dim 1 (Idefics3), or, with a size a row, one
                                # image's patches (LLaVA-Next): rows along dim 0 then.
                                layout = "rows" if px.dim() == 4 or "image_sizes" in items else "sample"
                                return {"ids": [image] * n, "items": items, "types": {}, "layout": layout}
                    return None

                # (1, C, H, W); else (1, k, C, H, W) with k = 1, 2, ... (an image's patches: LLaVA-Next counts its own
                # from image_sizes and its grid pinpoints)
                stacked = [torch.cat([pixels] * k).unsqueeze(0) for k in range(1, 9)]
                unit = find([pixels] + stacked, hw, options)
                if unit is None:
                    return "get_image_features took no image of vision_config.image_size " + "; ".join(errors[:2])
                units = [unit]
                # Where the model takes each image's real size: another size too, for a cheaper padding image (the
                # smallest of whole merged patches that runs) and for the probe to pack images of two shapes.
                keep = tuple(k for k in unit["items"] if k != "pixel_values")
                if "image_sizes" in keep and unit["layout"] == "rows":
                    other: Optional[Dict[str, Any]] = None
                    if unit["items"]["pixel_values"].dim() == 4:
                        patch = _as_int(getattr(vision, "patch_size", None))
                        merge = _as_int(_first(self.config, ("spatial_merge_size",))) or self._merge or 1
                        step = (patch or 0) * merge
                        for size in ((step, step), (step, 2 * step), (2 * step, 2 * step)) if step else ():
                            if size[0] <= h and size[1] <= w and size != hw:
                                other = find([pixels[..., : size[0], : size[1]].contiguous()], size, [keep])
                                if other is not None:
                                    break
                    else:
                        for size in ((h, 2 * w), (2 * h, w), (2 * h, 2 * w)):
                            other = find(stacked, size, [keep])
                            if other is not None:
                                break
                    if other is not None:
                        units.append(other)
                units.sort(key=lambda u: u["items"]["pixel_values"].numel())
                for u in units:  # the smallest first: the padding document must run through the whole model
                    pad = {"input_ids": torch.tensor([self._pad_token] + u["ids"], dtype=torch.int64), **u["items"]}
                    try:
                        _logits(target, self._collate([pad], False, masks=False), device)
                    except Exception as e:  # noqa: BLE001 - this image does not fit the model: try the next
                        errors.append(f"the padding document with {len(u['ids'])} placeholders: {type(e).__name__}: {str(e)[:120]}")
                        continue
                    self._units = units
                    if self.pad_images:
                        pad["labels"] = torch.full((len(u["ids"]) + 1,), self.label_pad, dtype=torch.int64)
                        self._padding = pad
                    return ""
                return "; ".join(errors[-2:])
        finally:
            target.train(was_training)

    def padding_document(self, *, image: bool) -> Dict[str, Any]:
        """The padding document added to an empty or image-less micro-batch (labels all ``label_pad``).

        ``image=True`` asks for one with an image (a vision model's
        image-less micro-batch); it raises :class:`microbatch.SettingError`
        when the collator has none (made with ``pad_images=False``).

        >>> import transformers
        >>> from microbatch.hf import PackedCollator
        >>> c = PackedCollator(transformers.LlamaConfig(vocab_size=32, pad_token_id=0))
        >>> c.padding_document(image=False)["input_ids"].tolist()
        [0]
        """
        if self._padding is not None:
            d = dict(self._padding)
        elif image:
            if not self._grid:
                raise SettingError(
                    f"a micro-batch without images for {type(self.config).__name__}: this collator has no padding "
                    "image (made with pad_images=False); make it with pad_images=True (from the model, or with "
                    "padding_sample=)",
                    item="padding_sample",
                )
            d = self._image_document([self._pad_token], [(self._merge, self._merge)])  # type: ignore[list-item]
        else:
            d = {"input_ids": torch.tensor([self._pad_token], dtype=torch.int64)}
        d["labels"] = torch.full((len(_tokens(d["input_ids"], "input_ids", "padding")),), self.label_pad, dtype=torch.int64)
        return d

    # --- packing --------------------------------------------------------------

    def _check_sample(self, s: Mapping[str, Any], i: Any) -> None:
        for k in s:
            if k in _CORE or k in self.token_keys or k in self.item_keys or k in self.drop_keys:
                continue
            raise InputError(
                f"sample {i} has the key {k!r} ({type(s[k]).__name__}), which PackedCollator does not know how to "
                f"pack: pass token_keys=({k!r},) (one value per token, packed to (1, T)), item_keys=({k!r},) "
                f"(rows per image, concatenated along dim 0) or drop_keys=({k!r},) (left out of the batch)",
                item=i,
            )
        if s.get("position_ids") is not None and "position_ids" not in self.drop_keys:
            raise InputError(
                f"sample {i} has position_ids: PackedCollator computes them per document (for multimodal RoPE with "
                "the model's get_rope_index); remove them, or pass drop_keys=('position_ids',)",
                item=i,
            )

    def _mm_types(self, ids: torch.Tensor) -> torch.Tensor:
        t = torch.zeros_like(ids)
        if self.image_token_id is not None:
            t[ids == self.image_token_id] = 1
        if self.video_token_id is not None:
            t[ids == self.video_token_id] = 2
        return t

    def _check_images(self, i: Any, ids: torch.Tensor, items: Dict[str, torch.Tensor]) -> None:
        """The checks the model makes on the whole batch, made per sample so the error names it."""
        m2 = int(self._merge) ** 2  # type: ignore[arg-type]
        for kind, token, grid_key, pixel_key in (
            ("image", self.image_token_id, "image_grid_thw", "pixel_values"),
            ("video", self.video_token_id, "video_grid_thw", "pixel_values_videos"),
        ):
            grid = items.get(grid_key)
            pixels = items.get(pixel_key)
            placeholders = int((ids == token).sum()) if token is not None else 0
            if grid is None:
                if pixels is not None:
                    raise InputError(f"sample {i} has {pixel_key} but no {grid_key}", item=i)
                if placeholders:
                    raise InputError(
                        f"sample {i} has {placeholders} {kind} placeholder tokens (id {token}) but no {grid_key}",
                        item=i,
                    )
                continue
            if grid.dim() != 2 or grid.shape[1] != 3 or grid.is_floating_point():
                raise DtypeError(f"sample {i}: {grid_key} must be integers of shape (n, 3), got {tuple(grid.shape)}", item=i)
            per = grid.long().prod(-1)
            if pixels is None or pixels.shape[0] != int(per.sum()):
                raise InputError(
                    f"sample {i}: {grid_key} {grid.tolist()} makes {int(per.sum())} patches but {pixel_key} has "
                    f"{None if pixels is None else pixels.shape[0]} rows",
                    item=i,
                )
            want = (per // m2).tolist()
            if placeholders != sum(want):
                raise InputError(
                    f"sample {i} has {placeholders} {kind} placeholder tokens (id {token}) but its {grid_key} "
                    f"{grid.tolist()} makes {sum(want)} (t*h*w / {m2} each): the model would raise "
                    f"'{kind.capitalize()} features and {kind} tokens do not match' for the whole batch",
                    item=i,
                )
            if kind == "image":
                runs = _runs(torch.eq(ids, int(token)))  # type: ignore[arg-type]
                if runs != want:
                    raise InputError(
                        f"sample {i}: its image placeholder runs have lengths {runs} but its images need {want}: "
                        "each image needs its own run of placeholders (the processor separates them with "
                        "vision start/end tokens), or the model's positions are wrong",
                        item=i,
                    )

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
        """Packs ``samples`` (a micro-batch, possibly empty) into one batch for ``model(**batch)``."""
        return self._collate(samples, self.pad_images and self.vision)

    def _collate(self, samples: Sequence[Mapping[str, Any]], pad_images: bool, *, masks: Optional[bool] = None) -> Dict[str, Any]:
        if isinstance(samples, Mapping):
            raise InputError("PackedCollator takes a list of samples, got one dict", item=0)
        docs: List[Dict[str, Any]] = []
        token_present: Dict[str, int] = {}
        any_images = False
        for i, s in enumerate(samples):
            if not isinstance(s, Mapping) or "input_ids" not in s:
                raise InputError(f"sample {i} is not a dict with 'input_ids': got {type(s).__name__}", item=i)
            self._check_sample(s, i)
            doc = self._document(s, i)
            if doc is None:
                continue
            for k in self._required:
                if k not in doc["tokens"] and k not in _DERIVED:
                    raise InputError(
                        f"sample {i} has no {k!r}: {type(self.config).__name__} keeps a packed document as it is alone "
                        f"only with {k!r} (the packing probe found the documents differ without it): give every "
                        f"sample the {k!r} its processor makes",
                        item=i,
                    )
            for k in doc["tokens"]:
                token_present[k] = token_present.get(k, 0) + 1
            any_images = any_images or bool(doc["has_vision"])
            docs.append(doc)
        if not docs or (pad_images and not any_images):
            pad = self._document(self.padding_document(image=pad_images), "padding")
            if pad is None:
                raise SettingError("padding_sample has no tokens", item="padding_sample")
            pad["padding"] = True
            docs.append(pad)
        return self._pack(docs, token_present, self._mask_mode if masks is None else masks)

    def _document(self, s: Mapping[str, Any], i: Any) -> Optional[Dict[str, Any]]:
        ids = _tokens(s["input_ids"], f"sample {i}: input_ids", i)
        n = ids.shape[0]
        y = ids.clone() if s.get("labels") is None else _tokens(s["labels"], f"sample {i}: labels", i).clone()
        if y.shape != ids.shape:
            raise DtypeError(f"sample {i}: labels has {y.shape[0]} positions but input_ids has {n}", item=i)
        mask = s.get("attention_mask")
        if mask is not None:
            m = _tokens(mask, f"sample {i}: attention_mask", i, integer=False)
            if m.shape[0] != n:
                raise DtypeError(f"sample {i}: attention_mask has {m.shape[0]} positions but input_ids has {n}", item=i)
            if n and not bool((m != 0).all()):
                raise InputError(
                    f"sample {i} has padding (zeros in attention_mask at {int((m == 0).sum())} positions): "
                    "packed documents carry no padding; strip it before packing",
                    item=i,
                )
        tokens: Dict[str, torch.Tensor] = {}
        items: Dict[str, torch.Tensor] = {}
        for k, v in s.items():
            if v is None or k in _CORE or k in self.drop_keys:
                continue
            if k in self.token_keys:
                t = _tokens(v, f"sample {i}: {k}", i, integer=False)
                if t.shape[0] != n:
                    raise DtypeError(f"sample {i}: {k} has {t.shape[0]} positions but input_ids has {n}", item=i)
                tokens[k] = t
            else:
                t = as_tensor(v, f"sample {i}: {k}", i)
                items[k] = t.reshape(1) if t.dim() == 0 else t
        if n and (int(ids.min()) < 0 or (self._vocab is not None and int(ids.max()) >= self._vocab)):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise InputError(
                f"sample {i} has the token id {bad}, outside the model's vocabulary of {self._vocab} ids", item=i
            )
        if self._grid:
            self._check_images(i, ids, items)
        has_vision = any(_visual(k) for k in items)
        if n == 0:
            if items:
                raise InputError(f"sample {i} has no tokens but has {sorted(items)}", item=i)
            return None
        y[0] = self.label_pad
        doc: Dict[str, Any] = {"input_ids": ids, "labels": y, "tokens": tokens, "items": items, "has_vision": has_vision,
                               "index": i}
        if self.mrope:
            doc["rope"] = self._rope_positions(ids, tokens.get("mm_token_type_ids"), items, i)
        return doc

    def _rope_positions(self, ids: torch.Tensor, types: Optional[torch.Tensor], items: Dict[str, torch.Tensor], i: Any) -> torch.Tensor:
        kw: Dict[str, Any] = {}
        available = {
            "input_ids": ids.unsqueeze(0),
            "mm_token_type_ids": (self._mm_types(ids) if types is None else types.long()).unsqueeze(0),
            "image_grid_thw": items.get("image_grid_thw"),
            "video_grid_thw": items.get("video_grid_thw"),
            "second_per_grid_ts": items.get("second_per_grid_ts"),
            "attention_mask": None,
        }
        for name in self._rope_params:
            if available[name] is not None:
                kw[name] = available[name]
        try:
            out = self._rope(**kw)  # type: ignore[misc]
        except Exception as e:  # noqa: BLE001 - the model's own error, re-raised naming the sample
            raise InputError(
                f"sample {i}: the model's get_rope_index failed on it ({type(e).__name__}: {e}); check its image "
                "placeholders against image_grid_thw / video_grid_thw",
                item=i,
            ) from e
        pos = out[0] if isinstance(out, (tuple, list)) else out
        if not isinstance(pos, torch.Tensor) or pos.dim() != 3 or pos.shape[1] != 1 or pos.shape[2] != ids.shape[0]:
            raise PackingError(
                f"get_rope_index returned {getattr(pos, 'shape', type(pos).__name__)} for sample {i} of "
                f"{ids.shape[0]} tokens; expected (k, 1, {ids.shape[0]})",
                item=i,
            )
        return pos[:, 0].long()

    def _pack(self, docs: List[Dict[str, Any]], token_present: Dict[str, int], masks: bool) -> Dict[str, Any]:
        lengths = [int(d["input_ids"].shape[0]) for d in docs]
        cu, text_pos = packed_layout(lengths)
        out: Dict[str, Any] = {
            "input_ids": torch.cat([d["input_ids"] for d in docs]).unsqueeze(0),
            "labels": torch.cat([d["labels"] for d in docs]).unsqueeze(0),
        }
        if self.mrope:
            rope = torch.cat([d["rope"] for d in docs], dim=1)
            out["position_ids"] = torch.cat([text_pos.unsqueeze(0), rope]).unsqueeze(1)
        else:
            out["position_ids"] = (text_pos + self._position_base).unsqueeze(0)
        out["use_cache"] = False
        if self.varlen_kwargs:
            out["cu_seq_lens_q"] = cu
            out["cu_seq_lens_k"] = cu.clone()
            out["max_length_q"] = out["max_length_k"] = max(lengths)
        # Per-token keys: every document must have them (mm_token_type_ids is derived where missing).
        for k in self.token_keys:
            if k not in token_present and not (k in self._required and k in _DERIVED):
                continue
            parts = []
            for j, d in enumerate(docs):
                t = d["tokens"].get(k)
                if t is None:
                    if k in _DERIVED:
                        t = self._mm_types(d["input_ids"])
                    elif d.get("padding"):
                        t = torch.zeros_like(d["input_ids"])
                    else:
                        raise InputError(
                            f"{token_present[k]} samples of the micro-batch have {k!r} and sample {d['index']} has "
                            f"not: give every sample {k!r} (one value per token), or drop it with drop_keys",
                            item=d["index"],
                        )
                parts.append(t)
            try:
                out[k] = torch.cat(parts).unsqueeze(0)
            except RuntimeError as e:
                raise DtypeError(f"the samples' {k!r} cannot be packed: {e}", item=k) from None
        # Per-image keys: concatenated in sample order (the order of the placeholders).
        keys = [k for k in dict.fromkeys(k for d in docs for k in d["items"])]
        for k in keys:
            have = [d for d in docs if k in d["items"]]
            out[k] = self._concat(k, [d["items"][k] for d in have], [d["index"] for d in have], set(keys))
        if masks and self._mask_cls is not None and any(k in out for k in self._mask_keys):
            out["attention_mask"] = self._attention_masks(docs, out, lengths)
        return out

    def _concat(self, key: str, parts: List[torch.Tensor], owners: List[Any], keys: Any = frozenset()) -> torch.Tensor:
        """One per-image key of the documents, concatenated along dim 0, zero-padded to a common shape where it differs."""
        shapes = [tuple(p.shape) for p in parts]
        if len(set(s[1:] for s in shapes)) <= 1:
            try:
                return torch.cat(parts)
            except RuntimeError as e:
                raise DtypeError(f"the samples' {key!r} cannot be concatenated along dim 0: {e}", item=owners[-1]) from None
        ranks = {len(s) for s in shapes}
        if len(ranks) > 1 or min(ranks) < 2:
            j = next(o for o, s in zip(owners, shapes) if len(s) != len(shapes[0]))
            raise DtypeError(
                f"the samples' {key!r} cannot be packed: sample {owners[0]} gives shape {shapes[0]} and sample {j} "
                f"{shapes[owners.index(j)]}; give every sample the same layout (the one the model's processor "
                "makes: one row per image along dim 0, or (1, n_images, ...) for a per-sample image dimension)",
                item=j,
            )
        reason: Optional[str] = None
        if self._pad_items is None and not (keys & {"image_sizes", "pixel_attention_mask"}):
            reason = (
                "the batch carries neither image_sizes nor pixel_attention_mask, from which a model reads what is "
                "padding, and the collator was not probed with the model"
            )
        elif self._pad_items is False:
            reason = self._pad_reason or "the packing probe found it inexact"
        if reason is not None:
            j = next(o for o, s in zip(owners, shapes) if s[1:] != shapes[0][1:])
            raise DtypeError(
                f"the samples' {key!r} have shapes {shapes}, which differ beyond dim 0 (sample {j} against sample "
                f"{owners[0]}), and {type(self.config).__name__} does not take images zero-padded to a common shape "
                f"({reason}): give every sample's images one shape, resized to the model's image size"
                f"{self._image_size_hint()}, one image per row along dim 0",
                item=j,
            )
        target = [max(s[d] for s in shapes) for d in range(len(shapes[0]))]
        return torch.cat([_pad_to(p, target) for p in parts])

    def _image_size_hint(self) -> str:
        vision = getattr(self.config, "vision_config", None)
        hw = _size2(getattr(vision, "image_size", None)) if vision is not None else None
        return f" (vision_config.image_size: {hw[0]} x {hw[1]})" if hw else ""

    def _attention_masks(self, docs: List[Dict[str, Any]], out: Dict[str, Any], lengths: List[int]) -> Any:
        """Each document's masks alone, from the model's ``create_masks_for_generate``, on the diagonal of the row."""
        impl = getattr(self.config, "_attn_implementation", None)
        if impl not in _MASK_IMPLEMENTATIONS:
            raise SettingError(
                f"{type(self.config).__name__} reads {list(self._mask_keys)} into its attention masks, which "
                "PackedCollator builds for packed documents itself, for attn_implementation 'sdpa' or 'eager' only; "
                f"the model's is {impl!r}: set one of those (model.set_attn_implementation('sdpa')), or drop "
                f"{list(self._mask_keys)} with drop_keys",
                item="model_or_config",
            )
        fn = getattr(self._mask_cls, "create_masks_for_generate")
        names, var_kw, _ = _params(fn)
        total = int(out["input_ids"].shape[1])
        full: Dict[Any, torch.Tensor] = {}
        start = 0
        for d, n in zip(docs, lengths):
            kw: Dict[str, Any] = {
                "config": self._mask_config,
                "inputs_embeds": torch.zeros(1, n, 1),
                "attention_mask": None,
                "position_ids": (torch.arange(n) + self._position_base).unsqueeze(0),
            }
            for name in ("cache", "past_key_values"):
                if name in names:
                    kw[name] = None
            if "is_first_iteration" in names or var_kw:
                kw["is_first_iteration"] = True
            for k in self._mask_keys:
                if k in out:
                    kw[k] = out[k][:, start : start + n]
            try:
                made = fn(**kw)
            except Exception as e:  # noqa: BLE001 - the model's own error, re-raised naming the sample
                raise InputError(
                    f"sample {d['index']}: {self._mask_cls.__name__}.create_masks_for_generate failed on it "
                    f"({type(e).__name__}: {e}); check its {list(self._mask_keys)}",
                    item=d["index"],
                ) from e
            for layer, m in (made.items() if isinstance(made, Mapping) else [(None, made)]):
                if m is None:  # only bidirectional masks are skipped when rendered as eager ones
                    allowed = torch.ones(n, n, dtype=torch.bool)
                elif isinstance(m, torch.Tensor) and m.dim() == 4:
                    allowed = m[0, 0] if m.dtype == torch.bool else m[0, 0] == 0
                else:
                    raise PackingError(
                        f"{self._mask_cls.__name__}.create_masks_for_generate gave a {type(m).__name__} for "
                        f"{layer!r}; PackedCollator reads (1, 1, L, L) masks",
                        item="model_or_config",
                    )
                full.setdefault(layer, torch.zeros(total, total, dtype=torch.bool))[start : start + n, start : start + n] = allowed
            start += n

        def render(m: torch.Tensor) -> torch.Tensor:
            m = m[None, None]
            if impl == "eager":
                m = torch.where(m, torch.zeros((), dtype=self._mask_dtype), torch.finfo(self._mask_dtype).min)
            return m

        if list(full) == [None]:
            return render(full[None])
        return LayerMasks({k: render(v) for k, v in full.items()})

    # --- the probe -------------------------------------------------------------

    def _probe_specs(self, vocab: int) -> Dict[str, List[Tuple[str, int]]]:
        """The probe's documents as segments: ``("t", id)`` a text token, ``("s", id)`` a text token whose
        per-token keys are 1 (a span standing in for an image where the probe has none), ``("u", i)`` image
        ``i`` of the probe (its placeholders and rows)."""
        special = {self.image_token_id, self.video_token_id, self._vision_start, self._vision_end, self._pad_token}
        pool = [t for t in range(1, max(vocab, 2)) if t not in special][:997] or [0]

        def text(n: int, at: int, kind: str = "t") -> List[Tuple[str, int]]:
            return [(kind, pool[(7 * (at + i) + 3) % len(pool)]) for i in range(n)]

        specs: Dict[str, List[Tuple[str, int]]] = {}
        if self._units:
            # The same image at other offsets in the two documents; then a second document with a second image
            # (or a smaller one): several images a document, and images of different sizes or counts packed.
            specs["doc0"] = text(2, 0) + [("u", 0)] + text(3, 2)
            specs["doc1"] = text(4, 5) + [("u", 0)] + text(2, 9)
            if len(self._units) > 1:
                specs["doc1v"] = text(4, 5) + [("u", 1)] + text(2, 9)
            elif self._units[0]["layout"] != "whole":
                specs["doc1v"] = text(4, 5) + [("u", 0)] + text(1, 11) + [("u", 0)] + text(2, 9)
        else:
            specs["doc0"] = text(1, 0) + text(2, 1, "s") + text(2, 3)
            specs["doc1"] = text(3, 5) + text(3, 8, "s") + text(1, 11)
        specs["text0"] = text(5, 0)
        specs["text1"] = text(4, 5)
        specs["joined"] = specs["text0"] + specs["text1"]
        specs["positions"] = text(24, 13)  # long enough that rounding tells the first positions apart
        # Longer than a small sliding window, so the sliding layers mask what the full ones do not.
        if self._window is not None and 0 < self._window <= 64:
            for name in ("doc0", "doc1", "doc1v"):
                if name in specs:
                    while self._spec_length(specs[name]) < self._window + 2:
                        specs[name] = specs[name] + text(1, 12 + self._spec_length(specs[name]))
        return specs

    def _spec_length(self, spec: Sequence[Tuple[str, int]]) -> int:
        return sum(len(self._units[v]["ids"]) if kind == "u" else 1 for kind, v in spec)

    def _probe_sample(self, spec: Sequence[Tuple[str, int]], keys: Sequence[str]) -> Dict[str, Any]:
        """A sample as the processor would give it: the tokens, per-token ``keys`` and the images' rows."""
        ids: List[int] = []
        values: Dict[str, List[int]] = {k: [] for k in keys}
        units: List[Dict[str, Any]] = []
        for kind, v in spec:
            if kind == "u":
                u = self._units[v]
                units.append(u)
                ids.extend(u["ids"])
                for k in keys:
                    own = u["types"].get(k)
                    values[k].extend(own.tolist() if own is not None else self._mm_types(torch.tensor(u["ids"])).tolist())
            else:
                ids.append(v)
                for k in keys:  # a stand-in span only for keys the positions do not read (M-RoPE reads mm_token_type_ids)
                    values[k].append(1 if kind == "s" and k not in self._rope_params else 0)
        s: Dict[str, Any] = {"input_ids": torch.tensor(ids, dtype=torch.int64)}
        for k in keys:
            s[k] = torch.tensor(values[k], dtype=torch.int64)
        if units:
            layout = units[0]["layout"]
            for k in units[0]["items"]:
                parts = [u["items"][k] for u in units]
                dim = 1 if layout == "sample" and parts[0].dim() >= 3 else 0
                s[k] = parts[0] if len(parts) == 1 else torch.cat(parts, dim=dim)
        return s

    def check(self, model: Any) -> Tuple[float, float]:
        """Runs the packing probe on ``model``; returns ``(packed, leak)`` or raises :class:`PackingError`.

        ``packed`` is the largest difference, relative to the logits' largest
        magnitude, between tiny documents packed by this collator (with the
        per-token keys the model's ``forward`` takes, and images where the
        collator has one) and the same documents run alone through the model's
        own ``forward``; ``leak`` is the difference of a document run after
        another under one causal mask, the size of a leak on this model. The
        model passes when ``packed`` is within rounding: ``1000 * eps`` of
        float32 (1.2e-4) for float32 and float64 models (eager attention
        computes its softmax in float32), the larger of a tenth of ``leak``
        and ``8 * eps`` for 16-bit dtypes (bfloat16, float16). On the way it
        sets what the class docs list (first position, the collator's own
        masks, required per-token keys, padded images). Runs in eval mode
        without gradients and restores the model's mode.

        >>> import transformers
        >>> from microbatch.hf import PackedCollator
        >>> model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(vocab_size=32,
        ...     hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        ...     num_key_value_heads=1))
        >>> packed, leak = PackedCollator(model, check_packing=False).check(model)
        >>> packed < 1e-4 < leak
        True
        """
        # FSDP (version 1) must be called through its wrapper, which gathers the sharded weights;
        # DDP, DataParallel and torch.compile are called through the module inside.
        target = model if hasattr(model, "_fsdp_wrapped_module") else unwrap(model)
        model = unwrap(model)
        device, dtype = _device_dtype(model)
        emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        vocab = int(getattr(emb, "num_embeddings", 0) or self._vocab or 32)
        names, var_kw, _ = _params(model.forward)
        # The per-token keys training sends that the model takes (the ones listed in drop_keys are never sent).
        sent = tuple(
            k for k in self.token_keys
            if k not in self.drop_keys and (k in names or (var_kw and k in self._user_token_keys))
        )
        optional = tuple(k for k in sent if k not in _DERIVED)  # those a sample may lack
        specs = self._probe_specs(vocab)
        impl = getattr(self.config, "_attn_implementation", None)
        alone_cache: Dict[Tuple[str, Tuple[str, ...], int], torch.Tensor] = {}

        def sample(name: str, keys: Sequence[str]) -> Dict[str, Any]:
            return self._probe_sample(specs[name], keys)

        def alone(name: str, keys: Tuple[str, ...], base: Optional[int] = None) -> torch.Tensor:
            """The document run alone through the model's forward: its own positions (``base``: given ones)."""
            key = (name, keys, -1 if base is None else base)
            if key not in alone_cache:
                s = sample(name, keys)
                b: Dict[str, Any] = {"input_ids": s["input_ids"].unsqueeze(0)}
                for k, v in s.items():
                    if k != "input_ids" and (k in names or var_kw):
                        b[k] = v.unsqueeze(0) if k in keys else v
                if "use_cache" in names or var_kw:
                    b["use_cache"] = False
                if base is not None:
                    b["position_ids"] = (torch.arange(s["input_ids"].shape[0]) + base).unsqueeze(0)
                alone_cache[key] = _logits(target, b, device)
            return alone_cache[key]

        def packed(docs: Sequence[str], keys: Tuple[str, ...], masks: bool) -> float:
            """The largest relative difference of the packed documents from each alone."""
            logits = _logits(target, self._collate([sample(n, keys) for n in docs], False, masks=masks), device)
            singles = [alone(n, keys) for n in docs]
            scale = max(float(s.abs().max()) for s in singles) or 1.0
            err, start = 0.0, 0
            for s in singles:
                err = max(err, float((logits[start : start + s.shape[0]] - s).abs().max()) / scale)
                start += s.shape[0]
            return err if math.isfinite(err) else math.inf

        was_training = target.training
        target.eval()
        chosen: Optional[str] = None
        tried: Dict[str, float] = {}
        self._position_base, self._required, self._pad_items, self._pad_reason = 0, (), None, None
        try:
            with torch.no_grad():
                # What a leak looks like on this model: a document run after another under one causal mask.
                t1 = alone("text1", ())
                together = alone("joined", ())
                scale = float(t1.abs().max()) or 1.0
                leak = float((together[-t1.shape[0] :] - t1).abs().max()) / scale
                if dtype.is_floating_point and torch.finfo(dtype).bits <= 16:  # bfloat16, float16: a tenth of a leak
                    bound = max(0.1 * leak, 8 * torch.finfo(dtype).eps)
                else:  # float64 too is held to float32 rounding: eager attention computes its softmax in float32
                    bound = 1000 * torch.finfo(torch.float32).eps
                # The first position: the one the model gives a document alone (0, or 1 for PaliGemma), told
                # apart by the rounding of rotary embeddings at the two.
                if not self.mrope and "position_ids" in names:
                    own = alone("positions", ())
                    gaps = [float((alone("positions", (), base) - own).abs().max()) for base in (0, 1)]
                    self._position_base = 1 if gaps[1] < gaps[0] else 0
                # The model's own masks first, then (where its mask factory takes a key sent) the collator's.
                modes = ["native"]
                if self._mask_cls is not None and any(k in sent for k in self._mask_keys):
                    modes.append("mask")
                for mode in modes:
                    if mode == "mask" and impl not in _MASK_IMPLEMENTATIONS:
                        continue
                    tried[mode] = packed(("doc0", "doc1"), sent, mode == "mask")
                    if tried[mode] <= bound:
                        chosen = mode
                        break
                # Without the per-token keys a sample may lack: are they needed to keep a document as it is alone?
                without = math.nan
                if optional:
                    rest = tuple(k for k in sent if k not in optional)
                    try:
                        without = packed(("doc0", "doc1"), rest, False)
                    except Exception:  # noqa: BLE001 - the model cannot run without them: they are required
                        without = math.inf
                if chosen is not None:
                    self._mask_mode = chosen == "mask"
                    if optional and not without <= bound:
                        self._required = optional
                    # Several images a document, and images of different shapes zero-padded to a common one.
                    if "doc1v" in specs:
                        sizes = {
                            k: {tuple(v.shape[1:]) for v in (sample(n, ())[k] for n in ("doc0", "doc1v"))}
                            for k in sample("doc0", ()) if k not in ("input_ids",)
                        }
                        padded = any(len(s) > 1 for s in sizes.values())
                        self._pad_items = True  # padded as the family's processor pads a batch
                        try:
                            variant = packed(("doc0", "doc1v"), sent, self._mask_mode)
                        except Exception as e:  # noqa: BLE001 - padded images the model cannot run
                            if not padded:
                                raise
                            variant = math.inf
                            self._pad_reason = f"{type(e).__name__}: {str(e)[:160]}"
                        if variant <= bound and not padded:
                            self._pad_items = False
                            self._pad_reason = "the packing probe had no images of two shapes to check it with"
                        if variant > bound:
                            if not padded:
                                raise PackingError(
                                    f"{type(model).__name__} (attn_implementation={impl!r}, {dtype}) mixes packed "
                                    "documents when one carries two images or an image of another size: they differ "
                                    f"from each run alone by {variant:.3g} (relative; rounding allows {bound:.3g}), "
                                    "documents of one image of one size being exact. Pack samples of one image, or "
                                    "one sample per row",
                                    item="model_or_config",
                                    measured=(variant, leak),
                                )
                            self._pad_items = False
                            self._pad_reason = self._pad_reason or (
                                f"the packing probe measured {variant:.3g} against each image alone"
                            )
        except PackingError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the model raises, named with what to change
            raise PackingError(
                f"the packing probe could not run {type(model).__name__} (attn_implementation={impl!r}) on a packed "
                f"batch{' with ' + str(list(sent)) if sent else ''}: {type(e).__name__}: {e}. PackedCollator supports "
                "models that build their attention mask with transformers' masking utilities (position_ids "
                "restarting per document, no cache); pass check_packing=False to skip the probe",
                item="model_or_config",
            ) from e
        finally:
            target.train(was_training)
        if chosen is not None:
            return tried[chosen], leak
        err = min(tried.values()) if tried else math.inf
        layers = sorted(set(getattr(self.config.get_text_config(), "layer_types", None) or []))
        where = f" (its layers: {', '.join(layers)})" if layers else ""
        if optional and without <= bound:
            # The keys are the cause: without them the packed documents are exact.
            if "mask" in tried:
                how = (
                    f"the masks PackedCollator builds from {self._mask_cls.__name__}.create_masks_for_generate (each "
                    f"document's own, on the diagonal) differ by {tried['mask']:.3g} too"
                )
            elif self._mask_cls is not None:
                how = (
                    f"PackedCollator builds those masks itself for attn_implementation 'sdpa' or 'eager' only, and the "
                    f"model's is {impl!r}: set one of those"
                )
            else:
                how = (
                    f"{type(model).__name__} has no create_masks_for_generate taking {list(optional)} from which "
                    "PackedCollator could build each document's masks"
                )
            raise PackingError(
                f"{type(model).__name__} (attn_implementation={impl!r}, {dtype}) mixes packed documents when given "
                f"{list(optional)}{where}: two tiny documents packed by PackedCollator differ from each run alone by "
                f"{err:.3g} (relative; rounding allows {bound:.3g}), and by {without:.3g} without {list(optional)}: "
                f"the model builds its attention mask from {list(optional)} by each document's own positions, not "
                f"its place in the packed row; {how}. Or drop them with drop_keys={tuple(optional)!r} (each "
                f"document then attends as the model does without them), or train one sample per row",
                item="model_or_config",
                measured=(err, leak),
            )
        keys = f" with {list(sent)}" if sent else ""
        raise PackingError(
            f"{type(model).__name__} (attn_implementation={impl!r}, {dtype}) mixes packed documents{where}: the logits "
            f"of two tiny documents packed by PackedCollator{keys} differ from each run alone by {err:.3g} (relative; "
            f"rounding allows {bound:.3g}), and by {leak:.3g} when one attends to the other. Use an attention "
            "implementation that reads position_ids or cu_seq_lens ('sdpa', 'eager', 'flash_attention_2'), a "
            "model that builds its mask with transformers' create_causal_mask, or one sample per row instead "
            "of packing",
            item="model_or_config",
            measured=(err, leak),
        )

    def __repr__(self) -> str:
        return (
            f"PackedCollator({type(self.config).__name__}, mrope={self.mrope}, vision={self.vision}, "
            f"varlen_kwargs={self.varlen_kwargs}, pad_images={self.pad_images}, masks={self._mask_mode})"
        )


def _device_dtype(model: Any) -> Tuple[torch.device, torch.dtype]:
    """The device and floating dtype of the model's parameters (CPU, float32 for a model without any)."""
    for p in model.parameters():
        if p.dtype.is_floating_point:
            return p.device, p.dtype
    return torch.device("cpu"), torch.float32


def _config_dtype(config: Any) -> torch.dtype:
    """The dtype a config names (``dtype``/``torch_dtype``), float32 where it names none."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    d = _first(text, ("dtype", "torch_dtype")) or _first(config, ("dtype", "torch_dtype"))
    if isinstance(d, str):
        d = getattr(torch, d, None)
    return d if isinstance(d, torch.dtype) and d.is_floating_point else torch.float32


def _logits(target: Any, batch: Dict[str, Any], device: Any) -> torch.Tensor:
    """``target(**batch)``'s logits of the one row, float64 on the CPU (tensors and masks moved to ``device``)."""
    moved = {k: v.to(device) if isinstance(v, (torch.Tensor, LayerMasks)) else v for k, v in batch.items()}
    out = target(**moved)
    logits = getattr(out, "logits", None)
    if logits is None and isinstance(out, (tuple, list)):
        logits = out[0]
    if not isinstance(logits, torch.Tensor):
        raise PackingError(f"{type(target).__name__}(**batch) returned no logits", item="model_or_config")
    return logits.detach().double().cpu()[0]


def _runs(mask: torch.Tensor) -> List[int]:
    """The lengths of the runs of True in a 1-D bool tensor, in order."""
    m = mask.to(torch.int8)
    if not m.numel():
        return []
    edges = torch.diff(m, prepend=m.new_zeros(1), append=m.new_zeros(1))
    starts = (edges == 1).nonzero().flatten()
    ends = (edges == -1).nonzero().flatten()
    return (ends - starts).tolist()


def _rope_works(rope: Callable[..., Any]) -> bool:
    """Whether ``rope`` (a ``get_rope_index``) computes the positions of a 3-token text document."""
    ids = torch.ones(1, 3, dtype=torch.int64)
    kw: Dict[str, Any] = {"input_ids": ids}
    try:
        if "mm_token_type_ids" in inspect.signature(rope).parameters:
            kw["mm_token_type_ids"] = torch.zeros_like(ids)
        out = rope(**kw)
    except Exception:  # noqa: BLE001 - any failure: this owner cannot be used as a shell
        return False
    pos = out[0] if isinstance(out, (tuple, list)) else out
    return isinstance(pos, torch.Tensor) and pos.dim() == 3 and tuple(pos.shape[1:]) == (1, 3)


def _model_class(config: Any) -> Optional[Any]:
    """The base model class transformers maps ``config`` to that has ``get_rope_index`` (``None`` when there is none)."""
    try:
        from transformers.models.auto.modeling_auto import MODEL_MAPPING

        found = MODEL_MAPPING[type(config)]
    except Exception:  # noqa: BLE001 - no mapping: no multimodal RoPE to compute
        return None
    for cls in found if isinstance(found, (tuple, list)) else (found,):
        if callable(getattr(cls, "get_rope_index", None)):
            return cls
    return None
