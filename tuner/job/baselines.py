"""The untuned default build of each task, timed by the job's workers and recorded."""

from __future__ import annotations

import logging

import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.database import TuningRecord
from tvm.s_tir.meta_schedule.runner import RunnerInput

from database import TuneFarmDatabase
from tuner.job.recorder import measurement
from tuner.pipeline import Task
from tuner.targets import device_kind
from workers.builder import RayBuilder
from workers.ledger import TrialBudget
from workers.runner import RayRunner

log = logging.getLogger("tunefarm.job")


def measure_baselines(
    tasks: list[Task],
    target: tvm.target.Target,
    builder: RayBuilder,
    runner: RayRunner,
    db: TuneFarmDatabase | None = None,
    job_id: int | None = None,
    budget: TrialBudget | None = None,
) -> tuple[list[float | None], int]:
    """Latency of each task's untuned default build, measured by the same workers, and how
    many of them were recorded.

    The default is the unscheduled kernel on a CPU and dlight's schedule on a GPU (where an
    unscheduled kernel would run as host code on device memory). With ``db``, each default is
    also recorded as a candidate (its trace: empty on a CPU), as long as ``budget`` has a slot
    for it (every one is measured all the same), so a task's best record is never slower
    than its untuned build.
    """
    if device_kind(target) == "cuda":  # the default is dlight's schedule, with its trace
        from tuner.compile import default_gpu_trace

        defaults = [default_gpu_trace(t.mod, target) for t in tasks]
    else:  # the unscheduled kernel: an empty trace
        defaults = [tvm.s_tir.Schedule(t.mod) for t in tasks]
    results = builder.build([BuilderInput(d.mod, target) for d in defaults])
    inputs = []
    for task, res in zip(tasks, results, strict=True):
        args = ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])
        inputs.append(RunnerInput(res.artifact_path, device_kind(target), args))
    out: list[float | None] = []
    recorded = 0
    for task, default, res, inp, fut in zip(
        tasks, defaults, results, inputs, runner.run(inputs), strict=True
    ):
        r = fut.result()
        entry = builder.ledger.pop(res.artifact_path)
        secs = [float(s) for s in r.run_secs] if r.run_secs else None
        ok = bool(secs) and r.error_msg is None
        out.append(sum(secs) / len(secs) if ok else None)
        if not ok or db is None or entry is None or entry.cached:
            continue
        # The default schedule is a candidate too: with it recorded, the best record of a
        # task is never slower than the untuned build.
        workload = db.commit_workload(task.mod)
        try:
            trace, _, _, args_info = TuningRecord(
                default.trace, workload, None, target, inp.args_info
            ).as_json()
        except TypeError as err:  # dlight's layout rewrites (an IndexMap) have no JSON form
            log.info("%s: default schedule not recorded: %s", task.name, err)
            continue
        if budget is not None and not budget.take():
            continue
        db.add(measurement(entry, workload, trace, args_info, target, job_id, secs))
        recorded += 1
    return out, recorded
