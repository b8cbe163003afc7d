"""The pad and crop copies of a bucket branch: real TVM builds, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, tirx

from tuner.symbolic.padding import CopyKernels


def _round_trip(shape_of, axes: list[int], value: float, target) -> relax.VirtualMachine:
    """``main(x, shape(p))``: x padded with ``value`` to ``p`` along ``axes`` and, separately,
    that padded tensor cropped back to x's extent."""
    s, p = tirx.Var("s", "int64"), tirx.Var("p", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape_of(s), "float32"))
    copies = CopyKernels(bb)
    with bb.function("main", [x, relax.Var("pp", relax.ShapeType([p]))]):
        with bb.dataflow():
            wide = copies.pad(bb, x, {a: p for a in axes}, value)
            back = bb.emit(copies.crop(wide, {a: s for a in axes}))
            # the same layout again: the same two kernels
            again = copies.pad(bb, back, {a: p for a in axes}, value)
            out = bb.emit_output(
                relax.Tuple([wide, bb.emit(copies.crop(again, {a: s for a in axes}))])
            )
        bb.emit_func_output(out)
    mod = bb.get()
    assert sorted(
        f.attrs["tunefarm.copy"]
        for f in mod.functions.values()
        if "tunefarm.copy" in (f.attrs or {})
    ) == ["crop", "pad"]
    return relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())


@pytest.mark.parametrize(
    ("shape_of", "axes", "value"),
    [
        (lambda s: [1, s, 128], [1], 0.0),
        (lambda s: [2, 64, s], [2], 0.0),
        (lambda s: [1, 2, s, s], [2, 3], float("-inf")),
    ],
    ids=["rows", "inner", "both-inf"],
)
def test_pad_then_crop_matches_numpy(shape_of, axes, value, llvm_target) -> None:
    vm = _round_trip(shape_of, axes, value, llvm_target)
    rng = np.random.default_rng(0)
    for v, p in [(1, 8), (5, 8), (8, 8), (13, 64)]:
        x = rng.random(shape_of(v), dtype=np.float32)
        wide, back = vm["main"](tvm.runtime.tensor(x), tvm.runtime.ShapeTuple([p]))
        expected = np.full(shape_of(p), value, np.float32)
        expected[tuple(slice(0, v) if i in axes else slice(None) for i in range(x.ndim))] = x
        np.testing.assert_array_equal(wide.numpy(), expected)
        np.testing.assert_array_equal(back.numpy(), x)
