"""Timings the build's dispatch rule weighs that are not trials (no record, no budget).

A tune times, on its own devices and at each bucket's shapes, after the search (nothing in the
search reads them, so they do not delay its first candidates):

- each one-variable kernel's **generic code** (its untuned default schedule with symbolic
  extents): the rule's cost of leaving a value to the generic kernel;
- each bucket's **range kernel** (the bucket's best schedule transplanted onto the padded
  kernel, :func:`tuner.symbolic.rangekernel.transplant`): symbolic loop
  extents can cost it vectorization and unrolling that its static kernel had (GPT-2's
  ``probs @ V`` range kernel of tile 1 ran 9x slower than the static kernel at 64), so the rule
  prices a range kernel by its own time, not its bucket's static one.

Both are stored in the database's ``generic_runs`` under the kernel's own structural hash
(:meth:`database.TuneFarmDatabase.generic_sec`); a probe already stored for the target is
skipped, so a re-run of a finished job measures only what is missing (a database tuned before
range kernels were timed gets them from ``tunefarm tune`` with the same budget).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import tvm
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput

from database import TuneFarmDatabase, shash_of
from tuner.pipeline import Task
from tuner.symbolic.rangekernel import (
    args_at,
    is_default,
    pad_values,
    range_variants,
    replay,
    rewrite_tiles,
    static_key,
    symbolic_var,
)
from tuner.targets import device_kind
from workers.builder import RayBuilder
from workers.runner import RayRunner

log = logging.getLogger("tunefarm.probes")

# (a bucket task, its bucket, the names of the symbolic kernels it is at that bucket)
Linked = list[tuple[Task, dict[str, int], tuple[str, ...]]]


@dataclass(frozen=True)
class Probe:
    """A kernel to time at one bucket's shapes, stored under ``shash``."""

    shash: str  # the symbolic kernel's structural hash (the generic code's: its family's)
    bucket: dict[str, int]
    kernel: tvm.IRModule  # what is built
    args: tuple[Any, ...]  # its arguments as a record stores them (tensors and scalars)
    what: str = "generic"  # "generic", "range" or "static" (for logs)


def _one_variable(
    linked: Linked, by_name: dict[str, Task]
) -> list[tuple[Task, dict[str, int], Task, tvm.tirx.Var]]:
    """(bucket task, bucket, symbolic kernel task, its variable) for kernels of one variable
    (a kernel may take it as a scalar too, as one of ``65 * b`` rows does)."""
    out = []
    for task, bucket, owners in linked:
        for owner in owners:
            kernel = by_name.get(owner)
            if kernel is None or len(kernel.symbolic_vars) != 1 or len(bucket) != 1:
                continue
            func = kernel.mod["main"]
            var = symbolic_var(func)
            if var is None or any(
                not isinstance(param.ty, tvm.tirx.buffer.BufferType) and not param.same_as(var)
                for param in func.params
            ):
                continue
            out.append((task, bucket, kernel, var))
    return out


def generic_probes(linked: Linked, by_name: dict[str, Task]) -> list[Probe]:
    """One probe of the generic code per symbolic kernel and bucket."""
    out: dict[tuple[str, str], Probe] = {}
    for _, bucket, kernel, var in _one_variable(linked, by_name):
        key = (shash_of(kernel.mod), json.dumps(bucket, sort_keys=True))
        args = tuple(args_at(kernel.mod["main"], var, bucket[var.name]))
        out.setdefault(key, Probe(key[0], bucket, kernel.mod, args))
    return list(out.values())


def range_probes(
    linked: Linked, by_name: dict[str, Task], db: TuneFarmDatabase, target: tvm.target.Target
) -> list[Probe]:
    """One probe per bucket's range kernel: the bucket's best record, transplanted as the
    build does (:func:`tuner.symbolic.dispatch.emit.add_dispatch`; its fine variant too, see
    :func:`~tuner.symbolic.rangekernel.range_variants`), timed at the bucket padded to its
    tile. Buckets whose best record is the default schedule (its range kernel is the
    generic code), kernels the build gives no range kernel (a reduction over ``v`` that no
    pad leaves unchanged) and records that do not transplant have none."""
    out: dict[tuple[str, str], Probe] = {}
    for task, bucket, kernel, var in _one_variable(linked, by_name):
        func = kernel.mod["main"]
        if pad_values(func, var.name) is None:
            continue
        found = db.best(task.mod, target)
        if found is None or is_default(found[0].trace):
            continue
        trace = found[0].trace
        variants = range_variants(func, trace, var.name, rewrite_tiles(func, trace, var.name))
        static = replay(trace, task.mod)
        if not variants or static is None:
            continue
        where = json.dumps(bucket, sort_keys=True)
        for rk in variants:
            args = tuple(rk.args_at(bucket[var.name]))
            what = "range" if rk is variants[0] else "range (fine)"
            mod = tvm.IRModule({"main": rk.func})
            out.setdefault((rk.key, where), Probe(rk.key, bucket, mod, args, what))
        # and the bucket's static kernel beside them: the rule takes the ratio of the two
        static_args = tuple(a.as_json() for a in ArgInfo.from_prim_func(task.mod["main"]))
        key = (static_key(variants[0].key), where)
        static_mod = tvm.IRModule({"main": static})
        out.setdefault(key, Probe(key[0], bucket, static_mod, static_args, "static"))
    return list(out.values())


def _as_built(probe: Probe, target: tvm.target.Target) -> tvm.IRModule:
    """The kernel as the build runs it: on a GPU the generic code is dlight's schedule of the
    symbolic kernel (unscheduled, it would run as host code on device memory)."""
    if probe.what != "generic" or device_kind(target) != "cuda":
        return probe.kernel
    from tuner.compile import default_gpu_schedule

    with target:
        return default_gpu_schedule(probe.kernel)


def measure_probes(
    probes: list[Probe],
    target: tvm.target.Target,
    builder: RayBuilder,
    runner: RayRunner,
    db: TuneFarmDatabase,
    job_id: int | None = None,
) -> int:
    """Time each probe on the job's devices and store it; probes this target already has are
    skipped. A build or run that fails stores nothing (the build then falls back: the default
    schedule's time for generic code, the bucket's static time and a rule for range kernels).
    Returns how many were stored."""
    todo = [p for p in probes if db.generic_sec(p.shash, p.bucket, target) is None]
    if not todo:
        return 0
    budget, builder.budget = builder.budget, None  # not trials
    try:
        results = builder.build([BuilderInput(_as_built(p, target), target) for p in todo])
    finally:
        builder.budget = budget
    futures = runner.run_json(
        [(res.artifact_path, list(p.args)) for p, res in zip(todo, results, strict=True)]
    )
    stored = 0
    for probe, res, fut in zip(todo, results, futures, strict=True):
        r = fut.result()
        entry = builder.ledger.pop(res.artifact_path)
        if not r.run_secs or r.error_msg is not None:
            log.info("%s %s at %s: %s", probe.what, probe.shash, probe.bucket, r.error_msg)
            continue
        device = entry.run.device if entry is not None and entry.run else None
        secs = [float(s) for s in r.run_secs]
        stored += db.add_generic_run(
            probe.shash, probe.bucket, target, secs, device=device, job_id=job_id
        )
    return stored
