"""Symbolic builds: bucket dispatch is right for every value and observably picks kernels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tvm

from database import Storage, TuneFarmDatabase, shash_of
from tests.conftest import DATA, store_bucket_record
from tuner.bench.run import bench, sweep_values
from tuner.compile import apply_database, compile
from tuner.errors import TuneFarmError
from tuner.model import load_model
from tuner.pipeline import normalize, prepare
from tuner.planner import Planner
from tuner.symbolic.dispatch.emit import add_dispatch
from tuner.symbolic.dispatch.rule import (
    BucketKernel,
    KernelDispatch,
    PadBuffer,
    choose_intervals,
    pick_kernel,
)
from tuner.symbolic.profile import ShapeProfile
from tuner.symbolic.rangekernel import (
    kernel_class,
    pad_kernel,
    pad_values,
    symbolic_var,
    work_degree,
)

MODEL = DATA / "dyn_kernels.py"


def test_pad_values_leave_every_reduction_unchanged(llvm_target) -> None:
    prepared = prepare(load_model(MODEL).mod, llvm_target)

    def pads(name: str) -> dict[str, float] | None:
        return pad_values(normalize(prepared[name])["main"], "n")

    assert pads("fused_matmul_add_relu") == {"x": 0.0}  # n only data parallel
    assert pads("matmul1") == {"h": 0.0, "lv4": 0.0}  # n x n, both spatial
    # softmax over n: the max ignores -inf, exp(-inf - max) = 0 leaves the sum unchanged
    assert pads("softmax") == {"h": float("-inf")}
    assert work_degree(normalize(prepared["fused_matmul_add_relu"])["main"], "n") == 1
    assert work_degree(normalize(prepared["matmul1"])["main"], "n") == 2
    # the planner's gain curves differ by kernel class
    assert kernel_class(prepared["fused_matmul_add_relu"]) == "contraction"
    assert kernel_class(prepared["matmul1"]) == "contraction"
    assert kernel_class(prepared["softmax"]) == "reduction"
    from tvm import te

    a = te.placeholder((8, 4), name="A")
    transpose = te.compute((4, 8), lambda i, j: a[j, i], name="T")
    assert kernel_class(te.create_prim_func([a, transpose])) == "injective"


def test_pad_values_of_reductions_over_n() -> None:
    from tvm import te, tirx

    n = tirx.Var("n", "int64")
    a = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    inf = float("inf")
    cases = [
        (lambda i: te.sum(a[i, k] * a[i, k], axis=k), {"A": 0.0}),
        (lambda i: te.sum(te.exp(a[i, k]), axis=k), {"A": -inf}),  # exp(-inf) = 0
        (lambda i: te.max(a[i, k], axis=k), {"A": -inf}),
        (lambda i: te.min(a[i, k], axis=k), {"A": inf}),
        (lambda i: te.sum(te.exp(a[i, k]) * a[i, k], axis=k), {"A": 0.0}),  # exp(0) * 0
        (lambda i: te.sum(a[i, k] + 1.0, axis=k), None),  # no pad value adds nothing
        (lambda i: te.sum(te.exp(a[i, k]) + a[i, k], axis=k), None),  # 1, -inf, +inf
    ]
    for body, expected in cases:
        out = te.compute((n,), body, name="R")
        assert pad_values(normalize(te.create_prim_func([a, out]))["main"], "n") == expected


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
    # the generic kernel competes where its time was measured: 56 us at 8 (7 us a row), 320 us
    # at 32 (10 us a row); at v its cost is the least over buckets >= v of the time scaled by
    # rows (7v up to 8, 10v above), and a bucket kernel must be GENERIC_MARGIN (1.25x) cheaper
    # to replace it. v<=7: 7v <= 1.25 * 40 (b8); v=8: 56 > 50; v=9..32: 10v > 1.25 * b32's 48
    # (16 padded rows) or 96 (32 rows)
    got = [
        (upper, bk.value if bk else None)
        for upper, bk in choose_intervals((b1, b8, b32), ((8, 56e-6), (32, 320e-6)))
    ]
    assert got == [(7, None), (8, 8), (32, 32)]


def test_dispatch_intervals_scale_by_work_degree_and_prefer_static_on_ties() -> None:
    rk = BucketKernel(16, 8, "k_n16", "exact", 10e-6)  # range kernel, tile 8
    static = BucketKernel(16, 16, "k_n16_static", "exact", 10e-6, static=True)
    # v <= 8: the range kernel computes 8 of 16 rows (5 us) < the static 10 us; 9..16: both
    # do the bucket's work, the tie goes to the static kernel; above 16 only a range kernel
    # is valid
    got = [(upper, bk.name) for upper, bk in choose_intervals((rk, static))]
    assert got == [(8, "k_n16"), (16, "k_n16_static")]
    assert KernelDispatch("k", "n", (rk, static)).above is rk
    # an s x s kernel (degree 2): the generic kernel, 60 us at 16, costs 60 * (v/16)^2; a
    # range kernel of 40 us at 16 costs 40 * (padded/16)^2, to beat by 1.25x. v<=7: at most
    # 11.5 <= 1.25 * 10; v=8: 15 > 12.5; v=9..14: at most 45.9 <= 1.25 * 40; v=15: 52.7 > 50
    rk40 = BucketKernel(16, 8, "k_n16", "exact", 40e-6)
    got = [
        (upper, bk.name if bk else None)
        for upper, bk in choose_intervals((rk40,), ((16, 60e-6),), degree=2)
    ]
    assert got == [(7, None), (8, "k_n16"), (14, None), (16, "k_n16")]
    # a kernel's time is not scaled below CALL_FLOOR_SEC: 8 us at 16 rows, tile 1, is 5 us at
    # one row, not 0.5 (thread-pool wake-up); the generic kernel (1 us a row) serves there
    tiny = BucketKernel(16, 1, "k_n16", "exact", 8e-6)
    got = [(upper, bk and bk.name) for upper, bk in choose_intervals((tiny,), ((16, 16e-6),))]
    assert got == [(6, None), (16, "k_n16")]


def test_the_generic_time_measured_at_a_value_is_not_undercut_by_a_larger_bucket() -> None:
    """A decode step's k/v projection (0.5B Qwen2), memory-bound at one row: generic 118 us at
    prompt 1 and 5.1 ms at 256 (20 us a row, scaled down); the kernel tuned at 1 took 22.5 us.
    At 1 the generic kernel's own time counts (the kernel tuned there serves), not 256's
    scaled by 1/256; between buckets the scaled least still does."""
    tuned1 = BucketKernel(1, 1, "k_p1_static", "exact", 22.5e-6, static=True)
    tuned256 = BucketKernel(256, 64, "k_p256", "exact", 2.0e-3)
    generic = ((1, 118e-6), (256, 5.1e-3))
    assert pick_kernel((tuned1, tuned256), generic, 1, (), 1) is tuned1
    # at 100 (no bucket): the generic 256 time scaled, 1.99 ms, against the range kernel's
    # 128 padded rows, 1.0 ms; a range kernel no faster than 2.5 ms leaves 100 to generic
    assert pick_kernel((tuned1, tuned256), generic, 1, (), 100) is tuned256
    slow256 = BucketKernel(256, 64, "k_p256", "exact", 5.0e-3)  # no faster than generic
    assert pick_kernel((tuned1, slow256), generic, 1, (), 100) is None


def test_an_exact_static_kernel_serves_its_own_bucket_unpadded() -> None:
    """BERT's q @ k^T at s=16: tuned static kernel 1.8 us, its generic code measured at 16.6 us
    there. Padding two inputs and cropping the s x s output costs the padded static kernel
    ~1.5 us more: it serves 9..15 (below, the generic kernel's work shrinks as s^2); at 16
    the exact one (tile 1: called at 16 alone, nothing padded) is cheaper, and serves no
    other value."""
    buffers = (PadBuffer(128, 1), PadBuffer(128, 1), PadBuffer(2, 2, output=True))
    static = BucketKernel(16, 16, "k_s16_static", "target", 1.8e-6, static=True)
    exact = BucketKernel(16, 1, "k_s16_exact", "target", 1.8e-6, static=True)
    assert exact.exact and not static.exact and exact.label == "exact"
    assert exact.cost(16, 2, buffers) == pytest.approx(1.8e-6)
    assert exact.cost(15, 2, buffers) == exact.cost(17, 2, buffers) == float("inf")
    generic = ((16, 16.6e-6),)
    assert static.cost(16, 2, buffers) > exact.cost(16, 2, buffers)
    got = [(u, bk and bk.name) for u, bk in choose_intervals((static,), generic, 2, buffers)]
    assert got == [(8, None), (16, "k_s16_static")]
    got = [(u, bk and bk.name) for u, bk in choose_intervals((static, exact), generic, 2, buffers)]
    assert got == [(8, None), (15, "k_s16_static"), (16, "k_s16_exact")]
    assert KernelDispatch("k", "s", (static, exact), generic, 2, buffers).above is None


@pytest.mark.slow
@pytest.mark.ray
def test_the_tune_times_each_kernels_generic_code_and_the_build_weighs_it(
    dyn_tuned_db, llvm_target
) -> None:
    """The job times every one-variable kernel's generic code at each bucket's shapes (the
    static default schedule's time is not the generic kernel's: constant extents vectorize);
    the dispatch rule compares the bucket kernels with those times."""
    db = TuneFarmDatabase(Storage(dyn_tuned_db, create=False))
    prepared = prepare(load_model(MODEL).mod, llvm_target)
    _, plans = add_dispatch(prepared, llvm_target, db)
    profile = ShapeProfile(("n",), (((4,), 1), ((16,), 1)))
    planner = Planner(load_model(MODEL).mod, llvm_target, db, profile)
    timed = 0
    for name, func in prepared.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or symbolic_var(func) is None:
            continue
        family = shash_of(normalize(func))
        secs = [db.generic_sec(family, {"n": n}, llvm_target) for n in (4, 16)]
        assert all(sec is not None and 0 < sec < 1 for sec in secs), (name.name_hint, secs)
        timed += 1
        dispatch = plans[name.name_hint]
        if dispatch.buckets:  # the rule weighed the measured generic times, not the defaults
            assert sorted(dispatch.generic) == [(4, secs[0]), (16, secs[1])]
        # and the planner's model of the rule the same times
        km = planner.kernels[name.name_hint]
        assert [km.at[n].generic_est for n in (4, 16)] == secs
    assert timed >= 4  # matmul+relu, softmax, n x n scores, mean


@pytest.mark.slow
@pytest.mark.ray
def test_the_tune_times_each_range_kernel_and_the_build_prices_it_by_that(
    dyn_tuned_db, llvm_target
) -> None:
    """Each bucket's range kernels (its best record transplanted as the build does, and its
    fine variant where that pads to a smaller tile) are timed by the tune at the bucket and
    stored under their own hashes; the rule prices each range kernel by that time, not by its
    bucket's static kernel's."""
    from tuner.symbolic.dispatch.plan import bucket_workloads
    from tuner.symbolic.rangekernel import range_variants, rewrite_tiles, static_key

    db = TuneFarmDatabase(Storage(dyn_tuned_db, create=False))
    prepared = prepare(load_model(MODEL).mod, llvm_target)
    _, plans = add_dispatch(prepared, llvm_target, db)
    timed = 0
    for name, func in prepared.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or symbolic_var(func) is None:
            continue
        norm = normalize(func)["main"]
        if pad_values(norm, "n") is None:
            continue  # a mean over n: no range kernel, generic code only
        ranged = {bk.name: bk for bk in plans[name.name_hint].buckets if not bk.static}
        for bucket, static_mod, _ in bucket_workloads(db, norm, "n"):
            found = db.best(static_mod, llvm_target)
            if found is None or not any(
                i.kind.name != "EnterPostproc" for i in found[0].trace.insts
            ):
                continue
            trace = found[0].trace
            variants = range_variants(norm, trace, "n", rewrite_tiles(norm, trace, "n"))
            beside = variants and db.generic_sec(static_key(variants[0].key), bucket, llvm_target)
            for rk in variants:
                sec = db.generic_sec(rk.key, bucket, llvm_target)
                assert sec is not None and 0 < sec < 1, (name.name_hint, bucket, rk.tile)
                assert beside is not None and 0 < beside < 1, (name.name_hint, bucket)
                value = bucket["n"]
                padded = -(-value // rk.tile) * rk.tile
                degree = plans[name.name_hint].degree
                fine = "_fine" if rk is not variants[0] else ""
                bk = ranged[f"{name.name_hint}_n{value}{fine}"]
                assert bk.tile == rk.tile
                # the record's time times the range kernel's over the static one's, timed
                # together
                expected = found[2] * sec / beside * (value / padded) ** degree
                assert bk.mean_sec == pytest.approx(expected)
                timed += 1
    assert timed >= 2


@pytest.mark.slow
@pytest.mark.ray
def test_correct_for_every_value_and_dispatch_is_observable(dyn_tuned_db, llvm_target) -> None:
    model = load_model(MODEL)
    db = TuneFarmDatabase(Storage(dyn_tuned_db, create=False))
    values = [1, 2, 3, 4, 5, 7, 13, 16, 17, 40]  # n=1, primes, buckets, above the largest
    results = bench(model, llvm_target, db, [{"n": v} for v in values], repeat=1, min_repeat_ms=1)
    for value, res in zip(values, results, strict=True):
        assert res.agree, (value, res.max_abs_err)  # matmul+relu, softmax, n x n, mean
        assert res.reference == "numpy"
    # what ran (observed through the VM's instrument) is what the dispatch rule says
    _, plans = add_dispatch(prepare(model.mod, llvm_target), llvm_target, db)
    observed = set()
    for value, res in zip(values, results, strict=True):
        for kernel, ran in res.kernels.items():
            above = plans[kernel].above
            expected = next(
                (
                    bk.name[len(kernel) + 1 :] if bk else "generic"
                    for upper, bk in plans[kernel].intervals
                    if value <= upper
                ),
                above.name[len(kernel) + 1 :] if above else "generic",
            )
            assert ran == expected, (kernel, value, ran, expected)
            observed.add((kernel, ran))
    assert all(r.kernels["mean"] == "generic" for r in results)  # divides by n: never padded
    # above the largest bucket a range kernel still serves (when its time per row beats the
    # generic kernel's): range kernels are valid for every value
    kernel = "fused_matmul_add_relu"
    top = plans[kernel].above
    assert all(
        r.kernels[kernel] == (top.name[len(kernel) + 1 :] if top else "generic")
        for r in results[-2:]
    )
    assert top is None or not top.static
    assert any(ran != "generic" for _, ran in observed)  # bucket kernels do run
    # which variants run depends on this run's measured costs (the rule's choices are
    # unit-tested in test_dispatch_intervals_pick_the_cheapest_padded_kernel); every call
    # above ran exactly the variant the rule names for its value


@pytest.mark.slow
@pytest.mark.ray
def test_range_kernels_are_predicate_free_and_reported(dyn_tuned_db, llvm_target) -> None:
    model = load_model(MODEL)
    db = TuneFarmDatabase(Storage(dyn_tuned_db, create=False))
    applied = apply_database(model.mod, llvm_target, db)
    ranges = [
        (gv.name_hint, f)
        for gv, f in applied.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc)
        and gv.name_hint.removesuffix("_fine").endswith(("_n4", "_n16"))
    ]
    assert any(name.startswith("fused_matmul_add_relu") for name, _ in ranges)
    for name, func in ranges:
        assert "T.where" not in func.script(), name
    _, report = compile(model.mod, llvm_target, db)
    by_name = {k.name: k for k in report.kernels}
    assert by_name["fused_matmul_add_relu"].source == "buckets"
    rule = by_name["fused_matmul_add_relu"].dispatch
    assert rule.startswith("n=1") and "above 16: " in rule and ": n" in rule  # a bucket runs
    assert by_name["mean"].source == "untuned"
    assert "reduces over n" in by_name["mean"].dispatch
    with pytest.raises(TuneFarmError, match="mean"):
        compile(model.mod, llvm_target, db, strict=True)


def _pv(n: object) -> tvm.IRModule:
    """``probs @ V``: a sum over the symbolic axis of products of two inputs."""
    from tvm import te

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, 16), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return normalize(te.create_prim_func([a, b, c]))


def test_sum_of_products_over_n_gets_a_correct_range_kernel(llvm_target) -> None:
    from tvm import tirx

    from tuner.fastimport import preload_tensor_intrin
    from tuner.symbolic.rangekernel import transplant

    n = tirx.Var("n", "int64")
    sym = _pv(n)["main"]
    assert pad_values(sym, "n") == {"A": 0.0, "B": 0.0}

    preload_tensor_intrin()
    from tvm.s_tir import meta_schedule as ms

    static = _pv(32)
    ctx = ms.TuneContext(
        mod=static, target=llvm_target, space_generator="post-order-apply", rand_state=3
    )
    sch = ctx.space_generator.generate_design_space(static)[0]  # a tiled schedule at n=32
    rk = transplant(sym, sch.trace, "n")
    assert rk is not None and rk.tile > 1 and "T.where" not in rk.func.script()
    _check_pv_range_kernel(rk, llvm_target, (1, 5, 16, 23, 40))  # on, off, above the size


def _check_pv_range_kernel(rk: object, target: object, values: tuple[int, ...]) -> None:
    """A range kernel of ``_pv`` fed zero-padded inputs matches numpy at each value."""
    import numpy as np

    lib = tvm.driver.build(tvm.IRModule({"main": rk.func}), target=target)
    rng = np.random.default_rng(0)
    for value in values:
        m, padded = rk.padded(value) // rk.tile, rk.padded(value)
        x = rng.random((value, value), dtype="float32")
        y = rng.random((value, 16), dtype="float32")
        xp = np.zeros((padded, padded), "float32")
        xp[:value, :value] = x
        yp = np.zeros((padded, 16), "float32")
        yp[:value] = y
        out = tvm.runtime.tensor(np.zeros((padded, 16), "float32"))
        lib["main"](tvm.runtime.tensor(xp), tvm.runtime.tensor(yp), m, out)
        np.testing.assert_allclose(out.numpy()[:value], x @ y, rtol=1e-5, atol=1e-5)


def test_the_fine_range_kernel_keeps_the_register_tile_and_stays_exact(llvm_target) -> None:
    """A record tiling the rows of ``A[n, n] @ B[n, 16]`` as 2 x 4 x 4 and the reduction as
    4 x 8 pads to 16 (lcm of 4 * 4 and 8); its fine variant keeps the register tiles (4 and 8)
    and pads to 8, so n=17 computes 24 rows instead of 32. Both match numpy on and off the
    tuned size."""
    from tvm import tirx

    from tuner.symbolic.rangekernel import range_variants, rewrite_tiles

    static = _pv(32)
    sch = tvm.s_tir.Schedule(static)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    i0, i1, i2 = sch.split(i, sch.sample_perfect_tile(i, n=3, decision=[2, 4, 4]))
    k0, k1 = sch.split(k, sch.sample_perfect_tile(k, n=2, decision=[4, 8]))
    sch.reorder(i0, i1, k0, i2, k1, j)
    sch.vectorize(j)
    sym = _pv(tirx.Var("n", "int64"))["main"]
    variants = range_variants(sym, sch.trace, "n", rewrite_tiles(sym, sch.trace, "n"))
    assert [rk.tile for rk in variants] == [16, 8]
    coarse, fine = variants
    assert fine.padded(17) == 24 and coarse.padded(17) == 32 and fine.key != coarse.key
    for rk in variants:
        assert "T.where" not in rk.func.script()
        _check_pv_range_kernel(rk, llvm_target, (1, 5, 16, 17, 40))


def test_static_instances_run_a_buckets_schedule_at_constant_values_between_buckets(
    llvm_target,
) -> None:
    """A record tuned at n=32 (rows tiled 2 x 4 x 4: tile 16) gives a static instance at the
    grid points below 32 that its tile divides (16 of 8, 16, 24): constant shapes, the tuned
    inner tiles, exact against numpy. A softmax whose schedule vectorizes across n has no
    range kernel (a symbolic vectorized loop) but gets instances at every point."""
    import numpy as np
    from tvm import tirx

    from tuner.symbolic.buckets import bind_kernel
    from tuner.symbolic.rangekernel import instance_points, instances, rewrite_tiles, transplant
    from tuner.symbolic.walk import vars_of

    assert instance_points(0, 32) == [8, 16, 24]
    assert instance_points(64, 128) == [80, 96, 112] and instance_points(16, 64) == [32, 48]
    sch = tvm.s_tir.Schedule(_pv(32))
    i, _, _ = sch.get_loops(sch.get_sblock("C"))
    sch.split(i, sch.sample_perfect_tile(i, n=3, decision=[2, 4, 4]))
    sym = _pv(tirx.Var("n", "int64"))["main"]

    def bind(value: int) -> tvm.IRModule | None:
        return bind_kernel(sym, {"n": value})

    found = instances(rewrite_tiles(sym, sch.trace, "n"), instance_points(0, 32), bind)
    assert [at for at, _ in found] == [16]
    func = found[0][1]
    assert not vars_of(func.params) and "T.where" not in func.script()
    lib = tvm.driver.build(tvm.IRModule({"main": func}), target=llvm_target)
    rng = np.random.default_rng(0)
    x = rng.random((16, 16), dtype="float32")
    y = rng.random((16, 16), dtype="float32")
    out = tvm.runtime.tensor(np.zeros((16, 16), "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y), out)
    np.testing.assert_allclose(out.numpy(), x @ y, rtol=1e-5, atol=1e-5)

    soft = tvm.s_tir.Schedule(_softmax(32))
    for name in ("E", "Y"):
        _, jj = soft.get_loops(soft.get_sblock(name))
        soft.vectorize(jj)  # across n: no range kernel
    sym = _softmax(tirx.Var("n", "int64"))["main"]
    assert transplant(sym, soft.trace, "n") is None
    rewrite = rewrite_tiles(sym, soft.trace, "n")
    found = instances(rewrite, [8, 24], lambda v: bind_kernel(sym, {"n": v}))
    assert [at for at, _ in found] == [8, 24]
    lib = tvm.driver.build(tvm.IRModule({"main": found[1][1]}), target=llvm_target)
    x = rng.standard_normal((24, 24)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((24, 24), "float32"))
    lib["main"](tvm.runtime.tensor(x), out)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_transplant_grows_the_tile_until_a_fused_constant_split_divides(llvm_target) -> None:
    """A tuned split of 64 on a loop fused across the symbolic axis (as the postprocessors'
    parallel/vectorize splits make) divides ``m * tile * 8`` only for tiles that are multiples
    of 8: the sampled tile 4 would leave a predicate, so the range kernel takes tile 8."""
    import numpy as np
    from tvm import te, tirx

    from tuner.symbolic.rangekernel import transplant

    def relu(rows: object) -> tvm.IRModule:
        a = te.placeholder((rows, 8), name="A")
        b = te.compute((rows, 8), lambda i, j: te.max(a[i, j], 0.0), name="B")
        return normalize(te.create_prim_func([a, b]))

    static = relu(16)
    sch = tvm.s_tir.Schedule(static)
    i, j = sch.get_loops(sch.get_sblock("B"))
    io, ii = sch.split(i, sch.sample_perfect_tile(i, n=2, decision=[4, 4]))
    fused = sch.fuse(io, ii, j)
    outer, _ = sch.split(fused, [None, 64])
    sch.parallel(outer)
    rk = transplant(relu(tirx.Var("n", "int64"))["main"], sch.trace, "n")
    assert rk is not None and rk.tile == 8, rk and rk.tile
    assert "T.where" not in rk.func.script()
    lib = tvm.driver.build(tvm.IRModule({"main": rk.func}), target=llvm_target)
    for value in (1, 5, 16, 23):
        m = -(-value // rk.tile)
        x = np.random.default_rng(value).standard_normal((m * rk.tile, 8)).astype("float32")
        out = tvm.runtime.tensor(np.zeros_like(x))
        lib["main"](tvm.runtime.tensor(x), m, out)
        np.testing.assert_allclose(out.numpy(), np.maximum(x, 0))


def _softmax(n: object) -> tvm.IRModule:
    """Softmax over the rows of an ``n x n`` matrix (max, exp, sum, divide)."""
    from tvm import te

    a = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    mx = te.compute((n,), lambda i: te.max(a[i, k], axis=k), name="M")
    e = te.compute((n, n), lambda i, j: te.exp(a[i, j] - mx[i]), name="E")
    k2 = te.reduce_axis((0, n), name="k2")
    total = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="S")
    out = te.compute((n, n), lambda i, j: e[i, j] / total[i], name="Y")
    return normalize(te.create_prim_func([a, out]))


def test_softmax_over_n_gets_a_correct_range_kernel(llvm_target) -> None:
    """Padded with -inf, a softmax range kernel is exact on the rows below n."""
    import numpy as np
    from tvm import tirx

    from tuner.fastimport import preload_tensor_intrin
    from tuner.symbolic.rangekernel import transplant

    n = tirx.Var("n", "int64")
    sym = _softmax(n)["main"]
    assert pad_values(sym, "n") == {"A": float("-inf")}
    preload_tensor_intrin()
    static = _softmax(32)
    sch = tvm.s_tir.Schedule(static)
    for name in ("M", "S"):  # tile the rows of both reductions (a split over n)
        block = sch.get_sblock(name)
        i, _ = sch.get_loops(block)
        sch.split(i, sch.sample_perfect_tile(i, n=2, decision=[4, 8]))
    for name in ("E", "Y"):
        i, j = sch.get_loops(sch.get_sblock(name))
        _, ji = sch.split(j, sch.sample_perfect_tile(j, n=2, decision=[2, 16]))
        sch.vectorize(ji)
    rk = transplant(sym, sch.trace, "n")
    assert rk is not None and rk.tile == 16 and "T.where" not in rk.func.script()
    lib = tvm.driver.build(tvm.IRModule({"main": rk.func}), target=llvm_target)
    rng = np.random.default_rng(0)
    for value in (1, 5, 16, 23, 40):
        m = -(-value // rk.tile)
        padded = m * rk.tile
        x = rng.standard_normal((value, value)).astype("float32") * 4
        xp = np.full((padded, padded), -np.inf, "float32")
        xp[:value, :value] = x
        out = tvm.runtime.tensor(np.zeros((padded, padded), "float32"))
        lib["main"](tvm.runtime.tensor(xp), m, out)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        expected = e / e.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(out.numpy()[:value, :value], expected, rtol=1e-5, atol=1e-6)


def _softmax_db(
    path: Path,
    target: tvm.target.Target,
    records: dict[int, tuple[int, float]],
    model_file: str = "softmax_n.py",
    var: str = "n",
    scale: int = 1,
    only: tuple[str, ...] | None = None,
    tile_of: dict[str, int] | None = None,
) -> TuneFarmDatabase:
    """A database of ``model_file`` (default ``softmax_n.py``) with, per bucket value of
    ``var``, one hand-made record (every loop over ``scale * var`` split by a tile) and its
    measured time: ``{value: (tile, sec)}``, stored as a tune would store it; with ``only``,
    of those kernels alone; ``tile_of`` gives some kernels another tile."""

    from database import shash_of
    from tuner.pipeline import extract_tasks
    from tuner.symbolic.buckets import bucket_tasks

    model = load_model(DATA / model_file)
    db = TuneFarmDatabase(Storage(f"sqlite:///{path}"), target)
    family = {t.name: shash_of(t.mod) for t in extract_tasks(prepare(model.mod, target), target)}
    for bt in bucket_tasks(model.mod, target, {var: sorted(records)}):
        value, (tile, sec) = bt.bucket[var], records[bt.bucket[var]]
        base = bt.task.name.split("[", 1)[0]
        if base not in family or (only is not None and base not in only):
            continue  # a kernel of the specialized model only (the reshape folds away)
        sch = tvm.s_tir.Schedule(bt.task.mod)
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            for loop in sch.get_loops(block):
                if int(sch.get(loop).extent) == value * scale:  # every loop over var
                    t = (tile_of or {}).get(base, tile)
                    decision = [value * scale // t, t]
                    sch.split(loop, sch.sample_perfect_tile(loop, n=2, decision=decision))
        store_bucket_record(db, bt, family[base], sch.trace, sec, target)
    return db


def test_flattened_rows_c_times_b_get_the_static_bucket_kernel(tmp_path, llvm_target) -> None:
    """A ViT's tokens flattened to ``[b * 65, 128]``: the kernel's rows are ``c * b``, which
    the dispatch used to leave to the generic (untuned) kernel at every batch. Now values up
    to a bucket pad the rows to ``c * B`` and run the kernel tuned there (at ``B`` itself
    unpadded); above the largest bucket the generic kernel serves; every value matches numpy."""
    from tuner.symbolic.rangekernel import coefficient

    model = load_model(DATA / "flat_tokens_b.py")
    prepared = prepare(model.mod, llvm_target)
    (kernel,) = [f for f in prepared.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    rows = normalize(kernel)["main"].params[0].shape[0]
    assert coefficient(rows, "b") == 5 and coefficient(rows, "n") is None
    assert pad_values(normalize(kernel)["main"], "b") is not None  # rows padded with 0s
    db = _softmax_db(tmp_path / "flat.db", llvm_target, {4: (4, 1e-6)}, "flat_tokens_b.py", "b", 5)
    values = [1, 3, 4, 5]
    results = bench(model, llvm_target, db, [{"b": v} for v in values], repeat=1, min_repeat_ms=1)
    for value, res in zip(values, results, strict=True):
        assert res.agree, (value, res.max_abs_err)
        (chosen,) = res.kernels.values()
        # below the bucket padded to it; at the bucket itself unpadded (exact)
        expected = "b4_static" if value < 4 else "b4_exact" if value == 4 else "b4"
        assert chosen == expected, (value, res.kernels)


def test_flattened_rows_are_timed_with_the_variable_as_a_scalar(tmp_path, llvm_target) -> None:
    """The generic kernel of ``[b * 5, 16]`` rows takes ``b`` as a scalar too: a probe passes
    it beside the buffers bound at the bucket; its range kernel (rows ``5 * m * tile``)
    takes ``m`` instead. Both run from those arguments alone."""
    from database import TargetKey
    from tuner.symbolic.dispatch.plan import bucket_workloads
    from tuner.symbolic.rangekernel import args_at, transplant
    from workers.build import build_artifact
    from workers.config import MeasureConfig
    from workers.measure import measure_artifact

    model = load_model(DATA / "flat_tokens_b.py")
    (kernel,) = [
        f
        for f in prepare(model.mod, llvm_target).functions.values()
        if isinstance(f, tvm.tirx.PrimFunc)
    ]
    func = normalize(kernel)["main"]
    var = symbolic_var(func)
    generic = args_at(func, var, 4)
    assert generic == [
        ["TENSOR", "float32", [20, 16]],
        ["TENSOR", "float32", [16, 8]],
        ["SCALAR", "int64", 4],
        ["TENSOR", "float32", [20, 8]],
    ]
    db = _softmax_db(tmp_path / "flat.db", llvm_target, {4: (4, 1e-6)}, "flat_tokens_b.py", "b", 5)
    [(_, static_mod, _)] = bucket_workloads(db, func, "b")
    rk = transplant(func, db.best(static_mod, llvm_target)[0].trace, "b")
    assert rk is not None and rk.tile == 4
    assert rk.args_at(5) == [  # b=5 padded to 8: 40 rows, m = 2
        ["TENSOR", "float32", [40, 16]],
        ["TENSOR", "float32", [16, 8]],
        ["SCALAR", "int64", 2],
        ["TENSOR", "float32", [40, 8]],
    ]
    config = MeasureConfig(repeat=2, min_repeat_ms=1)
    for mod, args in (
        (tvm.IRModule({"main": func}), generic),
        (tvm.IRModule({"main": rk.func}), rk.args_at(5)),
    ):
        result, data = build_artifact(tvm.ir.save_json(mod), TargetKey.of(llvm_target).json)
        assert result.ok and data is not None
        run = measure_artifact(data, args, "cpu", config)
        assert run.ok and all(s > 0 for s in run.run_secs), run.error_msg


def test_softmax_bucket_kernel_is_dispatched_with_inf_padding(tmp_path, llvm_target) -> None:
    """End to end through the Relax dispatch: a record of a tiled softmax at n=16 (stored as a
    tune would store it) becomes a range kernel and a static kernel, both fed inputs padded
    with -inf; each runs, observably, where the rule says, and every value matches numpy."""
    model = load_model(DATA / "softmax_n.py")
    db = _softmax_db(tmp_path / "sm.db", llvm_target, {16: (8, 1e-6)})
    values = [1, 3, 8, 11, 16, 17, 40]
    results = bench(model, llvm_target, db, [{"n": v} for v in values], repeat=1, min_repeat_ms=1)
    for value, res in zip(values, results, strict=True):
        assert res.agree, (value, res.max_abs_err)
        # up to 7: the static instance at 8 (the schedule's tile; the range kernel's one tile
        # of work, with constant shapes), padded to 8; 8: the same unpadded (exact); 9..15:
        # the static kernel tuned at 16 (the same estimated time, and constant shapes),
        # padded to 16; 16: the same unpadded (exact); above: the range kernel
        expected = {16: "n16_exact", 8: "n16_at8_exact"}.get(
            value, "n16_static" if 8 < value < 16 else "n16"
        )
        expected = "n16_at8" if value < 8 else expected
        assert res.kernels == {"softmax": expected}, (value, res.kernels)
    # one branch per model call: main picks a region of n (..7, 8, 9..15, 16, 17..), each
    # region a copy of the model with its kernel calls inline, no per-call dispatch function
    with llvm_target, db:
        applied, _ = add_dispatch(prepare(model.mod, llvm_target), llvm_target, db)
    regions = {
        gv.name_hint: f
        for gv, f in applied.functions.items()
        if gv.name_hint.startswith("main_dispatch_n_")
    }
    copies = [
        f.attrs["tunefarm.copy"]
        for f in applied.functions.values()
        if isinstance(f, tvm.tirx.PrimFunc) and f.attrs and "tunefarm.copy" in f.attrs
    ]
    assert (
        set(regions)
        == {"main_dispatch_n_le7", "main_dispatch_n_le8", "main_dispatch_n_le15"}
        | {"main_dispatch_n_le16", "main_dispatch_n_above"}
        and len(applied.functions) == 1 + 5 + 6 + 2
    )  # main, regions, kernels (generic, range, static, exact, instance at 8 padded and
    # exact), copies
    # the padded branches share one -inf pad and one crop kernel
    assert sorted(copies) == ["crop", "pad"]
    assert all(" if " not in f.script() for f in regions.values())
    tests = [line for line in applied["main"].script().splitlines() if " if n <= " in line]
    # five regions by bisection: n <= 15, then n <= 8 or n <= 16, then n <= 7 (three
    # levels, not four)
    assert len(tests) == 4 and len({len(t) - len(t.lstrip()) for t in tests}) == 3


def _chain_db(path: Path, target: tvm.target.Target) -> TuneFarmDatabase:
    """A database with a hand-made record at n=16 (rows tiled by 8) of the two chained
    kernels of ``dyn_kernels.py``: matmul+relu, then softmax over its rows."""

    from database import shash_of
    from tuner.pipeline import extract_tasks
    from tuner.symbolic.buckets import bucket_tasks

    model = load_model(MODEL)
    db = TuneFarmDatabase(Storage(f"sqlite:///{path}"), target)
    family = {t.name: shash_of(t.mod) for t in extract_tasks(prepare(model.mod, target), target)}
    for bt in bucket_tasks(model.mod, target, {"n": [16]}):
        base = bt.task.name.split("[", 1)[0]
        if base not in ("fused_matmul_add_relu", "softmax"):
            continue
        sch = tvm.s_tir.Schedule(bt.task.mod)
        block = sch.get_child_blocks(sch.get_sblock("root"))[0]
        loop = sch.get_loops(block)[0]  # the rows: n
        sch.split(loop, sch.sample_perfect_tile(loop, n=2, decision=[2, 8]))
        store_bucket_record(db, bt, family[base], sch.trace, 1e-6, target)
    return db


def test_a_kernel_fed_by_a_padded_branch_is_dispatched_too(tmp_path, llvm_target) -> None:
    """Two dispatched kernels in a row (matmul+relu, then softmax over its rows): the first
    one's bucket branch slices its output back to ``n`` rows, and the second must still see
    ``n`` (not ``min(n, 16)``) and run its own bucket kernel in every region. A slice typed
    ``min(n, 16)`` left softmax on its generic kernel below the largest bucket."""
    model = load_model(MODEL)
    db = _chain_db(tmp_path / "chain.db", llvm_target)
    values = [3, 8, 11, 16, 17]
    results = bench(model, llvm_target, db, [{"n": v} for v in values], repeat=1, min_repeat_ms=1)
    for value, res in zip(values, results, strict=True):
        assert res.agree, (value, res.max_abs_err)
        assert res.kernels["fused_matmul_add_relu"] != "generic", (value, res.kernels)
        assert res.kernels["softmax"] != "generic", (value, res.kernels)


def test_padding_overhead_keeps_a_large_tile_from_serving_small_values() -> None:
    """Issue 14, item 4: a kernel tuned at s=64 with a 64-row tile, whose measured time (11 us)
    is just below the generic kernel's work-scaled estimate at s=1 (190 us at 16 -> 11.9 us),
    must not serve s=1: its branch pads x[1, 128] to 64 rows and crops back, which costs
    more than the kernel saves. The generic kernel serves until the tuned kernel's time plus
    that overhead is the lesser (by the margin)."""
    from tuner.symbolic.dispatch.rule import (
        GENERIC_MARGIN,
        PAD_ELEM_SEC,
        PAD_OP_SEC,
        PadBuffer,
        pad_overhead,
    )

    static = BucketKernel(64, 64, "k_s64_static", "device", 11e-6, static=True)
    generic = ((16, 190e-6), (64, 750e-6))
    # x[s, 128] (padded), w[128, 128] and b[128] (not), y[s, 128] (sliced)
    buffers = (
        PadBuffer(128, 1),
        PadBuffer(128 * 128, 0),
        PadBuffer(128, 0),
        PadBuffer(128, 1, True),
    )
    # one pad writing 64 x 128, and a crop writing v x 128
    assert pad_overhead(1, 64, buffers) == pytest.approx(
        2 * PAD_OP_SEC + (64 * 128 + 128) * PAD_ELEM_SEC
    )
    assert BucketKernel(64, 1, "k_s64", "device", 11e-6).overhead(5, buffers) == 0.0  # tile 1
    # on work alone (the rule before) the 64-row kernel wins s=1: 11 us < 190 / 16 = 11.9 us
    assert static.cost(1) < 190e-6 / 16
    got = choose_intervals((static,), generic, buffers=buffers)
    assert got[0][1] is None and got[-1] == (64, static)
    lo = got[0][0]
    # the generic kernel serves exactly while the padded kernel does not beat it by the margin
    assert 190e-6 * lo / 16 <= GENERIC_MARGIN * static.cost(lo, 1, buffers)
    assert 190e-6 * (lo + 1) / 16 > GENERIC_MARGIN * static.cost(lo + 1, 1, buffers)
    assert 1 <= lo < 16


def test_generic_kernel_serves_small_values_from_a_stored_tune(tmp_path, llvm_target) -> None:
    """The same case through a real SQLite database as a tune stores it (default schedule and
    a 64-row-tile record at s=64, the default alone at s=16): the build dispatches s=1 to the
    generic kernel, observably, and the output matches numpy at every value."""
    from tvm.s_tir import meta_schedule as ms

    from database import shash_of
    from tuner.pipeline import extract_tasks
    from tuner.symbolic.buckets import bucket_tasks

    path = tmp_path / "proj.py"
    path.write_text(
        "from tvm.script import ir as I\n"
        "from tvm.script import relax as R\n\n\n"
        "@I.ir_module\n"
        "class Module:\n"
        "    @R.function\n"
        "    def main(x: R.Tensor(('s', 128), 'float32'), w: R.Tensor((128, 128), 'float32'),\n"
        "             b: R.Tensor((128,), 'float32')):\n"
        "        with R.dataflow():\n"
        "            y = R.add(R.matmul(x, w), b)\n"
        "            R.output(y)\n"
        "        return y\n\n\n"
        "def numpy_reference(x, w, b):\n"
        "    return x @ w + b\n"
    )
    model = load_model(path)
    db = TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'p.db'}"), llvm_target)
    (kernel,) = extract_tasks(prepare(model.mod, llvm_target), llvm_target)
    measured = {16: (190e-6, None), 64: (750e-6, 11e-6)}  # bucket: (default, tuned 64-row tile)
    for bt in bucket_tasks(model.mod, llvm_target, {"s": [16, 64]}):
        value = bt.bucket["s"]
        base = bt.task.name.split("[", 1)[0]
        db.workload_id(
            bt.task.mod, create=True, task_name=base, family=(shash_of(kernel.mod), bt.bucket)
        )
        workload = db.commit_workload(bt.task.mod)
        args_info = ms.arg_info.ArgInfo.from_prim_func(bt.task.mod["main"])
        default_sec, tuned_sec = measured[value]
        schedules = [(tvm.s_tir.Schedule(bt.task.mod), default_sec)]
        if tuned_sec is not None:
            sch = tvm.s_tir.Schedule(bt.task.mod)
            blk = sch.get_child_blocks(sch.get_sblock("root"))[0]  # the matmul: rows of 64
            loop = sch.get_loops(blk)[0]
            sch.split(loop, sch.sample_perfect_tile(loop, n=2, decision=[1, value]))
            schedules.append((sch, tuned_sec))
        for sch, sec in schedules:
            db.commit_tuning_record(
                ms.database.TuningRecord(
                    sch.trace, workload, run_secs=[sec], target=llvm_target, args_info=args_info
                )
            )
    _, plans = add_dispatch(prepare(model.mod, llvm_target), llvm_target, db)
    (plan,) = plans.values()
    assert plan.intervals[0][1] is None, plan.describe()  # s=1.. : the generic kernel
    assert plan.used, plan.describe()  # the 64-row kernel still serves larger values
    values = [1, 2, 40, 64]
    results = bench(model, llvm_target, db, [{"s": v} for v in values], repeat=1, min_repeat_ms=1)
    for value, res in zip(values, results, strict=True):
        assert res.agree, (value, res.max_abs_err)
    (name,) = results[0].kernels
    assert results[0].kernels[name] == "generic"
    assert results[-1].kernels[name] == "s64_exact"  # at its bucket: unpadded


def test_bench_flags_values_where_tuned_is_slower() -> None:
    from tuner.bench.results import BenchResult, slower_note, slower_shapes

    def result(s: int, untuned: float, tuned: float) -> BenchResult:
        return BenchResult(
            untuned_sec=untuned,
            tuned_sec=tuned,
            numpy_sec=None,
            max_abs_err=0.0,
            reference="untuned",
            agree=True,
            tuned_share=1.0,
            untuned_kernels=[],
            shape={"s": s},
            kernels={},
        )

    results = [result(1, 102e-6, 169e-6), result(16, 500e-6, 100e-6)]
    assert [r.slower for r in results] == [True, False]
    assert results[0].to_dict()["slower_than_untuned"] is True
    assert results[1].to_dict()["slower_than_untuned"] is False
    assert results[0].speedup_label == "0.60x SLOWER" and results[1].speedup_label == "5.00x"
    assert slower_shapes(results) == ["s=1"]
    assert "s=1" in slower_note(results) and "0.60x" in slower_note(results)
    assert slower_note(results[1:]) is None


def test_dispatch_callees_skip_the_checks_their_caller_made(tmp_path, llvm_target) -> None:
    """The functions dispatch adds (region copies, branches) are called only after ``main``
    checked the model's inputs, so they check only the parameters with symbolic dims
    (``num_input = 0``): re-checking every weight made a tuned build whose kernels were all
    generic 0.97x the untuned one (2.4 µs of 90 µs). ``main`` itself still refuses a wrong
    weight, in one clear error."""
    import numpy as np
    from tvm import relax

    model = load_model(MODEL)
    db = _chain_db(tmp_path / "chain.db", llvm_target)
    with llvm_target, db:
        applied, _ = add_dispatch(prepare(model.mod, llvm_target), llvm_target, db)
    added = [
        (gv.name_hint, f)
        for gv, f in applied.functions.items()
        if isinstance(f, relax.Function) and gv.name_hint != "main"
    ]
    assert added and all(f.attrs["num_input"] == 0 for _, f in added), [n for n, _ in added]
    assert "num_input" not in (applied["main"].attrs or {})
    ex, _ = compile(model.mod, llvm_target, db)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    rng = np.random.default_rng(0)
    n = 11
    good = [rng.standard_normal(s).astype("float32") for s in ((n, 64), (64, 32), (32,), (n, 32))]
    vm["main"](*[tvm.runtime.tensor(a) for a in good])  # runs
    bad = [*good[:1], rng.standard_normal((64, 31)).astype("float32"), *good[2:]]
    with pytest.raises(Exception, match="param=w"):
        vm["main"](*[tvm.runtime.tensor(a) for a in bad])


def test_traffic_above_the_largest_bucket_picks_the_kernel_that_pads_least() -> None:
    """Above the largest bucket, without a profile, the kernel of least time per unit of work
    at the largest bucket serves (n16, tile 16); with the traffic just above it (n=17..20),
    the kernel of least expected time there: n8's tile of 8 pads 17 to 24 rows where n16's
    pads it to 32."""
    n8 = BucketKernel(8, 8, "k_n8", "device", 8.8e-6)
    n16 = BucketKernel(16, 16, "k_n16", "device", 16e-6)
    plain = KernelDispatch("k", "n", (n8, n16))
    assert plain.above is n16
    near = KernelDispatch("k", "n", (n8, n16), traffic=((5, 1000.0), (17, 10.0), (20, 5.0)))
    assert near.above is n8
    assert near.describe().endswith("above 16 (by traffic): n8 (tile 8)")
    # traffic far above: padding is noise there, the better rate wins again
    far = KernelDispatch("k", "n", (n8, n16), traffic=((400, 1.0),))
    assert far.above is n16
    # traffic below the largest bucket only: the rule without a profile
    assert KernelDispatch("k", "n", (n8, n16), traffic=((3, 1.0),)).above is n16
    # the generic kernel still serves when no bucket kernel beats it by the margin there
    generic = ((16, 20e-6),)  # 1.25 us a row
    assert KernelDispatch("k", "n", (n8, n16), generic=generic, traffic=((17, 1.0),)).above is None


@pytest.mark.slow
def test_build_with_traffic_serves_values_above_the_buckets_by_it(tmp_path, llvm_target) -> None:
    """End to end: records of the softmax at n=8 (tile 8) and n=16 (tile 16); n=17 runs n16's
    kernel in the plain build and n8's when the traffic sits just above 16, observably, and
    matches numpy either way."""
    model = load_model(DATA / "softmax_n.py")
    db = _softmax_db(tmp_path / "sm.db", llvm_target, {8: (8, 8.8e-6), 16: (16, 16e-6)})
    shapes = [{"n": 17}, {"n": 5}]
    plain = bench(model, llvm_target, db, shapes, repeat=1, min_repeat_ms=1, runtimes=())
    weighed = bench(
        model,
        llvm_target,
        db,
        shapes,
        repeat=1,
        min_repeat_ms=1,
        runtimes=(),
        traffic={"n": {17: 90, 5: 10}},
    )
    assert all(r.agree for r in plain + weighed)
    assert plain[0].kernels == {"softmax": "n16"} and weighed[0].kernels == {"softmax": "n8"}
    assert plain[1].kernels == weighed[1].kernels  # at or below the buckets: the same rule
    # the CLI: build --shape-profile reports the choice it made from the traffic
    from typer.testing import CliRunner

    from tuner.cli import app

    profile = tmp_path / "traffic.json"
    profile.write_text(json.dumps({"n": {"17": 90, "5": 10}}))
    args = ["build", str(DATA / "softmax_n.py"), "--db", f"sqlite:///{tmp_path / 'sm.db'}"]
    result = CliRunner().invoke(
        app, [*args, "--shape-profile", str(profile), "-o", str(tmp_path / "sm.so"), "--json"]
    )
    assert result.exit_code == 0, result.output
    (kernel,) = json.loads(result.output)["kernels"]
    assert kernel["dispatch"].endswith("above 16 (by traffic): n8 (tile 8)"), kernel["dispatch"]


def test_a_bucket_record_serves_every_kernel_it_is(tmp_path, llvm_target) -> None:
    """One record of the static ``matmul`` at s=64 (stored as the old name-keyed link would
    store it: family of the symbolic ``matmul`` only) serves all three symbolic matmuls that
    are that kernel at s=64; every value matches numpy."""
    model = load_model(DATA / "shared_matmuls.py")
    db = _softmax_db(tmp_path / "mm.db", llvm_target, {64: (16, 1e-6)}, "shared_matmuls.py", "s")
    values = [5, 64, 70]
    results = bench(model, llvm_target, db, [{"s": v} for v in values], repeat=1, min_repeat_ms=1)
    for value, res in zip(values, results, strict=True):
        assert res.agree, (value, res.max_abs_err)
        ran = {k: v for k, v in res.kernels.items() if k.startswith("matmul")}
        assert set(ran) == {"matmul", "matmul1", "matmul2"}, res.kernels
        assert all(v.startswith("s64") for v in ran.values()), (value, res.kernels)


@pytest.mark.slow
def test_bench_kernels_says_where_the_time_goes(tmp_path, llvm_target) -> None:
    """``bench(kernels=True)`` / ``tunefarm bench --kernels``: every function one model call
    ran, timed alone, and the VM's own share; the bucket kernels of all three matmuls are
    there, once each."""
    from typer.testing import CliRunner

    from tuner.cli import app

    model = load_model(DATA / "shared_matmuls.py")
    db = _softmax_db(tmp_path / "mm.db", llvm_target, {64: (16, 1e-6)}, "shared_matmuls.py", "s")
    (res,) = bench(model, llvm_target, db, [{"s": 5}], repeat=1, min_repeat_ms=1, kernels=True)
    profile = res.profile
    assert profile is not None and profile.model_sec == res.tuned_sec
    calls = {k.name: k.calls for k in profile.kernels}
    for kernel in ("matmul", "matmul1", "matmul2"):
        (name,) = [n for n in calls if n.startswith(f"{kernel}_s64")]
        assert calls[name] == 1, calls
    assert all(k.sec > 0 for k in profile.kernels)
    assert profile.vm_calls > sum(calls.values())  # builtins: allocations, shape checks
    assert profile.rest_sec == max(profile.model_sec - profile.kernel_sec, 0.0)
    args = ["bench", str(DATA / "shared_matmuls.py"), "--db", f"sqlite:///{tmp_path / 'mm.db'}"]
    result = CliRunner().invoke(app, [*args, "--shape", "s=5", "--kernels", "--runtimes", "none"])
    assert result.exit_code == 0, result.output
    assert "VM (allocations" in result.output and "matmul1_s64" in result.output, result.output


@pytest.mark.parametrize(("tile", "range_kernel"), [(1, False), (8, True)])
def test_no_tile_1_range_kernel_where_two_loop_axes_run_over_the_variable(
    tmp_path, llvm_target, tile: int, range_kernel: bool
) -> None:
    """``q @ k^T`` (output ``n x n``, work as ``n**2``) tuned at n=16: a record whose ``n``
    loops have an inner tile of 1 gives no range kernel, every loop of which would run over
    a symbolic extent (GPT-2's ``probs @ V`` ran several times its estimate that way); a
    record tiled by 8 does. The bucket's static and exact kernels serve either way, and every value
    matches numpy."""
    from tuner.symbolic.dispatch.rule import offers_range

    assert not offers_range(1, 2) and offers_range(8, 2) and offers_range(1, 1)
    model = load_model(DATA / "scores_n.py")
    db = _softmax_db(tmp_path / "scores.db", llvm_target, {16: (tile, 1e-6)}, "scores_n.py")
    with llvm_target, db:
        _, plans = add_dispatch(prepare(model.mod, llvm_target), llvm_target, db)
    plan = plans["matmul"]
    assert plan.degree == 2
    ranges = [bk for bk in plan.buckets if not bk.static]
    assert [bk.tile for bk in ranges] == ([tile] if range_kernel else [])
    assert {bk.label for bk in plan.buckets if bk.static and not bk.origin} == {"static", "exact"}
    # the transpose before it (one loop axis over n) keeps its range kernel at either tile
    assert plans["transpose"].degree == 1
    assert [bk.tile for bk in plans["transpose"].buckets if not bk.static] == [tile]
    values = [5, 16, 17]
    results = bench(model, llvm_target, db, [{"n": v} for v in values], repeat=1, min_repeat_ms=1)
    for value, res in zip(values, results, strict=True):
        assert res.agree, (value, res.max_abs_err)


def test_a_timed_range_kernel_is_priced_by_its_own_time(tmp_path, llvm_target) -> None:
    """A range kernel the tune timed (``generic_runs`` under its own hash) is offered whatever
    its tile and priced by that time; its arguments at a value are its buffers padded to the
    tile and the tile count, and the runner times it from them."""
    from database import TargetKey
    from tuner.symbolic.dispatch.plan import bucket_workloads
    from tuner.symbolic.rangekernel import static_key, transplant
    from workers.build import build_artifact
    from workers.config import MeasureConfig
    from workers.measure import measure_artifact

    model = load_model(DATA / "scores_n.py")
    db = _softmax_db(tmp_path / "scores.db", llvm_target, {16: (1, 1e-6)}, "scores_n.py")
    prepared = prepare(model.mod, llvm_target)
    func = next(
        normalize(f)["main"]
        for gv, f in prepared.functions.items()
        if gv.name_hint == "matmul" and isinstance(f, tvm.tirx.PrimFunc)
    )
    [(bucket, static_mod, _)] = bucket_workloads(db, func, "n")
    rk = transplant(func, db.best(static_mod, llvm_target)[0].trace, "n")
    assert rk is not None and rk.tile == 1
    assert rk.args_at(16) == [
        ["TENSOR", "float32", [16, 16]],
        ["TENSOR", "float32", [16, 16]],
        ["SCALAR", "int64", 16],
        ["TENSOR", "float32", [16, 16]],
    ]
    result, data = build_artifact(
        tvm.ir.save_json(tvm.IRModule({"main": rk.func})), TargetKey.of(llvm_target).json
    )
    assert result.ok and data is not None
    run = measure_artifact(data, rk.args_at(16), "cpu", MeasureConfig(repeat=2, min_repeat_ms=1))
    assert run.ok and all(s > 0 for s in run.run_secs)
    db.add_generic_run(rk.key, bucket, llvm_target, [3e-6])
    with llvm_target, db:
        _, plans = add_dispatch(prepare(model.mod, llvm_target), llvm_target, db)
    ranges = [bk for bk in plans["matmul"].buckets if not bk.static]
    assert [(bk.tile, bk.mean_sec) for bk in ranges] == [(1, 3e-6)]
    # with the static kernel timed beside it (2 us; its record says 1 us): half of that
    db.add_generic_run(static_key(rk.key), bucket, llvm_target, [2e-6])
    with llvm_target, db:
        _, plans = add_dispatch(prepare(model.mod, llvm_target), llvm_target, db)
    ranges = [bk for bk in plans["matmul"].buckets if not bk.static]
    assert [(bk.tile, bk.mean_sec) for bk in ranges] == [(1, pytest.approx(1.5e-6))]


def test_a_padded_output_feeds_the_next_padded_kernel_without_a_crop_and_a_pad(
    tmp_path, llvm_target
) -> None:
    """Between buckets, ``c = b @ w`` takes ``b``'s padded output as it is: its padded rows
    reach only padded rows of ``c`` (``free_inputs``), so the crop of ``b`` and the pad of it
    again go; ``b = a @ x`` reduces over ``s`` and still gets ``a`` cropped and zero-padded;
    ``x``, padded alike for three kernels, is padded once. Every value matches numpy, in
    every region."""
    from tuner.symbolic.rangekernel import free_inputs

    model = load_model(DATA / "shared_matmuls.py")
    db = _softmax_db(tmp_path / "mm.db", llvm_target, {64: (16, 1e-6)}, "shared_matmuls.py", "s")
    with llvm_target, db:
        applied, _ = add_dispatch(prepare(model.mod, llvm_target), llvm_target, db)
    region = applied["main_dispatch_s_le63"].script()
    # x padded once (for the transpose, x @ x^T and (x @ x^T) @ x alike), a padded again;
    # the transpose's output and b's go on padded; a cropped, and c (6 pads, 4 crops before)
    assert region.count("tunefarm_pad") == 2 and region.count("tunefarm_crop") == 2, region
    values = [5, 17, 63, 64, 70]
    results = bench(model, llvm_target, db, [{"s": v} for v in values], repeat=1, min_repeat_ms=1)
    assert all(r.agree for r in results), [(r.agree, r.max_abs_err) for r in results]
    norm = normalize(prepare(model.mod, llvm_target)["matmul1"])["main"]
    pads = pad_values(norm, "s")
    assert free_inputs(norm, "s", pads) == frozenset()  # a @ x: both reduce over s
    norm2 = normalize(prepare(model.mod, llvm_target)["matmul2"])["main"]
    assert free_inputs(norm2, "s", pad_values(norm2, "s")) == {norm2.params[0].name}


def test_a_region_that_would_read_another_blocks_padded_tensor_keeps_its_crops() -> None:
    """A padded tensor is handed on only inside its dataflow block: a function in which a
    block reads a dataflow variable of another is caught (and built with every crop)."""
    from tvm import relax

    from tuner.symbolic.dispatch.emit import _dataflow_scoped

    x = relax.Var("x", relax.TensorType([4], "float32"))
    d1 = relax.DataflowVar("d1", relax.TensorType([4], "float32"))
    d2 = relax.DataflowVar("d2", relax.TensorType([4], "float32"))
    out = relax.Var("out", relax.TensorType([4], "float32"))
    first = relax.DataflowBlock([relax.VarBinding(d1, relax.op.add(x, x))])
    good = relax.DataflowBlock(
        [relax.VarBinding(d2, relax.op.add(x, x)), relax.VarBinding(out, relax.op.add(d2, x))]
    )
    bad = relax.DataflowBlock([relax.VarBinding(out, relax.op.add(d1, x))])
    ty = relax.TensorType([4], "float32")
    ok = relax.Function([x], relax.SeqExpr([first, good], out), ty)
    broken = relax.Function([x], relax.SeqExpr([first, bad], out), ty)
    assert _dataflow_scoped(ok) and not _dataflow_scoped(broken)


@pytest.mark.parametrize("norm_kernel", ["generic", "range of tile 1"])
def test_a_kernel_of_any_extent_between_padded_kernels_runs_on_the_padded_rows(
    tmp_path, llvm_target, norm_kernel: str
) -> None:
    """Between buckets the layer norm between two bucket matmuls runs its generic code (no
    record) or a range kernel of tile 1 (a record whose rows are not tiled): either is valid
    at every extent and its rows are independent, so it runs on the first matmul's padded
    output as it is, and the second matmul takes its padded output in turn: one pad (x) and
    one crop (y) in the region instead of two of each."""
    model = load_model(DATA / "norm_between_matmuls.py")
    generic = norm_kernel == "generic"
    only = ("matmul", "matmul1") if generic else None
    db = _softmax_db(
        tmp_path / "n.db",
        llvm_target,
        {64: (16, 1e-6)},
        "norm_between_matmuls.py",
        "s",
        only=only,
        tile_of=None if generic else {"layer_norm": 1},
    )
    with llvm_target, db:
        applied, _ = add_dispatch(prepare(model.mod, llvm_target), llvm_target, db)
    region = applied["main_dispatch_s_le63"].script()
    assert region.count("tunefarm_pad") == 1 and region.count("tunefarm_crop") == 1, region
    values = [1, 5, 17, 63, 64, 70]
    results = bench(model, llvm_target, db, [{"s": v} for v in values], repeat=1, min_repeat_ms=1)
    for value, res in zip(values, results, strict=True):
        assert res.agree, (value, res.max_abs_err)
        if value < 64:
            assert res.kernels["layer_norm"] == ("generic" if generic else "s64"), res.kernels


def test_a_kernel_written_without_blocks_is_left_on_its_cropped_inputs() -> None:
    """GPT-2's position ids are a cumsum over ``s``, legalized to a plain loop with no blocks:
    the padding analysis cannot read it, so it is never run on padded rows (it broke the
    build of every GPT-2 region when it was asked)."""
    from tvm import relax

    from tuner.symbolic.dispatch.emit import _free_params

    s = tvm.tirx.Var("s", "int64")
    x = relax.Var("x", relax.TensorType([1, s], "int64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.cumsum(x, axis=1))
        bb.emit_func_output(out)
    func = prepare(bb.get(), tvm.target.Target({"kind": "llvm"}))["cumsum"]
    assert _free_params(func, {}, "cumsum") is None
