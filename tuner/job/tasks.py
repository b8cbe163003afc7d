"""A job's tasks: the model's kernels (at every bucket of a symbolic model), each workload
registered with its task's name, and the warning when the budget cannot cover them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import tvm

from database import TuneFarmDatabase, shash_of
from tuner.errors import TuneFarmError
from tuner.job.probes import Probe, generic_probes
from tuner.pipeline import Task, extract_tasks, prepare
from tuner.symbolic.buckets import bucket_tasks, choose_buckets, symbolic_vars

log = logging.getLogger("tunefarm.job")

# a task's share that covers it: its untuned default measured and one candidate searched
TRIALS_TO_COVER_A_TASK = 2


@dataclass(frozen=True)
class JobTasks:
    """What a job tunes: ``tasks``, and for a symbolic model the buckets chosen, each bucket
    task linked to its bucket and symbolic kernels (for the dispatch rule's probes)."""

    tasks: list[Task]
    buckets: dict[str, list[int]] = field(default_factory=dict)
    linked: list[tuple[Task, dict[str, int], tuple[str, ...]]] = field(default_factory=list)
    by_name: dict[str, Task] = field(default_factory=dict)
    probes: list[Probe] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def recorded(self, db: TuneFarmDatabase, target: tvm.target.Target) -> int:
        """Records the tasks have on ``target``."""
        return sum(db.count_records(t.mod, target) for t in self.tasks)


def job_tasks(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    buckets: dict[str, list[int]] | None = None,
) -> JobTasks:
    """The tasks of ``mod`` for ``target``, every workload registered in ``db`` under its
    task's name (a bucket task under its symbolic kernel's, with its family and bucket)."""
    all_tasks = extract_tasks(prepare(mod, target), target)
    if symbolic_vars(mod):
        found = _bucket_tasks(mod, target, db, buckets, all_tasks)
    else:
        tasks = [t for t in all_tasks if not t.is_symbolic]
        for t in tasks:
            db.workload_id(t.mod, create=True, task_name=t.name)
        skipped = [
            f"{t.name} (symbolic: {', '.join(t.symbolic_vars)})" for t in all_tasks if t.is_symbolic
        ]
        found = JobTasks(tasks=tasks, skipped=skipped)
    if not found.tasks:
        raise TuneFarmError("the model has no task to tune")
    return found


def _bucket_tasks(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    buckets: dict[str, list[int]] | None,
    all_tasks: list[Task],
) -> JobTasks:
    by_name = {t.name: t for t in all_tasks}
    kernels = {name: t.mod["main"] for name, t in by_name.items()}
    chosen = choose_buckets(mod, buckets)
    tasks = []
    linked: list[tuple[Task, dict[str, int], tuple[str, ...]]] = []
    for bt in bucket_tasks(mod, target, chosen, kernels):
        # the family is the symbolic kernel this task is at its bucket, by structure (names
        # differ between the symbolic and the specialized module); else the kernel of its
        # name, whose records the build only replays on its own kernel
        base = bt.task.name.split("[", 1)[0]
        owner = bt.kernels[0] if bt.kernels else base
        family = (shash_of(by_name[owner].mod), bt.bucket) if owner in by_name else None
        db.workload_id(bt.task.mod, create=True, task_name=base, family=family)
        tasks.append(bt.task)
        linked.append((bt.task, bt.bucket, bt.kernels))
    probes = generic_probes(linked, by_name)
    return JobTasks(tasks, chosen, linked, by_name, probes)


def thin_budget_warning(found: JobTasks, new_trials: int) -> str | None:
    """A warning when ``new_trials`` cannot give every task its default and one searched
    candidate (:data:`TRIALS_TO_COVER_A_TASK`), naming the buckets chosen; None when it can
    (or when nothing new is to be measured)."""
    n = len(found.tasks)
    want = TRIALS_TO_COVER_A_TASK * n
    if new_trials <= 0 or new_trials >= want:
        return None
    shapes = "; ".join(
        f"{var} = {', '.join(map(str, vals))}" for var, vals in found.buckets.items()
    )
    where = f" ({len(found.linked)} bucket tasks at {shapes})" if shapes else ""
    other = ", fewer buckets (--shape VAR=V1,V2) or a plan (--shape-profile)" if shapes else ""
    return (
        f"{new_trials} trial(s) cannot cover {n} task(s){where}: each needs its untuned "
        f"default measured and one candidate searched ({want} trials); most tasks stay "
        f"untuned. Give --trials {want} or more{other}"
    )
