"""ARM for real: an aarch64 TVM runtime under qemu, reached through a TVM RPC tracker.

The tune job cross-compiles for aarch64 on x86 builders and measures through the RPC bridge
actor; the tuned kernels are then run on the emulated device and checked against the same
kernels built for this x86 host. A device that disconnects mid-job costs no candidate.
Skips (with the reason) only where qemu and the cross compiler cannot be installed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

from database import TargetKey
from tests.conftest import TINY, matmul_mod
from workers.config import MeasureConfig

pytestmark = [pytest.mark.slow, pytest.mark.ray]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def arm_device():
    from tests import arm_emulation as emu

    try:
        emu.install_host_packages()
    except emu.EmulationUnavailable as err:
        pytest.skip(f"qemu/cross toolchain cannot be installed here: {err}")
    emu.setup()  # anything else that fails here fails the tests
    with emu.start(key="arm-test") as device:
        yield device


@pytest.fixture(scope="module")
def arm_target() -> tvm.target.Target:
    from tuner.targets import resolve_target

    return resolve_target("arm64")


def _artifact(mod: tvm.IRModule, target: tvm.target.Target) -> bytes:
    from workers.build import build_artifact

    result, data = build_artifact(tvm.ir.save_json(mod), TargetKey.of(target).json)
    assert result.ok and data, result.error_msg
    return data


def test_tune_for_arm64_through_the_rpc_bridge(arm_device, arm_target, tmp_path, monkeypatch):
    import ray

    from database import Storage, TuneFarmDatabase
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model
    from tuner.pipeline import extract_tasks, prepare
    from workers.arm_bridge import ArmBridge

    monkeypatch.setenv("TUNEFARM_RPC_TRACKER", arm_device.tracker)
    monkeypatch.setenv("TUNEFARM_RPC_KEY", arm_device.key)
    url = f"sqlite:///{tmp_path / 'arm.db'}"
    model = load_model(TINY)
    config = TuneConfig(
        trials=4,
        trials_per_iter=2,
        seed=0,
        measure=MeasureConfig(number=1, repeat=2, min_repeat_ms=5, build_timeout_s=240),
    )
    summary = tune(model.mod, arm_target, Storage(url), config, model_name="tiny")
    assert summary.trials_measured >= 4
    assert all(t.best_sec for t in summary.tasks)

    db = TuneFarmDatabase(Storage(url, create=False), arm_target)
    host = tvm.target.Target({"kind": "llvm"})
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        bridge = ArmBridge.remote(arm_device.tracker, arm_device.key, MeasureConfig())
        for task in extract_tasks(prepare(model.mod, arm_target), arm_target):
            record, level, _ = db.best(task.mod, arm_target)
            assert level == "target"  # an aarch64 target: no local device level
            sch = tvm.s_tir.Schedule(task.mod)
            record.trace.apply_to_schedule(sch, remove_postproc=False)
            tuned = _artifact(sch.mod, arm_target)  # cross-compiled, the tuned schedule
            args = ArgInfo.from_prim_func(task.mod["main"])
            rng = np.random.default_rng(1)
            inputs = [
                rng.uniform(-1, 1, [int(d) for d in a.shape]).astype(a.dtype) for a in args[:-1]
            ]
            out = args[-1]
            shape, dtype = tuple(int(d) for d in out.shape), out.dtype
            got = ray.get(bridge.run.remote(tuned, inputs, shape, dtype))
            # the reference: the untuned kernel built for, and run on, this x86 host
            lib = tvm.driver.build(task.mod, target=host)
            want = tvm.runtime.empty(shape, dtype, tvm.cpu())
            lib[lib.entry_name](*[tvm.runtime.tensor(x) for x in inputs], want)
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)
    finally:
        ray.shutdown()
    rows = db.storage.run(lambda s: s.execute(tvm_records_query()).all())
    assert rows and all(r.device.startswith(f"rpc {arm_device.key}") for r in rows if r.device)


def tvm_records_query():
    from sqlalchemy import select

    from database.models import RecordRow

    return select(RecordRow.device, RecordRow.mean_sec).where(RecordRow.mean_sec.is_not(None))


def test_rpc_device_that_disconnects_costs_no_candidate(arm_device, arm_target, monkeypatch):
    from tests import arm_emulation as emu
    from workers.config import FaultPolicy
    from workers.connection import RayConnection
    from workers.runner_pool import RunnerPool
    from workers.slots import SlotSpec

    mod = matmul_mod(8, 8, 8)
    artifact = _artifact(mod, arm_target)
    args = [a.as_json() for a in ArgInfo.from_prim_func(mod["main"])]
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), old) if p))
    from workers.arm_bridge import ArmBridge

    spec = SlotSpec(
        "rpc:arm-test#0",
        actor_cls=ArmBridge,
        actor_args=(arm_device.tracker, arm_device.key),
    )
    # 2-4 s per measurement under qemu (runs sized for 4 s from the fastest first run, at
    # least 2 s enforced): the device can drop off while one is in flight
    config = MeasureConfig(number=1, repeat=1, min_repeat_ms=4000, run_timeout_s=120)
    with (
        RayConnection(num_cpus=1),
        RunnerPool([spec], config, FaultPolicy(max_attempts=2, quarantine_after=2)) as pool,
    ):
        first = pool.submit(artifact, args, key="first")
        assert first.result(timeout=180).ok
        # the device drops off mid-job and comes back (a board rebooting)
        pending = [pool.submit(artifact, args, key=f"c{i}") for i in range(3)]
        while pool.slots[0].ref is None or pool.slots[0].starting:
            time.sleep(0.05)
        time.sleep(1.5)  # session open, kernel uploaded and being timed
        arm_device.stop_server()
        restarted = emu.start_server(emu.setup(), arm_device.tracker, arm_device.key)
        arm_device.procs.append(restarted)
        results = [f.result(timeout=300) for f in pending]
        assert all(r.ok for r in results), [r.error_msg for r in results]
        assert any(f.attempts == 2 for f in pending)  # the one in flight was re-queued
        assert any("worker_died" in e for e in pool.events)
        assert pool.slots[0].measured == 4  # no candidate measured twice
