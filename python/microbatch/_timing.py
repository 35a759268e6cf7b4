"""Per-phase timings of a real model: the vision tower and the language model of each micro-batch.

:class:`PhaseTimer` times, with module hooks and no change to the model, the
forward and the backward of a vision-language model's vision tower and of its
language model, micro-batch by micro-batch, and gives each micro-batch's row
to a :class:`microbatch.cost.Calibrator`. Its names are
:mod:`microbatch.torch`'s.

How the backward is attributed (autograd runs it with no module boundaries):

- a module's backward **starts** when the gradient of its output arrives (a
  tensor hook registered on each output tensor in the module's forward hook;
  the first to fire);
- it **ends** when the gradients of its inputs are done (tensor hooks on the
  inputs that require grad, registered in the forward pre-hook) or, when no
  input requires grad (a vision tower fed ``pixel_values``), when the last of
  its trainable parameters has accumulated its gradient
  (``Tensor.register_post_accumulate_grad_hook``): autograd accumulates a
  parameter's gradient as soon as it is computed, and the tower's first layer
  (the patch embedding) is the last to get its gradient. The end of
  ``loss.backward()`` would also count what autograd runs after the tower (the
  token embedding's backward in Qwen2-VL, created before the tower in the
  forward, so run after it), and ``register_full_backward_hook`` is no end
  marker there: when no input requires grad it fires as the output's
  gradient arrives, at the start of the module's backward (measured with
  torch 2.15 on a module whose backward sleeps 0.2 s: the hook at 0.015 s,
  the last parameter gradient at 0.229 s).

Time in both phases' windows (the vision tower called inside the language
model's forward, say) counts for the inner one. What is in neither window
(the token embedding, the scatter of image features into the sequence, the
LM head and the loss, their backward) is ``other``. :attr:`MicroBatchTime.total`
is measured from the start of :meth:`PhaseTimer.micro_batch` to its end, so
``vision + language + other == total`` by construction; the tests check
``total`` against an independent clock, and the phases against modules of
known duration.

Timing marks are ``time.perf_counter`` on a CPU and CUDA events on a GPU
(recorded where the hooks fire, read after one ``torch.cuda.synchronize()``
in :meth:`PhaseTimer.collect`, once a step, so the GPU is not stalled after
every micro-batch).

Limits: with activation checkpointing, a forward recomputed in the backward
counts in the backward window it runs in; under FSDP with flattened
parameters, the post-accumulate hooks of the original parameters do not
fire, so a vision tower whose input needs no grad ends at the end of
``backward()`` (its tensor hooks still work).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from ._torch_common import unwrap
from .errors import DtypeError, SettingError

__all__ = ["PhaseTimer", "MicroBatchTime", "find_phase_modules"]

# Where the vision tower and the language model live in Hugging Face VLMs
# (transformers 5: ``model.model.visual`` / ``model.model.language_model`` for
# Qwen2-VL and Qwen2.5-VL; LLaVA-style ``vision_tower``; older layouts at the top).
_VISION_PATHS = ("model.visual", "visual", "model.vision_tower", "vision_tower", "model.vision_model", "vision_model")
_LANGUAGE_PATHS = ("model.language_model", "language_model", "model.text_model", "text_model")


def _path(model: Any, path: str) -> Optional[torch.nn.Module]:
    obj = model
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj if isinstance(obj, torch.nn.Module) else None


def find_phase_modules(model: torch.nn.Module) -> Tuple[torch.nn.Module, torch.nn.Module]:
    """The ``(vision tower, language model)`` of a Hugging Face vision-language model.

    Looks for the usual attribute paths (``model.visual`` and
    ``model.language_model`` for Qwen2-VL / Qwen2.5-VL in transformers 5,
    ``vision_tower`` for LLaVA-style models, ...) inside DDP, DataParallel,
    FSDP or ``torch.compile`` wrappers.

    Raises:
        SettingError: no vision tower or no language model at a known path
            (``item``: ``"vision"`` or ``"language"``); pass the modules to
            :class:`PhaseTimer` yourself then.

    >>> import torch
    >>> from microbatch.torch import find_phase_modules
    >>> class VLM(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.visual, self.language_model = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    >>> v, l = find_phase_modules(VLM())
    >>> type(v).__name__, v is not l
    ('Linear', True)
    """
    inner = unwrap(model)
    found = []
    for phase, paths in (("vision", _VISION_PATHS), ("language", _LANGUAGE_PATHS)):
        module = next((m for m in (_path(inner, p) for p in paths) if m is not None), None)
        if module is None:
            raise SettingError(
                f"no {phase} module found in {type(inner).__name__} at any of {', '.join(paths)}: "
                f"pass it as PhaseTimer({phase}=...)",
                item=phase,
            )
        found.append(module)
    return found[0], found[1]


def _tensors(obj: Any, out: List[torch.Tensor], depth: int = 0) -> List[torch.Tensor]:
    """The tensors in a module's inputs or outputs (tensors, tuples, lists, dicts, ModelOutputs)."""
    if depth > 4:
        return out
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            _tensors(x, out, depth + 1)
    elif isinstance(obj, dict):  # ModelOutput is an OrderedDict
        for x in obj.values():
            _tensors(x, out, depth + 1)
    return out


@dataclasses.dataclass(frozen=True)
class MicroBatchTime:
    """One micro-batch's measured times in seconds, per phase, and the samples it held.

    Attributes:
        vision_forward, vision_backward: the vision tower's windows.
        language_forward, language_backward: the language model's windows.
        other: the rest of the micro-batch (embedding, feature scatter, head,
            loss, their backward): ``total`` less the four windows.
        total: from the start to the end of :meth:`PhaseTimer.micro_batch`.
        features: the keyword arguments given to :meth:`PhaseTimer.micro_batch`
            (``text_tokens``, ``image_tokens``, ...), passed on to
            :meth:`microbatch.cost.Calibrator.observe`.
    """

    vision_forward: float
    vision_backward: float
    language_forward: float
    language_backward: float
    other: float
    total: float
    features: Dict[str, Any]

    @property
    def vision(self) -> float:
        """The vision tower's forward and backward."""
        return self.vision_forward + self.vision_backward

    @property
    def language(self) -> float:
        """The language model's forward and backward (without ``other``)."""
        return self.language_forward + self.language_backward

    def observe(self, calibrator: Any) -> None:
        """Gives this row to ``calibrator`` (a :class:`microbatch.cost.Calibrator`).

        ``vision_seconds`` is the vision tower's time; ``language_seconds`` is
        the rest of the micro-batch (the language model and ``other``, whose
        work grows with the tokens as the language terms do), so that the two
        add up to the measured micro-batch time and a calibrated plan
        predicts whole micro-batches.
        """
        calibrator.observe(
            **self.features, vision_seconds=self.vision, language_seconds=max(self.total - self.vision, 0.0)
        )


class _Clock:
    """Marks on the device's timeline: ``perf_counter`` on a CPU, CUDA events (read after a synchronize)."""

    def __init__(self, device: torch.device, fn: Optional[Callable[[], float]] = None) -> None:
        self.cuda = device.type == "cuda" and fn is None
        self.device = device
        self.fn = fn or time.perf_counter

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            return event
        return self.fn()

    def since(self, start: Any, mark: Any) -> float:
        if self.cuda:
            return start.elapsed_time(mark) / 1e3
        return mark - start


class _Record:
    """The marks of one micro-batch (filled by the hooks while it runs)."""

    __slots__ = ("start", "end", "forward", "bwd_start", "bwd_end", "acc_end", "inputs", "in_backward", "features", "stack")

    def __init__(self, features: Dict[str, Any]) -> None:
        self.features = features
        self.start: Any = None
        self.end: Any = None
        # phase -> [(enter, exit)] forward windows; a stack of (phase, enter) while they run
        self.forward: Dict[str, List[Tuple[Any, Any]]] = {"vision": [], "language": []}
        self.stack: List[Tuple[str, Any]] = []
        self.bwd_start: Dict[str, Any] = {}
        self.bwd_end: Dict[str, Any] = {}  # the last input gradient
        self.acc_end: Dict[str, Any] = {}  # the last parameter gradient accumulated
        self.inputs: Dict[str, bool] = {}  # whether an input required grad
        self.in_backward = False


class PhaseTimer:
    """Times the vision tower and the language model of a model, forward and backward, per micro-batch.

    Hooks (forward pre-hooks, forward hooks, tensor hooks on the modules'
    inputs and outputs, post-accumulate-grad hooks on their parameters) mark
    each phase's windows; the model is not changed. Wrap each micro-batch's
    forward and backward in :meth:`micro_batch`, call :meth:`collect` once a
    step (after the last backward) and give each row to the calibrator
    (:meth:`observe`, or :meth:`MicroBatchTime.observe`). See the module
    docs for how the backward is attributed.

    Args:
        model: a Hugging Face vision-language model (its modules found by
            :func:`find_phase_modules`), or ``None`` with both modules given.
        vision, language: the modules to time, overriding what is found.
        device: where the model runs (CUDA: events; else ``perf_counter``);
            ``None``: the device of the vision tower's first parameter.
        clock: a function returning seconds to use instead (CPU only), e.g.
            ``time.thread_time``: the CPU time of the thread that runs the
            model, steadier than the wall clock on a shared machine when
            torch runs one thread (``torch.set_num_threads(1)``; autograd
            runs a CPU backward in the calling thread).

    Raises:
        SettingError: a module not found, the same module twice.
        DtypeError: a module that is not a ``torch.nn.Module``.

    Cost: a few hooks a micro-batch and one per trainable parameter of the two
    modules during the backward (a ``perf_counter`` call or an event record).

    Example (a toy model: a "vision tower" and a "language model"):

    >>> import torch
    >>> import microbatch.cost as mc
    >>> from microbatch.torch import PhaseTimer
    >>> class Toy(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.visual = torch.nn.Linear(8, 8)
    ...         self.language_model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
    ...     def forward(self, pixels, tokens):
    ...         return self.language_model(torch.cat([self.visual(pixels), tokens])).sum()
    >>> model = Toy()
    >>> timer = PhaseTimer(model)
    >>> calibrator = mc.Calibrator("qwen2.5-vl-7b")
    >>> for k in range(3):
    ...     with timer.micro_batch(text_tokens=[10 + k], image_tokens=[[4]]):
    ...         model(torch.randn(4, 8), torch.randn(10 + k, 8)).backward()
    >>> rows = timer.collect()          # once a step: synchronizes CUDA, clears the pending rows
    >>> r = rows[0]
    >>> r.vision > 0 and r.language > 0 and r.other >= 0
    True
    >>> abs(r.vision + r.language + r.other - r.total) < 1e-9
    True
    >>> PhaseTimer.observe(calibrator, rows); len(calibrator)
    3
    >>> timer.close()                   # removes the hooks
    """

    def __init__(
        self,
        model: Optional[torch.nn.Module] = None,
        *,
        vision: Optional[torch.nn.Module] = None,
        language: Optional[torch.nn.Module] = None,
        device: Any = None,
        clock: Optional[Callable[[], float]] = None,
    ) -> None:
        if clock is not None and not callable(clock):
            raise DtypeError(f"clock must be a function returning seconds, got {type(clock).__name__}", item="clock")
        if vision is None or language is None:
            if model is None:
                raise SettingError("give the model, or both vision= and language= modules", item="model")
            found = find_phase_modules(model)
            vision = found[0] if vision is None else vision
            language = found[1] if language is None else language
        for name, m in (("vision", vision), ("language", language)):
            if not isinstance(m, torch.nn.Module):
                raise DtypeError(f"{name} must be a torch.nn.Module, got {type(m).__name__}", item=name)
        if vision is language:
            raise SettingError("vision and language are the same module: give the two towers", item="language")
        self.modules: Dict[str, torch.nn.Module] = {"vision": vision, "language": language}
        if device is None:
            first = next(iter(vision.parameters()), None)
            device = first.device if first is not None else torch.device("cpu")
        self._clock = _Clock(torch.device(device), clock)
        self._current: Optional[_Record] = None
        self._pending: List[_Record] = []
        self._handles: List[Any] = []
        for phase, m in self.modules.items():
            self._handles.append(m.register_forward_pre_hook(self._pre_hook(phase), with_kwargs=True))
            self._handles.append(m.register_forward_hook(self._post_hook(phase)))
            for p in m.parameters():
                if p.requires_grad:
                    self._handles.append(p.register_post_accumulate_grad_hook(self._accumulated(phase)))

    # --- hooks ---------------------------------------------------------------------------

    def _pre_hook(self, phase: str) -> Any:
        def hook(module: Any, args: Any, kwargs: Any) -> None:
            rec = self._current
            if rec is None or rec.in_backward:  # outside a micro-batch, or a recomputed forward
                return
            rec.stack.append((phase, self._clock.mark()))
            for t in _tensors((args, kwargs), []):
                if t.requires_grad:
                    rec.inputs[phase] = True
                    t.register_hook(self._input_grad(rec, phase))

        return hook

    def _post_hook(self, phase: str) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            rec = self._current
            if rec is None or rec.in_backward or not rec.stack or rec.stack[-1][0] != phase:
                return
            _, enter = rec.stack.pop()
            rec.forward[phase].append((enter, self._clock.mark()))
            for t in _tensors(output, []):
                if t.requires_grad:
                    t.register_hook(self._output_grad(rec, phase))

        return hook

    def _output_grad(self, rec: _Record, phase: str) -> Any:
        def hook(grad: torch.Tensor) -> None:
            rec.in_backward = True
            if phase not in rec.bwd_start:  # the first gradient to arrive
                rec.bwd_start[phase] = self._clock.mark()

        return hook

    def _input_grad(self, rec: _Record, phase: str) -> Any:
        def hook(grad: torch.Tensor) -> None:
            rec.bwd_end[phase] = self._clock.mark()  # the last one wins

        return hook

    def _accumulated(self, phase: str) -> Any:
        def hook(param: torch.Tensor) -> None:
            rec = self._current
            if rec is not None and phase in rec.bwd_start:
                rec.acc_end[phase] = self._clock.mark()

        return hook

    # --- the user's side -----------------------------------------------------------------

    @contextlib.contextmanager
    def micro_batch(self, **features: Any) -> Iterator[None]:
        """Times one micro-batch: run its forward and backward inside.

        Args:
            features: what :meth:`microbatch.cost.Calibrator.observe` takes
                besides the times (``text_tokens``, ``image_tokens``,
                ``image_units``, ...): the micro-batch's samples, passed on as given.

        Raises:
            SettingError: a micro-batch inside another one.
        """
        if self._current is not None:
            raise SettingError("micro_batch inside another micro_batch: time one at a time", item="micro_batch")
        rec = _Record(dict(features))
        self._current = rec
        rec.start = self._clock.mark()
        try:
            yield
            rec.end = self._clock.mark()
            self._pending.append(rec)
        finally:
            self._current = None

    def collect(self) -> List[MicroBatchTime]:
        """The rows of the micro-batches timed since the last call, in order (synchronizes CUDA once)."""
        if self._clock.cuda:
            torch.cuda.synchronize(self._clock.device)
        rows = [self._row(rec) for rec in self._pending]
        self._pending = []
        return rows

    @staticmethod
    def observe(calibrator: Any, rows: Sequence[MicroBatchTime]) -> None:
        """Gives every row to ``calibrator`` in order (see :meth:`MicroBatchTime.observe`)."""
        for row in rows:
            row.observe(calibrator)

    def close(self) -> None:
        """Removes the hooks (the timer no longer times anything)."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> "PhaseTimer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _row(self, rec: _Record) -> MicroBatchTime:
        at = self._clock.since
        total = at(rec.start, rec.end)
        # Windows as (phase, enter, exit) in seconds from the start.
        windows: List[Tuple[str, float, float]] = []
        for phase, spans in rec.forward.items():
            windows += [(phase, at(rec.start, a), at(rec.start, b)) for a, b in spans]
        backward: List[Tuple[str, float, float]] = []
        for phase in ("vision", "language"):
            if phase in rec.bwd_start:
                a = at(rec.start, rec.bwd_start[phase])
                # The inputs' gradients when an input required grad, else the
                # parameters' (a tower fed pixels), else the end of the backward.
                ends = rec.bwd_end if rec.inputs.get(phase) else rec.acc_end
                b = at(rec.start, ends[phase]) if phase in ends else total
                backward.append((phase, a, max(a, b)))
        times = {p: [0.0, 0.0] for p in ("vision", "language")}
        for k, group in enumerate((windows, backward)):
            for phase, secs in _exclusive(group).items():
                times[phase][k] += secs
        spent = sum(sum(v) for v in times.values())
        return MicroBatchTime(
            vision_forward=times["vision"][0],
            vision_backward=times["vision"][1],
            language_forward=times["language"][0],
            language_backward=times["language"][1],
            other=max(total - spent, 0.0),
            total=total,
            features=rec.features,
        )


def _exclusive(windows: Sequence[Tuple[str, float, float]]) -> Dict[str, float]:
    """Each phase's time in the windows, time covered by several counted once, for the innermost.

    The innermost window at a time is the one entered last among those open
    (a window nested in another, or the later of two that overlap). A sweep
    over the sorted window edges: O(w^2) for w windows (a few a micro-batch).
    """
    edges = sorted({t for _, a, b in windows for t in (a, b)})
    out: Dict[str, float] = {}
    for lo, hi in zip(edges, edges[1:]):
        open_ = [(a, i, phase) for i, (phase, a, b) in enumerate(windows) if a <= lo and b >= hi]
        if open_:
            phase = max(open_)[2]  # entered last; ties by order
            out[phase] = out.get(phase, 0.0) + (hi - lo)
    return out
