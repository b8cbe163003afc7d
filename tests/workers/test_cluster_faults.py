"""A node removed from a real multi-node Ray cluster (``ray.cluster_utils.Cluster``) mid-job."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerInput

from tests.conftest import matmul_mod
from tests.ray_processes import repo_on_pythonpath
from workers.config import FaultPolicy, MeasureConfig
from workers.runner_pool import RunnerPool
from workers.slots import CPU_RESOURCE

FAULTS = "tests.workers.faults"
FAST = MeasureConfig(number=1, repeat=2, min_repeat_ms=5, run_timeout_s=20)


@contextlib.contextmanager
def ray_cluster(*nodes: dict[str, Any]) -> Iterator[tuple[Any, list[Any]]]:
    """A head (no CPUs) and one node per ``add_node`` kwargs, connected: (cluster, nodes)."""
    import ray
    from ray.cluster_utils import Cluster

    with repo_on_pythonpath():
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        try:
            added = [cluster.add_node(**kwargs) for kwargs in nodes]
            ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
            cluster.wait_for_nodes()
            yield cluster, added
        finally:
            ray.shutdown()
            cluster.shutdown()


@contextlib.contextmanager
def two_measuring_nodes() -> Iterator[tuple[Any, Any, Any]]:
    """A head (no CPUs) and two ``tunefarm_cpu`` nodes, connected: (cluster, keep, doomed)."""
    measuring = {"num_cpus": 1, "resources": {CPU_RESOURCE: 1}}
    with ray_cluster(measuring, measuring) as (cluster, (keep, doomed)):
        yield cluster, keep, doomed


@pytest.mark.ray
@pytest.mark.slow
def test_node_removed_mid_job_loses_no_candidate(llvm_target) -> None:
    """Two worker nodes build and measure; one is removed while candidates are in flight."""
    from workers.builder import RayBuilder
    from workers.ledger import Ledger
    from workers.runner import RayRunner
    from workers.slots import discover_slots

    with two_measuring_nodes() as (cluster, keep, doomed):
        slots = discover_slots("cpu", measure_fn=f"{FAULTS}:fake_measure")
        assert {s.node_id for s in slots} == {keep.node_id, doomed.node_id}

        # runners: candidates that take 0.4 s each, the doomed node removed after ~1 s
        pool = RunnerPool(slots, MeasureConfig(run_timeout_s=30), FaultPolicy())
        futures = [pool.submit({"sleep": 0.4}, [], key=f"c{i}") for i in range(10)]
        while sum(f.done() for f in futures) < 2:
            time.sleep(0.05)
        cluster.remove_node(doomed)
        results = [f.result(timeout=120) for f in futures]
        stats = {row["node"]: row for row in pool.stats()}
        pool.shutdown()
        assert all(r.ok for r in results), [r.error_msg for r in results]
        assert sum(row["measured"] for row in stats.values()) == 10  # none twice
        assert stats[doomed.node_id]["state"] == "lost"
        assert any("lost:" in e for e in pool.events)

        # builders and runners of real kernels after the loss: everything lands on `keep`
        ledger = Ledger()
        builder = RayBuilder(ledger, FAST)
        runner = RayRunner(ledger, FAST)
        mods = [matmul_mod(8, 8, 8), matmul_mod(8, 8, 16)]
        built = builder.build([BuilderInput(m, llvm_target) for m in mods])
        assert [b.error_msg for b in built] == [None, None]
        inputs = [
            RunnerInput(b.artifact_path, "cpu", ArgInfo.from_prim_func(m["main"]))
            for b, m in zip(built, mods, strict=True)
        ]
        try:
            assert all(f.result().error_msg is None for f in runner.run(inputs))
            assert [row["node"] for row in runner.pool.stats()] == [keep.node_id]
        finally:
            runner.shutdown()


@pytest.mark.ray
@pytest.mark.slow
def test_tune_job_survives_a_node_removed_mid_job(llvm_target, tmp_path) -> None:
    """A real tune job on two measuring nodes; one leaves mid-job; the job still finishes."""
    import threading

    from sqlalchemy import func, select

    from database import Storage
    from database.models import RecordRow
    from tests.conftest import TINY
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model

    url = f"sqlite:///{tmp_path / 'tf.db'}"
    storage = Storage(url)
    removed = threading.Event()
    with two_measuring_nodes() as (cluster, _keep, doomed):

        def remove_when_measuring() -> None:
            deadline = time.time() + 300
            while time.time() < deadline:
                n = storage.run(lambda s: s.scalar(select(func.count()).select_from(RecordRow)))
                if n >= 3:  # the baselines are in, the search is under way
                    cluster.remove_node(doomed)
                    removed.set()
                    return
                time.sleep(0.2)

        killer = threading.Thread(target=remove_when_measuring, daemon=True)
        killer.start()
        config = TuneConfig(
            trials=12,
            trials_per_iter=4,
            seed=0,
            measure=MeasureConfig(number=1, repeat=2, min_repeat_ms=20),
        )
        summary = tune(load_model(TINY).mod, llvm_target, storage, config, model_name="tiny")
        killer.join(timeout=5)
        assert removed.is_set(), "the node was not removed while the job ran"
        rows = storage.run(
            lambda s: s.execute(select(RecordRow.candidate_hash, RecordRow.error_kind)).all()
        )
        hashes = [r.candidate_hash for r in rows]
        # no candidate measured as a trial twice: a second record of a candidate is only
        # the confirmation of a new best or a run of the end-of-job re-timing
        confirmations = summary.search.get("confirmed", {}).get("count", 0)
        retimed = summary.search.get("retime", {}).get("runs", 0)
        assert len(hashes) - len(set(hashes)) <= confirmations + retimed
        assert len(set(hashes)) >= 12 and summary.trials_measured >= 12
        assert all(r.error_kind != "worker_died" for r in rows), rows  # none lost
        assert all(t.best_sec for t in summary.tasks)


@pytest.mark.ray
@pytest.mark.slow
def test_build_node_whose_compiler_crashes_is_quarantined(llvm_target) -> None:
    """One of two build nodes crashes every build: each crash is built again on the other node,
    the broken node is quarantined after ``quarantine_after`` blames and gets no more builds,
    and every candidate ends built."""
    from ray.util.state import list_actors

    from tests.workers.faults import BROKEN_NODE_ENV
    from workers.builder import RayBuilder
    from workers.ledger import Ledger

    broken_env = {"env_vars": {BROKEN_NODE_ENV: "1"}}
    with ray_cluster({"num_cpus": 1}, {"num_cpus": 1, **broken_env}) as (_, (good, broken)):
        ledger = Ledger()
        builder = RayBuilder(
            ledger,
            FAST,
            policy=FaultPolicy(quarantine_after=2),
            build_fn=f"{FAULTS}:broken_node_build",
        )
        for round_ in range(3):  # Ray places the tasks; a round may miss the broken node
            mods = [matmul_mod(8 + 6 * round_ + i) for i in range(6)]
            first = builder.build([BuilderInput(m, llvm_target) for m in mods])
            assert [r.error_msg for r in first] == [None] * 6
            if builder.quarantined:
                break
        assert set(builder.quarantined) == {broken.node_id}, builder.events
        assert any("blamed build node" in e for e in builder.events)
        deadline = time.time() + 60  # the marker actor shows in Ray's state API
        while True:
            markers = [
                a.name or a.class_name
                for a in list_actors(filters=[("class_name", "=", "QuarantinedSlot")])
                if a.state == "ALIVE"
            ]
            if markers or time.time() > deadline:
                break
            time.sleep(0.5)
        assert len(markers) == 1, markers
        # from now on nothing is sent to the broken node: no crash, no retry
        before = len(builder.events)
        later = builder.build([BuilderInput(matmul_mod(40 + i), llvm_target) for i in range(4)])
        assert [r.error_msg for r in later] == [None] * 4
        nodes = {ledger.get(r.artifact_path).build.node for r in later}
        assert nodes == {good.node_id}
        assert builder.events[before:] == []
