"""CUDA: candidates cross-compile on machines without a GPU; runners measure on each GPU."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import tvm
from tvm.s_tir import dlight as dl
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerInput

from database import TargetKey
from tests.conftest import DATA, matmul_mod, store_bucket_record
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


@pytest.mark.slow
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


def _first_valid(mod: tvm.IRModule, target: tvm.target.Target, name: str) -> Any:
    """The first schedule sampled from MetaSchedule's design spaces for ``mod`` that its
    postprocessors accept (the design space's decisions are drawn with the context's seed)."""
    from tvm.s_tir import meta_schedule as ms

    for seed in range(1, 6):
        ctx = ms.TuneContext(
            mod=mod,
            target=target,
            space_generator="post-order-apply",
            task_name=name,
            rand_state=seed,
        )
        for space in ctx.generate_design_space():
            sch = tvm.s_tir.Schedule(mod)
            space.trace.apply_to_schedule(sch, remove_postproc=True)
            if all(p.apply(sch) for p in ctx.space_generator.postprocs):
                return sch
    return None


def _sampled_cuda_records(model: Any, target: tvm.target.Target, buckets: dict, path: Path) -> Any:
    """A database with, per bucket task, one schedule sampled from MetaSchedule's CUDA design
    space (first one its postprocessors accept), stored as a tune would store it: a CUDA
    database made without a GPU."""

    from database import Storage, TuneFarmDatabase, shash_of
    from tuner.pipeline import extract_tasks, prepare
    from tuner.symbolic.buckets import bucket_tasks

    db = TuneFarmDatabase(Storage(f"sqlite:///{path}"), target)
    family = {t.name: shash_of(t.mod) for t in extract_tasks(prepare(model.mod, target), target)}
    for bt in bucket_tasks(model.mod, target, buckets):
        base = bt.task.name.split("[", 1)[0]
        sch = _first_valid(bt.task.mod, target, base)
        if sch is None:
            continue
        store_bucket_record(db, bt, family[base], sch.trace, 1e-5, target)
    return db


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_a_cuda_dispatch_runs_its_pad_and_crop_copies_on_the_gpu(tmp_path: Path) -> None:
    """The copies a bucket branch adds around its kernel are marked scheduled (serial, for the
    CPU); on a GPU target they must get a GPU schedule too, or they are compiled as host code
    that reads device memory (a crash at the first call between buckets)."""
    import re

    from tuner.compile import compile as tf_compile
    from tuner.model import load_model
    from tuner.targets import resolve_target

    target = resolve_target("cuda", "sm_90")
    model = load_model(DATA / "softmax_n.py")
    db = _sampled_cuda_records(model, target, {"n": [16, 64]}, tmp_path / "cuda.db")
    ex, report = tf_compile(model.mod, target, db)
    (softmax,) = report.kernels
    # values between buckets run a bucket's range kernel: padded in, cropped out
    assert softmax.source == "buckets", report
    assert re.search(r"n=\d+\.\.\d+: n\d+ \(tile \d+\)", softmax.dispatch), softmax.dispatch
    modules = [m for top in ex.mod.imports for m in (top, *top.imports)]
    (cuda,) = [m for m in modules if m.kind == "cuda"]
    kernels = set(
        re.findall(r"__global__ void(?: __launch_bounds__\(\d+\))? (\w+)\(", cuda.inspect_source())
    )
    copies = {k for k in kernels if k.startswith("tunefarm_")}
    assert {k.split("_")[1].rstrip("0123456789") for k in copies} == {"pad", "crop"}, kernels


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_a_cuda_tune_times_the_generic_code_as_the_build_runs_it() -> None:
    """The tune times each symbolic kernel's generic code at every bucket (the build weighs
    it against the bucket kernels). On a GPU that code is dlight's schedule of the symbolic
    kernel: the probe builds it so (its unscheduled form binds no threads, and runs as host
    code), and a CPU probe stays the kernel as it is."""
    from tuner.job.probes import Probe, _as_built
    from tuner.model import load_model
    from tuner.pipeline import extract_tasks, prepare
    from tuner.symbolic.rangekernel import args_at, symbolic_var
    from tuner.targets import resolve_target

    target = resolve_target("cuda", "sm_90")
    model = load_model(DATA / "softmax_n.py")
    (task,) = extract_tasks(prepare(model.mod, target), target)
    var = symbolic_var(task.mod["main"])
    probe = Probe("k", {"n": 16}, task.mod, tuple(args_at(task.mod["main"], var, 16)))
    built = _as_built(probe, target)
    result, data = build_artifact(tvm.ir.save_json(built), TargetKey.of(target).json)
    assert result.ok and data[:4] == b"\x7fELF", result.error_msg
    # threads bound: unscheduled, it builds all the same, as host code that reads device memory
    assert "threadIdx.x" in built.script() and "threadIdx.x" not in task.mod.script()
    assert _as_built(probe, resolve_target("llvm")) is task.mod
