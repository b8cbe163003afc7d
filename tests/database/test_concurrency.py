"""Several processes writing records and jobs to one database at once (SQLite file, PostgreSQL)."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from database import Storage, TuneFarmDatabase
from database.jobs import start_job, update_job
from database.queries import stats

PROCS, PER_PROC, STRIDE = 4, 30, 20  # candidates overlap: each process shares 10 with the next


def _main(url: str, proc: int, barrier: object, out: mp.Queue) -> None:
    try:
        out.put((proc, _writer(url, proc, barrier)))
    except BaseException as err:  # reported to the test, which fails with it
        out.put((proc, f"{type(err).__name__}: {err}"))


def _writer(url: str, proc: int, barrier: object) -> int:
    """One process: a job and PER_PROC records of the same workload, some shared with others."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from database import Measurement
    from tests.conftest import matmul_mod

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    mod = matmul_mod()
    db = TuneFarmDatabase(Storage(url, create=False), target)
    sch = tvm.s_tir.Schedule(mod)
    barrier.wait()  # type: ignore[attr-defined]  # start together: all create the workload
    workload = db.commit_workload(mod)
    job = start_job(db.storage, name=f"writer-{proc}", target_json="{}", budget=PER_PROC)
    trace, _, _, args = TuningRecord(
        sch.trace, workload, None, target, ArgInfo.from_prim_func(mod["main"])
    ).as_json()
    new = 0
    for i in range(proc * STRIDE, proc * STRIDE + PER_PROC):
        new += db.add(
            Measurement(
                workload=workload,
                candidate_hash=f"cand{i:04d}",
                trace_json=trace,
                args_info_json=args,
                run_secs=[1e-6 * (i + 1)],
                target=target,
                worker=f"proc{proc}",
                job_id=job,
            )
        )
        update_job(db.storage, job, trials_done=i - proc * STRIDE + 1)
    update_job(db.storage, job, status="done")
    return new


@pytest.mark.slow
def test_concurrent_writers_lose_nothing_and_keep_every_run(any_url: str) -> None:
    Storage(any_url)  # create the schema once
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(PROCS)
    out = ctx.Queue()
    procs = [ctx.Process(target=_main, args=(any_url, p, barrier, out)) for p in range(PROCS)]
    for p in procs:
        p.start()
    try:
        got = dict(out.get(timeout=300) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    new = [got[p] for p in range(PROCS)]
    assert all(isinstance(n, int) for n in new), new  # no "database is locked", no error
    distinct = (PROCS - 1) * STRIDE + PER_PROC
    assert sum(new) == PROCS * PER_PROC  # every timed run is a record, shared candidates too
    data = stats(Storage(any_url))
    assert data["records"] == PROCS * PER_PROC and data["workloads"] == 1
    assert data["schedules"] == distinct  # a candidate two writers measured is one schedule
    assert data["jobs"] == PROCS
    from database.queries import list_jobs

    jobs = list_jobs(Storage(any_url))
    assert {(j["status"], j["trials_done"]) for j in jobs} == {("done", PER_PROC)}
