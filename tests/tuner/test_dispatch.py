"""Symbolic builds: bucket dispatch is right for every value and observably picks kernels."""

from __future__ import annotations

import pytest
import tvm

from database import Storage, TuneFarmDatabase
from tests.conftest import DATA
from tuner.bench import bench, sweep_values
from tuner.compile import apply_database, compile
from tuner.dispatch import BucketKernel, add_dispatch, choose_intervals
from tuner.errors import TuneFarmError
from tuner.model import load_model
from tuner.pipeline import normalize, prepare
from tuner.rangekernel import pad_kernel, pads_safely, symbolic_var

MODEL = DATA / "dyn_kernels.py"


def test_pads_safely_only_without_reduction_over_the_variable(llvm_target) -> None:
    prepared = prepare(load_model(MODEL).mod, llvm_target)
    assert pads_safely(normalize(prepared["fused_matmul_add_relu"])["main"], "n")
    assert pads_safely(normalize(prepared["matmul1"])["main"], "n")  # n x n, both spatial
    assert not pads_safely(normalize(prepared["softmax"])["main"], "n")  # softmax over n


def test_pad_kernel_replaces_the_dim_by_a_tile_multiple(llvm_target) -> None:
    func = normalize(prepare(load_model(MODEL).mod, llvm_target)["fused_matmul_add_relu"])["main"]
    var = symbolic_var(func)
    padded = pad_kernel(func, var.name, 8)
    script = padded.script()
    assert "m * T.int64(8)" in script and "m: T.int64" in script
    assert symbolic_var(padded).name == "m"


def test_sweep_values_cover_on_and_off_bucket() -> None:
    assert sweep_values([1, 8, 32]) == [1, 5, 8, 21, 32, 65]
    assert sweep_values([16, 64, 128], bound=256) == [16, 41, 64, 97, 128, 256]
    assert sweep_values([1, 8], bound=8) == [1, 5, 8]  # nothing above the bound


def test_dispatch_intervals_pick_the_cheapest_padded_kernel() -> None:
    b1 = BucketKernel(1, 1, "k_n1", "exact", 10e-6)  # 10 us per row
    b8 = BucketKernel(8, 8, "k_n8", "exact", 40e-6)  # 5 us per row, but pads to 8 rows
    b32 = BucketKernel(32, 16, "k_n32", "exact", 96e-6)  # 3 us per row, tile 16
    got = [(upper, bk.value) for upper, bk in choose_intervals((b1, b8, b32))]
    # v<=4: 10v us vs 40 us (a tie at 4 goes to the smaller bucket); v=5..8: b8 at 40 us
    # beats b32's 16 padded rows (48 us); v=9..32: b32 (3 us a row, tile 16) beats b8
    assert got == [(4, 1), (8, 8), (32, 32)]


@pytest.mark.slow
@pytest.mark.ray
def test_correct_for_every_value_and_dispatch_is_observable(dyn_tuned_db, llvm_target) -> None:
    model = load_model(MODEL)
    db = TuneFarmDatabase(Storage(dyn_tuned_db, create=False))
    values = [1, 2, 3, 4, 5, 7, 13, 16, 17, 40]  # n=1, primes, buckets, above the largest
    results = bench(model, llvm_target, db, [{"n": v} for v in values], repeat=1, min_repeat_ms=1)
    for value, res in zip(values, results, strict=True):
        assert res.agree, (value, res.max_abs_err)  # matmul+bias+relu, softmax over n, n x n
        assert res.reference == "numpy"
    # what ran (observed through the VM's instrument) is what the dispatch rule says
    _, plans = add_dispatch(prepare(model.mod, llvm_target), llvm_target, db)
    observed = set()
    for value, res in zip(values, results, strict=True):
        for kernel, ran in res.kernels.items():
            expected = next(
                (f"n{bk.value}" for upper, bk in plans[kernel].intervals if value <= upper),
                "generic",
            )
            assert ran == expected, (kernel, value, ran, expected)
            observed.add((kernel, ran))
    assert all(r.kernels["softmax"] == "generic" for r in results)
    assert all(r.kernels["fused_matmul_add_relu"] == "generic" for r in results[-2:])
    assert any(ran != "generic" for _, ran in observed)  # bucket kernels do run
    per_kernel = {}
    for kernel, ran in observed:
        per_kernel.setdefault(kernel, set()).add(ran)
    assert max(len(v) for v in per_kernel.values()) >= 2  # one kernel, different variants


@pytest.mark.slow
@pytest.mark.ray
def test_range_kernels_are_predicate_free_and_reported(dyn_tuned_db, llvm_target) -> None:
    model = load_model(MODEL)
    db = TuneFarmDatabase(Storage(dyn_tuned_db, create=False))
    applied = apply_database(model.mod, llvm_target, db)
    ranges = [
        (gv.name_hint, f)
        for gv, f in applied.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint.endswith(("_n4", "_n16"))
    ]
    assert any(name.startswith("fused_matmul_add_relu") for name, _ in ranges)
    for name, func in ranges:
        assert "T.where" not in func.script(), name
    _, report = compile(model.mod, llvm_target, db)
    by_name = {k.name: k for k in report.kernels}
    assert by_name["fused_matmul_add_relu"].source == "buckets"
    rule = by_name["fused_matmul_add_relu"].dispatch
    assert rule.startswith("n=1..") and "generic above" in rule
    assert by_name["softmax"].source == "untuned"
    assert "reduces over n" in by_name["softmax"].dispatch
    with pytest.raises(TuneFarmError, match="softmax"):
        compile(model.mod, llvm_target, db, strict=True)
