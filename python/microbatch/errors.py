"""The exceptions of ``microbatch``.

Every error of the Rust crate reaches Python as one of these classes, with the
crate's message (which says what to fix), the crate's variant name in
:attr:`Error.kind` and the offending item in :attr:`Error.item`: an index into
the input (an item, a row, a dimension, a part), a sample id, or the name of a
parameter or setting. Every class but :class:`InternalError` is a
:class:`ValueError`: the input is at fault.

Hierarchy::

    Error (Exception)
    +-- InternalError (RuntimeError)     a bug in microbatch: please report it
    +-- InputError (ValueError)          the input is at fault
        +-- DtypeError (TypeError)       an array of the wrong dtype or shape
        +-- InvalidValueError            NaN, negative, infinite, zero where not allowed
        +-- CapacityError                a capacity without dimensions, zero or invalid
        +-- OversizeError                an item (a sample) larger than the capacity
        +-- DuplicateIdError             two samples with the same id
        +-- SettingError                 a setting or name that does not work
        +-- InfeasibleError              no solution within the constraints
        +-- FitError                     a calibration that cannot be fitted
        +-- LimitError                   past a documented resource limit

Example:

>>> import microbatch
>>> try:
...     microbatch.Planner("no-such-model", ranks=2, seq_len=4096)
... except microbatch.SettingError as e:
...     print(e.kind, isinstance(e, ValueError))
UnknownName True
"""

from __future__ import annotations

from typing import Optional, Union

__all__ = [
    "Error",
    "InternalError",
    "InputError",
    "DtypeError",
    "InvalidValueError",
    "CapacityError",
    "OversizeError",
    "DuplicateIdError",
    "SettingError",
    "InfeasibleError",
    "FitError",
    "LimitError",
]

Item = Union[int, str, None]


class Error(Exception):
    """The base of every exception raised by ``microbatch``.

    Attributes:
        kind: the Rust crate's error variant (``"Oversize"``, ``"DuplicateId"``,
            ...), ``"Binding"`` for a check made by the Python package itself.
        item: the offending item: an index into the input, a sample id, or a
            parameter name; ``None`` when the error is about the whole input.
    """

    def __init__(self, message: str, *, kind: str = "Binding", item: Item = None) -> None:
        super().__init__(message)
        self.kind: str = kind
        self.item: Item = item

    def __reduce__(self):  # picklable across DataLoader workers and processes
        return (_rebuild, (type(self), str(self), self.kind, self.item))


def _rebuild(cls, message: str, kind: str, item: Item) -> "Error":
    return cls(message, kind=kind, item=item)


class InternalError(Error, RuntimeError):
    """A bug in ``microbatch`` (a Rust panic caught at the boundary): please report it."""


class InputError(Error, ValueError):
    """The input is at fault; the message says what to fix."""


class DtypeError(InputError, TypeError):
    """An array of the wrong dtype, dimensionality or shape."""


class InvalidValueError(InputError):
    """A value that is NaN, negative, infinite, or zero where it must not be."""


class CapacityError(InputError):
    """A capacity (or cap) without dimensions, zero, negative or infinite, or of another dimensionality than the items."""


class OversizeError(InputError):
    """An item (a sample) larger than the capacity (a packed sequence) in some dimension."""


class DuplicateIdError(InputError):
    """Two samples of one step with the same id (:attr:`Error.item`)."""


class SettingError(InputError):
    """A setting, count or name that does not work with this input."""


class InfeasibleError(InputError):
    """No solution was found within the constraints (a cap, a micro-step count)."""


class FitError(InputError):
    """Calibration rows from which the coefficients cannot be fitted."""


class LimitError(InputError):
    """The input is past a documented resource limit (a sum beyond ``f64``, a cost that overflows)."""
