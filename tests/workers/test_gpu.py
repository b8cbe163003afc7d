"""CUDA: candidates cross-compile on machines without a GPU; runners measure on each GPU."""

from __future__ import annotations

import shutil

import pytest
import tvm
from tvm.s_tir import dlight as dl
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerInput

from database import TargetKey
from tests.conftest import matmul_mod
from workers.build import build_artifact
from workers.config import MeasureConfig


def _cuda_matmul(arch: str) -> tuple[tvm.IRModule, tvm.target.Target]:
    target = tvm.target.Target({"kind": "cuda", "arch": arch, "host": {"kind": "llvm"}})
    with target:
        mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.Fallback())(matmul_mod(64, 64, 64))
    return mod, target


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_candidate_builds_without_a_gpu() -> None:
    mod, target = _cuda_matmul("sm_90")
    result, data = build_artifact(tvm.ir.save_json(mod), TargetKey.of(target).json)
    assert result.ok and data[:4] == b"\x7fELF", result.error_msg


@pytest.mark.gpu
@pytest.mark.ray
def test_cuda_runner_measures_on_every_gpu() -> None:
    if not tvm.cuda(0).exist:
        pytest.skip("no CUDA GPU on this machine")
    from tuner.targets import detect_cuda_arch
    from workers.builder import RayBuilder
    from workers.connection import RayConnection
    from workers.ledger import Ledger
    from workers.runner import RayRunner
    from workers.slots import discover_slots

    mod, target = _cuda_matmul(detect_cuda_arch())
    config = MeasureConfig(number=3, repeat=3, min_repeat_ms=10)
    with RayConnection(num_cpus=2):
        import ray

        slots = discover_slots("cuda")
        assert len(slots) == int(ray.cluster_resources().get("GPU", 0)) >= 1
        ledger = Ledger()
        built = RayBuilder(ledger, config).build([BuilderInput(mod, target)])
        assert built[0].error_msg is None
        runner = RayRunner(ledger, config, "cuda")
        try:
            args = ArgInfo.from_prim_func(mod["main"])
            res = runner.run([RunnerInput(built[0].artifact_path, "cuda", args)])[0].result()
            assert res.error_msg is None and len(res.run_secs) == 3
            entry = ledger.get(built[0].artifact_path)
            assert "sm_" in entry.run.device
        finally:
            runner.shutdown()


@pytest.mark.ray
def test_a_gpu_whose_tvm_has_no_cuda_runtime_is_unusable_and_a_cuda_job_stops_at_once(
    tmp_path,
) -> None:
    """Where TVM's CUDA runtime does not load (here: no driver), a GPU (a logical one) is never a
    runner slot, and a cuda tune fails in one line naming why, before building anything."""
    if tvm.runtime.enabled("cuda"):
        pytest.skip("this TVM has a CUDA runtime")
    import ray
    from typer.testing import CliRunner

    from database import Storage
    from database.queries import stats
    from tests.conftest import TINY
    from tuner.cli import app
    from workers.gpu import unusable_gpus
    from workers.slots import discover_slots

    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False)
    try:
        assert discover_slots("cuda") == []
        (bad,) = unusable_gpus()
        assert bad["gpus"] == 1 and "CUDA runtime" in bad["reason"], bad
        url = f"sqlite:///{tmp_path / 'cuda.db'}"
        args = ["tune", str(TINY), "--target", "cuda", "--arch", "sm_89", "--trials", "4"]
        result = CliRunner().invoke(app, [*args, "--db", url])
    finally:
        ray.shutdown()
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: no usable GPU"), result.output
    assert "CUDA runtime" in lines[0] and "docs/cluster.md#gpu-nodes" in lines[0]
    storage = Storage(url, create=False)
    try:
        counts = stats(storage)
        assert counts["records"] == 0 and counts["jobs"] == 1  # nothing built or measured
    finally:
        storage.dispose()


def test_the_default_gpu_schedule_is_a_candidate_whose_trace_replays() -> None:
    """On a GPU the untuned kernel is dlight's schedule; its trace replays on the workload to
    the same module, so it is recorded (and found again by the compiler) like any candidate."""
    from tuner.compile import default_gpu_schedule, default_gpu_trace
    from tuner.targets import resolve_target

    mod = matmul_mod(64, 64, 64)
    target = resolve_target("cuda", "sm_90")
    sch = default_gpu_trace(mod, target)
    assert len(sch.trace.insts) > 3  # bound to threads, not the unscheduled kernel
    replayed = tvm.s_tir.Schedule(mod)
    sch.trace.apply_to_schedule(replayed, remove_postproc=False)
    tvm.ir.assert_structural_equal(replayed.mod["main"], sch.mod["main"])
    with target:
        whole = default_gpu_schedule(mod)
    tvm.ir.assert_structural_equal(whole["main"].without_attr("tirx.is_scheduled"), sch.mod["main"])
