"""The known matrix-vector schedule (:mod:`tuner.search.matvec`): which kernels get it, that
it survives a search state's seed path (replayed, post-processed) and computes what the
untuned kernel does, and that a job's first round measures it."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import tvm
from tvm import tirx

from tests.tuner.search.products import product_kernel as _kernel
from tests.tuner.search.products import spaces as _spaces
from tuner.search.matvec import matvec_block, matvec_traces
from tuner.search.task import ModelSpec, TaskSearch, TaskSpec


def test_only_a_matrix_vector_product_gets_the_tiling(llvm_target) -> None:
    assert matvec_block(_kernel(1, 128, 64)["main"]) == (64, 128)
    assert matvec_block(_kernel(1, 128, 64, bias=True)["main"]) == (64, 128)  # an epilogue
    assert matvec_block(_kernel(16, 128, 64)["main"]) is None  # a prefill's matrix product
    assert matvec_block(_kernel(1, 32, 64)["main"]) is None  # too small to be worth it
    n = tirx.Var("n", "int64")
    x = tvm.te.placeholder((1, n), name="x")
    r = tvm.te.reduce_axis((0, n), name="r")
    total = tvm.te.compute((1, 64), lambda i, j: tvm.te.sum(x[i, r], axis=r), name="s")
    assert matvec_block(tvm.te.create_prim_func([x, total])) is None  # a symbolic reduction
    prefill = _kernel(16, 128, 64)
    assert matvec_traces(prefill["main"], _spaces(prefill, llvm_target), threads=2) == []


def test_the_tilings_are_decisions_of_the_searchs_own_sketch(llvm_target) -> None:
    """Each variant that divides N, as the sketch's decisions (so the search can mutate it):
    N in one block per core of 16 lanes or four of 8, eight rows of K at a time."""
    mod = _kernel(1, 256, 128)
    traces = matvec_traces(mod["main"], _spaces(mod, llvm_target), threads=2)
    tiles = [
        [[int(v) for v in t.decisions[i]] for i in t.insts if i.kind.name == "SamplePerfectTile"]
        for t in traces
    ]
    assert [t[-2:] for t in tiles] == [[[2, 1, 4, 16], [32, 8]], [[8, 1, 2, 8], [32, 8]]]
    assert all(all(d == [1, 1, 1, 1] for d in t[:-2]) for t in tiles)  # the unit loops
    narrow = _kernel(1, 100, 96)  # 96 columns: 2 x 16 divides, 8 x 8 does not; 100 rows by 4
    (one,) = matvec_traces(narrow["main"], _spaces(narrow, llvm_target), threads=2)
    assert [int(v) for v in one.decisions[_last_tile(one)]] == [25, 4]


def _last_tile(trace: Any) -> Any:
    return [i for i in trace.insts if i.kind.name == "SamplePerfectTile"][-1]


@pytest.mark.parametrize(("rows", "bias"), [(1, False), (1, True), (16, False), (16, True)])
def test_a_new_task_measures_them_first_and_they_compute_the_product(
    llvm_target, rows: int, bias: bool
) -> None:
    """A search state of a task without records (what a job's first round measures): the
    tilings lead its first round (a matrix-vector product's, or at 16 rows a matrix
    product's: tuner.search.gemm), built they equal numpy's product; with records, none."""
    mod = _kernel(rows, 256, 128, bias=bias)

    def spec(records: list[Any]) -> TaskSpec:
        return TaskSpec(
            task_id=0, name="mv", mod_json=tvm.ir.save_json(mod), records=records,
            max_trials=8, per_round=4, population=16, seed=0, tiling_threads=2,
        )  # fmt: skip

    search = TaskSearch(spec([]), llvm_target, ModelSpec("random", seed=0).create(1), threads=1)
    first = search.generate()
    assert first is not None and len(first) == 2  # the two tilings, nothing else in their round
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, rows, 256)).astype("float32")
    w = rng.standard_normal((256, 128)).astype("float32")
    b = rng.standard_normal(128).astype("float32")
    want = x @ w + (b if bias else 0)
    dev = tvm.cpu()
    for cand in first:
        assert '"SamplePerfectTile"' in json.dumps(cand.trace_json)  # mutable by the search
        lib = tvm.tirx.build(tvm.ir.load_json(cand.mod_json), llvm_target)
        args = [tvm.runtime.tensor(a, dev) for a in ((x, w, b) if bias else (x, w))]
        out = tvm.runtime.tensor(np.zeros((1, rows, 128), "float32"), dev)
        lib["main"](*args, out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
    search.notify([([1e-3], None), ([2e-3], None)])
    (best, *_) = search.db.get_top_k(search.workload, 1)
    record = json.loads(json.dumps(best.as_json(), default=float))
    again = TaskSearch(
        spec([record]), llvm_target, ModelSpec("random", seed=0).create(1), threads=1
    )
    assert not again._first  # a task with records has its history, not the tilings
