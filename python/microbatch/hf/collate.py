"""A packed-sequence collator bound to a Hugging Face model: ``model(**collator(samples))`` keeps the documents apart.

See :mod:`microbatch.hf` for the training loop. Everything model-specific is
read from the model (or its config) at construction: whether it uses
multimodal RoPE (a ``get_rope_index`` method, as in the Qwen2-VL family),
its image and video token ids, its vision tower's patch and merge sizes. A
packing probe then runs the model once on two tiny packed documents and
raises :class:`PackingError` when the packed logits differ from each document
run alone, so a model whose attention ignores packing is refused instead of
leaking attention between documents.
"""

from __future__ import annotations

import inspect
import math
import operator
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch

from ..errors import DtypeError, InputError, SettingError
from ..torch import IGNORE_INDEX, _as_tensor, _packed_layout, _tokens

__all__ = ["PackedCollator", "PackingError", "TOKEN_KEYS", "ITEM_KEYS"]

#: Sample keys that hold one value per token: packed like ``input_ids`` into ``(1, T)``.
TOKEN_KEYS: Tuple[str, ...] = ("token_type_ids", "mm_token_type_ids")

#: Sample keys that hold one row per image or video (or per frame, per patch):
#: concatenated along dim 0 in sample order, the order of the placeholders in
#: ``input_ids``. A sample without the key contributes nothing.
ITEM_KEYS: Tuple[str, ...] = (
    "pixel_values",
    "image_grid_thw",
    "pixel_values_videos",
    "video_grid_thw",
    "second_per_grid_ts",
    "image_sizes",
    "pixel_attention_mask",
)

_CORE = ("input_ids", "labels", "attention_mask", "position_ids")


class PackingError(SettingError):
    """The model cannot be fed packed documents safely: its attention would mix them.

    Raised by :class:`PackedCollator` when its packing probe finds that a
    document packed after another gives other logits than the document alone,
    or when the probe batch cannot run on the model at all. The message names
    the model, its attention implementation and the measured differences, and
    says what to change. :attr:`measured` holds ``(packed, leak)``: the
    largest relative difference of the packed documents from the same
    documents run alone, and that of a document run after another under one
    causal mask (what a leak looks like on this model); ``None`` when the
    probe could not run.

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


# --- reading the model ------------------------------------------------------


def _unwrap(model: Any) -> Any:
    """The model inside DDP / DataParallel / FSDP / torch.compile wrappers."""
    seen = 0
    while seen < 8:
        seen += 1
        for attr in ("module", "_fsdp_wrapped_module", "_orig_mod"):
            inner = getattr(model, attr, None)
            if isinstance(inner, torch.nn.Module):
                model = inner
                break
        else:
            break
    return model


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
    - ``position_ids``: ``(1, T)`` int64 restarting at 0 at every document,
      or, for a model with multimodal RoPE (a ``get_rope_index`` method: the
      Qwen2-VL family), ``(1 + k, 1, T)``: row 0 the text positions
      (restarting per document: transformers builds the packed mask from it),
      rows ``1..k`` the model's own ``get_rope_index`` of each document alone,
      concatenated;
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
      ``image_grid_thw``, ...) concatenated along dim 0 in sample order.

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
    have finished reduction" otherwise). The image is built from the config
    for models that take ``image_grid_thw`` (the Qwen2-VL family); for other
    layouts (LLaVA, Gemma 3, ...) the probe, when bound to a model, sizes one
    image of ``vision_config.image_size`` by running ``get_image_features``
    and keeps it if the packed batch runs with it. Otherwise pass
    ``padding_sample=`` (one sample with one small image, made with the
    model's processor), or ``pad_images=False`` when no padding image is
    wanted (one process, or ``find_unused_parameters=True``).

    **The packing probe.** Bound to a model (not a config) with
    ``check_packing=True``, the constructor runs the model once in eval mode
    without gradients on two tiny packed documents (with images for a model
    whose padding image it can build) and compares their logits with each
    document run alone, positions computed by the model itself. A difference
    above the dtype's rounding raises :class:`PackingError`; so does a batch
    the model cannot run. Run it again with :meth:`check` after changing the
    attention implementation. The probe costs three forward passes of about
    ten tokens; under FSDP every rank must construct the collator (the
    forwards are collectives there).

    The collator holds the config and, for multimodal RoPE, a weightless
    instance of the class that owns ``get_rope_index`` (the module itself
    only if its ``get_rope_index`` needs more than the config), so it
    pickles small to ``DataLoader`` workers.

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
            ``None``: built from the config (for a vision model, with one image
            of ``spatial_merge_size`` x ``spatial_merge_size`` patches).
        token_keys, item_keys: more keys packed per token or concatenated per image.
        drop_keys: sample keys to leave out of the batch (``position_ids``
            too: the collator computes its own; an ``attention_mask`` is
            always checked for padding).

    Raises:
        PackingError: the probe found that the model mixes packed documents,
            or the model needs inputs the collator cannot build.
        SettingError: settings that do not fit the model.

    Each call raises :class:`microbatch.InputError` (or its subclass
    :class:`microbatch.DtypeError`) naming the sample and key for a sample it
    cannot pack: a key it does not know, a per-token key of another length
    than ``input_ids``, padding in ``attention_mask``, image placeholders that
    do not match ``image_grid_thw`` or ``pixel_values``.

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
            model = _unwrap(model_or_config)
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
        self._padding: Optional[Dict[str, Any]] = None
        if padding_sample is not None:
            if not isinstance(padding_sample, Mapping) or "input_ids" not in padding_sample:
                raise SettingError("padding_sample must be a sample dict with 'input_ids'", item="padding_sample")
            p = dict(padding_sample)
            p["labels"] = [self.label_pad] * len(_tokens(p["input_ids"], "padding_sample's input_ids", "padding_sample"))
            self._check_sample(p, "padding_sample")
            self._padding = p
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

    def _image_document(self, text: Sequence[int], images: Sequence[Tuple[int, int]], after: Sequence[int] = (), seed: int = 0) -> Dict[str, Any]:
        """A sample: ``text``, then each image (vision-start, placeholders, vision-end), then ``after``."""
        ids: List[int] = list(text)
        pixels, grids = [], []
        for k, (h, w) in enumerate(images):
            im = self._image(h, w, seed + k)
            if self._vision_start is not None:
                ids.append(self._vision_start)
            ids.extend([int(self.image_token_id)] * im["tokens"])  # type: ignore[arg-type]
            if self._vision_end is not None:
                ids.append(self._vision_end)
            pixels.append(im["pixel_values"])
            grids.append(im["image_grid_thw"])
        ids.extend(after)
        s: Dict[str, Any] = {"input_ids": torch.tensor(ids, dtype=torch.int64)}
        if images:
            s["pixel_values"] = torch.cat(pixels)
            s["image_grid_thw"] = torch.cat(grids)
        return s

    def padding_document(self, *, image: bool) -> Dict[str, Any]:
        """The padding document added to an empty or image-less micro-batch (labels all ``label_pad``).

        ``image=True`` asks for one with an image (a vision model's
        image-less micro-batch); it raises :class:`microbatch.SettingError`
        when the collator cannot build one (pass ``padding_sample=``).

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
                    f"a micro-batch without images for {type(self.config).__name__}: its vision tower would get no "
                    "gradient on this rank (DDP raises 'Expected to have finished reduction'), and the collator "
                    "cannot build a padding image for this model: pass padding_sample= (one sample with one small "
                    "image, made with the model's processor), or pad_images=False if no rank needs it "
                    "(one process, or DDP with find_unused_parameters=True)",
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

    def _collate(self, samples: Sequence[Mapping[str, Any]], pad_images: bool) -> Dict[str, Any]:
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
        return self._pack(docs, token_present)

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
                t = _as_tensor(v, f"sample {i}: {k}", i)
                items[k] = t.reshape(1) if t.dim() == 0 else t
        if n and (int(ids.min()) < 0 or (self._vocab is not None and int(ids.max()) >= self._vocab)):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise InputError(
                f"sample {i} has the token id {bad}, outside the model's vocabulary of {self._vocab} ids", item=i
            )
        if self._grid:
            self._check_images(i, ids, items)
        has_vision = any(k in items for k in ("pixel_values", "pixel_values_videos"))
        if n == 0:
            if items:
                raise InputError(f"sample {i} has no tokens but has {sorted(items)}", item=i)
            return None
        y[0] = self.label_pad
        doc: Dict[str, Any] = {"input_ids": ids, "labels": y, "tokens": tokens, "items": items, "has_vision": has_vision}
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

    def _pack(self, docs: List[Dict[str, Any]], token_present: Dict[str, int]) -> Dict[str, Any]:
        lengths = [int(d["input_ids"].shape[0]) for d in docs]
        cu, text_pos = _packed_layout(lengths)
        out: Dict[str, Any] = {
            "input_ids": torch.cat([d["input_ids"] for d in docs]).unsqueeze(0),
            "labels": torch.cat([d["labels"] for d in docs]).unsqueeze(0),
        }
        if self.mrope:
            rope = torch.cat([d["rope"] for d in docs], dim=1)
            out["position_ids"] = torch.cat([text_pos.unsqueeze(0), rope]).unsqueeze(1)
        else:
            out["position_ids"] = text_pos.unsqueeze(0)
        out["use_cache"] = False
        if self.varlen_kwargs:
            out["cu_seq_lens_q"] = cu
            out["cu_seq_lens_k"] = cu.clone()
            out["max_length_q"] = out["max_length_k"] = max(lengths)
        # Per-token keys: every document must have them (mm_token_type_ids is derived where missing).
        for k in self.token_keys:
            if k not in token_present:
                continue
            parts = []
            for j, d in enumerate(docs):
                t = d["tokens"].get(k)
                if t is None:
                    if k == "mm_token_type_ids":
                        t = self._mm_types(d["input_ids"])
                    elif d.get("padding"):
                        t = torch.zeros_like(d["input_ids"])
                    else:
                        raise InputError(
                            f"{token_present[k]} samples of the micro-batch have {k!r} and sample {j} has not: "
                            f"give every sample {k!r} (one value per token), or drop it with drop_keys",
                            item=j,
                        )
                parts.append(t)
            try:
                out[k] = torch.cat(parts).unsqueeze(0)
            except RuntimeError as e:
                raise DtypeError(f"the samples' {k!r} cannot be packed: {e}", item=k) from None
        # Per-image keys: concatenated in sample order (the order of the placeholders).
        keys = [k for k in dict.fromkeys(k for d in docs for k in d["items"])]
        for k in keys:
            parts = [d["items"][k] for d in docs if k in d["items"]]
            try:
                out[k] = torch.cat(parts)
            except RuntimeError as e:
                j = next(n for n, d in enumerate(docs) if k in d["items"] and d["items"][k] is parts[-1])
                raise DtypeError(
                    f"the samples' {k!r} cannot be concatenated along dim 0 (shapes "
                    f"{[tuple(p.shape) for p in parts]}): {e}",
                    item=j,
                ) from None
        return out

    # --- the probe -------------------------------------------------------------

    def _discover_padding(self, model: Any, device: Any, dtype: Any) -> Optional[Dict[str, Any]]:
        """A padding sample with one image of ``vision_config.image_size`` for a vision model of another layout
        than Qwen2-VL's (LLaVA, Gemma 3, ...): its placeholder count read from ``get_image_features``; ``None``
        when the model does not say."""
        vision = self.config.vision_config
        size = _as_int(getattr(vision, "image_size", None))
        features = getattr(model, "get_image_features", None)
        if size is None or self.image_token_id is None or not callable(features):
            return None
        channels = _as_int(_first(vision, ("num_channels", "in_channels", "in_chans"))) or 3
        g = torch.Generator().manual_seed(4321)
        pixels = torch.rand(1, channels, size, size, generator=g, dtype=torch.float32) * 2 - 1
        try:
            out = features(pixel_values=pixels.to(device=device, dtype=dtype))
        except Exception:  # noqa: BLE001 - a layout that needs more inputs: no padding image
            return None
        f = out if isinstance(out, torch.Tensor) else getattr(out, "pooler_output", None)
        if isinstance(f, (list, tuple)) and len(f) == 1:
            f = f[0]
        if not isinstance(f, torch.Tensor) or f.dim() not in (2, 3) or (f.dim() == 3 and f.shape[0] != 1):
            return None
        tokens = int(f.shape[-2])
        if tokens < 1:
            return None
        return {
            "input_ids": torch.tensor([self._pad_token] + [int(self.image_token_id)] * tokens, dtype=torch.int64),
            "pixel_values": pixels,
        }

    def _probe_documents(self, vocab: int) -> List[Dict[str, Any]]:
        special = {self.image_token_id, self.video_token_id, self._vision_start, self._vision_end, self._pad_token}
        pool = [t for t in range(1, max(vocab, 2)) if t not in special][:997] or [0]
        pick = lambda k: pool[(7 * k + 3) % len(pool)]  # noqa: E731
        if self._grid and self.pad_images:
            m = int(self._merge)  # type: ignore[arg-type]
            first = self._image_document([pick(0), pick(1)], [(m, m)], [pick(2), pick(3)], seed=10)
            second = self._image_document([pick(4)], [(m, 2 * m)], [pick(5), pick(6)], seed=20)
            return [first, second]
        return [
            {"input_ids": torch.tensor([pick(k) for k in range(5)])},
            {"input_ids": torch.tensor([pick(k) for k in range(5, 9)])},
        ]

    def check(self, model: Any) -> Tuple[float, float]:
        """Runs the packing probe on ``model``; returns ``(packed, leak)`` or raises :class:`PackingError`.

        ``packed`` is the largest difference, relative to the logits' largest
        magnitude, between two tiny documents packed by this collator and the
        same documents run alone (positions computed by the model); ``leak``
        is the difference of the second document run after the first under
        one causal mask, the size of a leak on this model. The model passes
        when ``packed`` is within rounding: ``1000 * eps`` of float32 (1.2e-4)
        for float32 and float64 models (eager attention computes its softmax
        in float32), the larger of a tenth of ``leak`` and ``8 * eps`` for
        16-bit dtypes (bfloat16, float16). Runs in eval mode without
        gradients and restores the model's mode.

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
        target = model if hasattr(model, "_fsdp_wrapped_module") else _unwrap(model)
        model = _unwrap(model)
        try:
            param = next(model.parameters())
            device, dtype = param.device, param.dtype
        except StopIteration:
            device, dtype = torch.device("cpu"), torch.float32
        emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        vocab = int(getattr(emb, "num_embeddings", 0) or self._vocab or 32)
        docs = self._probe_documents(vocab)
        try:
            accepts = set(inspect.signature(model.forward).parameters)
        except (TypeError, ValueError):  # a forward without a signature: pass what the model's own call takes
            accepts = {"mm_token_type_ids"}

        def run(batch: Dict[str, Any]) -> torch.Tensor:
            moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            out = target(**moved)
            logits = getattr(out, "logits", None)
            if logits is None and isinstance(out, (tuple, list)):
                logits = out[0]
            if not isinstance(logits, torch.Tensor):
                raise PackingError(f"{type(model).__name__}(**batch) returned no logits", item="model_or_config")
            return logits.detach().double()[0]

        def alone(doc: Dict[str, Any]) -> Dict[str, Any]:
            b: Dict[str, Any] = {"input_ids": doc["input_ids"].unsqueeze(0), "use_cache": False}
            for k in ("pixel_values", "image_grid_thw"):
                if k in doc:
                    b[k] = doc[k]
            if "pixel_values" in doc and "mm_token_type_ids" in accepts:
                b["mm_token_type_ids"] = self._mm_types(doc["input_ids"]).unsqueeze(0)
            return b

        impl = getattr(self.config, "_attn_implementation", None)
        was_training = target.training
        target.eval()
        try:
            with torch.no_grad():
                # A vision model of another layout than Qwen2-VL's: a padding image found by running its
                # vision tower on one image of vision_config.image_size, kept if the packed batch runs with it.
                found = False
                if self.vision and self.pad_images and not self._grid and self._padding is None:
                    self._padding = self._discover_padding(model, device, dtype)
                    found = self._padding is not None
                pad = self.pad_images and self.vision and (self._grid or self._padding is not None)
                try:
                    packed = run(self._collate(docs, pad))
                except Exception:  # noqa: BLE001 - the found padding image does not fit: ask for padding_sample=
                    if not found:
                        raise
                    self._padding = None
                    packed = run(self._collate(docs, False))
                singles = [run(alone(d)) for d in docs]
                joined: Dict[str, Any] = {"input_ids": torch.cat([d["input_ids"] for d in docs])}
                for k in ("pixel_values", "image_grid_thw"):
                    if k in docs[0]:
                        joined[k] = torch.cat([d[k] for d in docs])
                together = run(alone(joined))
        except PackingError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the model raises, named with what to change
            raise PackingError(
                f"the packing probe could not run {type(model).__name__} (attn_implementation={impl!r}) on a packed "
                f"batch: {type(e).__name__}: {e}. PackedCollator supports models that build their attention mask with "
                "transformers' masking utilities (position_ids restarting per document, no cache); pass "
                "check_packing=False to skip the probe",
                item="model_or_config",
            ) from e
        finally:
            target.train(was_training)
        n0 = docs[0]["input_ids"].shape[0]
        scale = max(float(s.abs().max()) for s in singles) or 1.0
        err = max(float((packed[:n0] - singles[0]).abs().max()), float((packed[n0 : n0 + singles[1].shape[0]] - singles[1]).abs().max())) / scale
        leak = float((together[n0:] - singles[1]).abs().max()) / scale
        if dtype.is_floating_point and torch.finfo(dtype).bits <= 16:  # bfloat16, float16: a tenth of a leak
            bound = max(0.1 * leak, 8 * torch.finfo(dtype).eps)
        else:  # float64 too is held to float32 rounding: eager attention computes its softmax in float32
            bound = 1000 * torch.finfo(torch.float32).eps
        if not math.isfinite(err) or err > bound:
            raise PackingError(
                f"{type(model).__name__} (attn_implementation={impl!r}, {dtype}) mixes packed documents: the logits of "
                f"two tiny documents packed by PackedCollator differ from each run alone by {err:.3g} (relative; "
                f"rounding allows {bound:.3g}), and by {leak:.3g} when one attends to the other. Use an attention "
                "implementation that reads position_ids or cu_seq_lens ('sdpa', 'eager', 'flash_attention_2'), a "
                "model that builds its mask with transformers' create_causal_mask, or one sample per row instead "
                "of packing",
                item="model_or_config",
                measured=(err, leak),
            )
        return err, leak

    def __repr__(self) -> str:
        return (
            f"PackedCollator({type(self.config).__name__}, mrope={self.mrope}, vision={self.vision}, "
            f"varlen_kwargs={self.varlen_kwargs}, pad_images={self.pad_images})"
        )


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
