"""Best schedules of other buckets seed a new bucket's search, refitted to its shape."""

from __future__ import annotations

import math

import numpy as np
import tvm
import tvm_ffi
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

from database import Measurement, Storage, TuneFarmDatabase, shash_of
from database.transfer import bucket_distance, refit_tile
from tests.conftest import matmul_mod
from tuner.fastimport import preload_tensor_intrin
from tuner.search.compile_cost import unroll_of, unroll_of_json


def test_refit_tile_keeps_inner_factors_that_divide() -> None:
    assert refit_tile([2, 4, 4, 1], 128) == [8, 4, 4, 1]
    assert refit_tile([2, 2, 2, 16], 48) == [3, 1, 1, 16]  # 2 does not divide 3
    assert refit_tile([64, 2], 7) == [7, 1]
    for factors, extent in (([4, 8], 96), ([1, 3, 5], 30), ([16, 1, 1], 17)):
        assert int(np.prod(refit_tile(factors, extent))) == extent


def test_bucket_distance_is_log2_steps_and_infinite_across_variables() -> None:
    assert bucket_distance({"n": 16}, {"n": 64}) == bucket_distance({"n": 64}, {"n": 16}) == 2.0
    assert bucket_distance({"b": 1, "s": 16}, {"b": 4, "s": 8}) == 3.0
    assert bucket_distance({"n": 0}, {"n": 1}) == 0.0  # values below 1 count as 1
    # not over the same variables: not comparable, after every comparable bucket
    for a, b in (
        ({"n": 16}, {"b": 16}),
        ({"n": 16}, {"n": 16, "b": 1}),
        ({}, {}),
        (None, {"n": 1}),
    ):
        assert bucket_distance(a, b) == math.inf, (a, b)
    assert sorted([{"b": 16}, {"n": 4096}], key=lambda x: bucket_distance(x, {"n": 1})) == [
        {"n": 4096},
        {"b": 16},
    ]


def _store(
    db: TuneFarmDatabase,
    mod: tvm.IRModule,
    sch,
    target,
    sec: float,
    family,
    build_sec: float | None = None,
) -> None:
    db.workload_id(mod, create=True, task_name="matmul", family=family)
    workload = db.commit_workload(mod)
    trace, _, _, args = TuningRecord(
        sch.trace, workload, None, target, ArgInfo.from_prim_func(mod["main"])
    ).as_json()
    db.add(
        Measurement(
            workload=workload,
            candidate_hash=shash_of(sch.mod),
            trace_json=trace,
            args_info_json=args,
            run_secs=[sec, sec],
            target=target,
            build_sec=build_sec,
        )
    )


def test_sibling_buckets_seed_get_top_k(any_url: str, llvm_target) -> None:
    from tvm.s_tir import meta_schedule as ms

    preload_tensor_intrin()
    db = TuneFarmDatabase(Storage(any_url), llvm_target, seeds=16)
    at16, at48 = matmul_mod(16, 64, 64), matmul_mod(48, 64, 64)
    # three sampled (tiled) schedules measured at n=16, one kernel family
    for seed, sec in ((1, 3e-6), (2, 1e-6), (3, 2e-6)):
        ctx = ms.TuneContext(
            mod=at16, target=llvm_target, space_generator="post-order-apply", rand_state=seed
        )
        sch = ctx.space_generator.generate_design_space(at16)[0]
        _store(db, at16, sch, llvm_target, sec, ("fam", {"n": 16}))
    # the same family at another bucket, and a kernel of another family: never mixed
    other = matmul_mod(48, 32, 64)
    db.workload_id(other, create=True, task_name="other", family=("other", {"n": 48}))
    assert db.get_top_k(Workload(other), 8) == []
    db.workload_id(at48, create=True, task_name="matmul", family=("fam", {"n": 48}))

    seeds = db.get_top_k(Workload(at48), 8)
    assert len(seeds) == 3 and all(r.run_secs is None for r in seeds)
    for rec in seeds:  # each replays on n=48 as is (decisions refitted), scheduled and correct
        sch = tvm.s_tir.Schedule(at48)
        rec.trace.apply_to_schedule(sch, remove_postproc=False)
        assert not tvm_ffi.structural_equal(sch.mod, at48)
    lib = tvm.compile(sch.mod, target=llvm_target)
    rng = np.random.default_rng(0)
    a, b = rng.random((48, 64), dtype="float32"), rng.random((64, 64), dtype="float32")
    c = tvm.runtime.tensor(np.zeros((48, 64), "float32"))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5)

    # its own records come first; seeds only fill the rest; seeds=0 (the default): none
    _store(db, at48, sch, llvm_target, 5e-6, ("fam", {"n": 48}))
    mixed = db.get_top_k(Workload(at48), 2)
    assert mixed[0].run_secs is not None and mixed[1].run_secs is None
    assert len(db.get_top_k(Workload(at48), 1)) == 1
    off = TuneFarmDatabase(Storage(any_url), llvm_target)
    assert len(off.get_top_k(Workload(at48), 8)) == 1
    # another target's records never seed
    arm = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "num-cores": 2})
    assert TuneFarmDatabase(Storage(any_url), arm, seeds=16).get_top_k(Workload(at48), 8) == []


def test_family_builds_are_the_familys_recorded_compile_times(sqlite_url, llvm_target) -> None:
    from tvm.s_tir import meta_schedule as ms

    preload_tensor_intrin()
    db = TuneFarmDatabase(Storage(sqlite_url), llvm_target)
    at16, at48, other = matmul_mod(16, 64, 64), matmul_mod(48, 64, 64), matmul_mod(48, 32, 64)
    limits = []
    for seed, build in ((1, 0.5), (2, 0.25), (3, None)):  # the third: no build time (imported)
        ctx = ms.TuneContext(
            mod=at16, target=llvm_target, space_generator="post-order-apply", rand_state=seed
        )
        sch = ctx.space_generator.generate_design_space(at16)[0]
        limits.append(unroll_of(sch.trace))
        _store(db, at16, sch, llvm_target, 1e-6, ("fam", {"n": 16}), build_sec=build)
    _store(db, other, sch, llvm_target, 1e-6, ("other", {"n": 48}), build_sec=9.0)
    db.workload_id(at48, create=True, task_name="matmul", family=("fam", {"n": 48}))
    # the family's builds at its other bucket, newest first, each trace's unroll limit readable
    builds = db.family_builds(at48)
    assert [sec for _, sec in builds] == [0.25, 0.5]
    assert [unroll_of_json(t) for t, _ in builds] == [limits[1], limits[0]]
    assert db.family_builds(at48, limit=1) == builds[:1]
    assert [sec for _, sec in db.family_builds(other)] == [9.0]  # never another family's
    arm = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "num-cores": 2})
    assert TuneFarmDatabase(Storage(sqlite_url), arm).family_builds(at48) == []
    assert TuneFarmDatabase(Storage(sqlite_url)).family_builds(at48) == []  # no target
