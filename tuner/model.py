"""Loading a model: a Python/TVMScript file defining an IRModule, an IRModule as JSON, an ONNX
file (``.onnx``) or a PyTorch exported program (``.pt2``).

:func:`load_model` is the single entry point every command (tune, build, bench, submit) uses;
the formats themselves live in :mod:`tuner.frontends`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tvm

from tuner.errors import TuneFarmError
from tuner.frontends.reference import Reference
from tuner.modelfile import MODEL_SUFFIXES, check_model_path  # noqa: F401 (light, no TVM)


@dataclass(frozen=True)
class Model:
    """A loaded model: the IRModule plus optional helpers.

    ``numpy_reference(*inputs)`` is a TVMScript file's numpy implementation; ``reference`` is
    the implementation ``bench`` checks against (numpy for TVMScript files, PyTorch for
    ``.pt2``; none for ONNX and JSON, where the untuned build is the reference).
    ``shape_vars`` maps symbolic variable names to default bucket values (``SHAPE_VARS`` in
    the file). ``params`` are weights kept as inputs: the trailing parameters of ``main``.
    """

    path: Path
    mod: tvm.IRModule
    numpy_reference: Callable[..., Any] | None = None
    shape_vars: dict[str, list[int]] = field(default_factory=dict)
    params: tuple[np.ndarray, ...] = ()
    reference: Reference | None = None

    def __post_init__(self) -> None:
        if self.reference is None and self.numpy_reference is not None:
            from tuner.frontends.reference import flat_outputs

            ref = self.numpy_reference
            object.__setattr__(
                self, "reference", Reference("numpy", lambda *a: flat_outputs(ref(*a)))
            )

    @property
    def num_inputs(self) -> int:
        """How many leading parameters of ``main`` are data inputs (the rest are weights)."""
        return len(self.mod["main"].params) - len(self.params)


def load_model(path: str | Path, entry: str = "Module", *, keep_params: bool = False) -> Model:
    """Load ``path``: ``.py`` with an IRModule named ``entry``, ``.json``, ``.onnx`` or ``.pt2``.

    ONNX and PyTorch weights are bound as constants unless ``keep_params`` (then they stay
    inputs of ``main`` and ``Model.params`` holds their values).
    """
    from tuner import frontends

    path = Path(path)
    check_model_path(path)
    if path.is_dir():
        from tuner.llm.runtime import decoder_model

        return decoder_model(path)
    if keep_params and path.suffix not in (".onnx", ".pt2"):
        raise TuneFarmError("--keep-params applies to .onnx and .pt2 models only")
    imported = frontends.load(path, entry=entry, keep_params=keep_params)
    return Model(
        path=path,
        mod=imported.mod,
        numpy_reference=imported.numpy_reference,
        shape_vars=imported.shape_vars,
        params=imported.params,
        reference=imported.reference,
    )
