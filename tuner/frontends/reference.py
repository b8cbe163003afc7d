"""What a frontend returns: :class:`Imported` (the Relax module and what came with it) and
:class:`Reference` (an implementation to check a build against)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm


@dataclass(frozen=True)
class Reference:
    """An implementation to check a build against: ``fn(*inputs)`` returns the outputs as a
    flat list of arrays; ``name`` says what it is (``numpy``, ``pytorch``)."""

    name: str
    fn: Callable[..., list[np.ndarray]]


def flat_outputs(value: Any) -> list[np.ndarray]:
    """A function's outputs as a flat list of numpy arrays: an array (numpy, or anything with
    ``.numpy()``: a TVM tensor) or nested sequences of them (tuples, lists, a VM's tuple)."""
    if hasattr(value, "numpy"):
        return [np.asarray(value.numpy())]
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (tuple, list)) or (hasattr(value, "__iter__") and not np.isscalar(value)):
        return [a for item in value for a in flat_outputs(item)]
    return [np.asarray(value)]


@dataclass(frozen=True)
class Imported:
    """What a frontend made of a model file.

    ``params`` are the weights when they are kept as inputs (the trailing parameters of
    ``main``, in order); ``reference.fn(*inputs)`` runs the original model on numpy data
    inputs and returns its outputs flattened to a list. A TVMScript file may also give its
    plain ``numpy_reference`` and default bucket values per symbolic variable
    (``shape_vars``, its ``SHAPE_VARS``).
    """

    mod: tvm.IRModule
    params: tuple[np.ndarray, ...] = ()
    reference: Reference | None = None
    numpy_reference: Callable[..., Any] | None = None
    shape_vars: dict[str, list[int]] = field(default_factory=dict)
