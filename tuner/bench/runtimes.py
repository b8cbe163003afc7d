"""The runtimes bench times beside TuneFarm (:data:`RUNTIMES`): torch.compile of a ``.pt2``
model's exported program, ONNX Runtime on an ``.onnx`` file or on the ``.pt2``'s ONNX export;
each prepared, run and timed before any TVM kernel, or the one-line reason it did not run."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from database.errors import error_summary
from tuner.bench.results import RuntimeResult, shape_label
from tuner.bench.timing import compare_outputs, interleave
from tuner.errors import TuneFarmError
from tuner.kernel_profile import time_per_call
from tuner.model import Model

# The other runtimes bench can time beside TuneFarm (the model formats each one runs).
RUNTIMES = ("torch.compile", "onnxruntime")
_RUNS = {"torch.compile": (".pt2",), "onnxruntime": (".pt2", ".onnx")}


def runtimes_for(model: Model) -> tuple[str, ...]:
    """The other runtimes that can run ``model``'s format (torch.compile: .pt2; ORT: .pt2
    through its ONNX export, and .onnx)."""
    return tuple(n for n in RUNTIMES if model.path.suffix in _RUNS[n])


@dataclass
class OtherRuntime:
    """Another runtime while bench runs: its runner, or why it cannot run."""

    name: str
    fn: Callable[..., list[np.ndarray]] | None = None
    error: str | None = None
    setup_sec: float | None = None
    outs: dict[int, list[np.ndarray]] = field(default_factory=dict)
    warmup: dict[int, float] = field(default_factory=dict)
    sec: dict[int, tuple[float, float]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)


def _one_line(err: BaseException) -> str:
    if isinstance(err, TuneFarmError):
        return error_summary(err, with_type=False)
    from tuner.frontends.torch import root_cause

    return root_cause(err)


def _program(model: Model) -> Any:
    """The exported program of a ``.pt2`` model: the reference's own, else loaded again."""
    program = getattr(getattr(model.reference, "fn", None), "program", None)
    if program is not None:
        return program
    from tuner.frontends.torch import load_program

    return load_program(model.path)


def prepare_runtimes(
    model: Model, names: Sequence[str], threads: int, tmp: str
) -> list[OtherRuntime]:
    """A runner for each of ``names`` (compiled lazily: torch.compile compiles at the first
    call), or the one-line reason it cannot run."""
    others = []
    for name in names:
        other = OtherRuntime(name)
        start = time.perf_counter()
        try:
            if model.path.suffix not in _RUNS[name]:
                raise TuneFarmError(f"runs {' and '.join(_RUNS[name])} models only")
            if name == "torch.compile":
                from tuner.frontends.torch import compiled_runner

                other.fn = compiled_runner(_program(model))
            else:
                try:
                    import onnxruntime  # noqa: F401
                except ImportError:
                    raise TuneFarmError("not installed: pip install 'tunefarm[ort]'") from None
                from tuner.frontends.onnx import ort_runner

                path = model.path
                if model.path.suffix == ".pt2":
                    from tuner.frontends.torch import export_onnx

                    path = export_onnx(_program(model), Path(tmp) / "model.onnx")
                other.fn = ort_runner(path, threads)
            other.setup_sec = time.perf_counter() - start
        except Exception as err:
            other.error = _one_line(err)
        others.append(other)
    return others


RefRun = tuple[list[np.ndarray], float, float]  # the reference's outputs, time and spread


def run_others(
    reference: Callable[..., list[np.ndarray]] | None,
    others: list[OtherRuntime],
    runs: list[tuple[dict[str, int], list[np.ndarray]]],
    repeat: int,
    min_sec: float,
) -> tuple[list[RefRun | None], list[dict[str, Callable[[], float]]]]:
    """Run and time the reference and the other runtimes at each shape, interleaved, before
    any TVM kernel: per shape the reference's outputs and time (None without a reference),
    and the timers of those that ran there (the reference's under ``""``), which time them
    again beside TVM (:func:`time_paired`); the others' outputs, warm-up and times are kept in
    them."""
    refs: list[RefRun | None] = []
    shape_timers: list[dict[str, Callable[[], float]]] = []
    for i, (shape, args) in enumerate(runs):
        timers: dict[str, Callable[[], float]] = {}
        ref_out = None
        if reference is not None:
            ref_out = reference(*args)  # also the warm-up call
            timers[""] = lambda fn=reference, a=args: time_per_call(fn, a, min_sec)
        for other in others:
            if other.fn is None:
                continue
            start = time.perf_counter()
            try:
                other.outs[i] = other.fn(*args)
            except Exception as err:
                other.errors[i] = _one_line(err)
                if not other.outs:  # never ran: the same failure at every shape
                    other.error = f"failed at {shape_label(shape)}: {other.errors[i]}"
                    other.fn = None
                continue
            other.warmup[i] = time.perf_counter() - start
            timers[other.name] = lambda fn=other.fn, a=args: time_per_call(fn, a, min_sec)
        medians = interleave(timers, repeat)
        for other in others:
            if other.name in medians:
                other.sec[i] = medians[other.name]
        refs.append((ref_out, *medians[""]) if ref_out is not None else None)
        shape_timers.append(timers)
    return refs, shape_timers


def runtime_result(other: OtherRuntime, i: int, expected: list[np.ndarray]) -> RuntimeResult:
    if i not in other.outs:
        return RuntimeResult(other.name, error=other.errors.get(i) or other.error)
    try:
        max_err, agree = compare_outputs(other.outs[i], expected)
        error = None
    except TuneFarmError as err:
        max_err, agree, error = None, False, str(err)
    sec, spread = other.sec.get(i, (None, None))
    return RuntimeResult(
        other.name,
        sec=sec,
        spread=spread,
        max_abs_err=max_err,
        agree=agree,
        warmup_sec=other.warmup.get(i),
        setup_sec=other.setup_sec,
        error=error,
    )
