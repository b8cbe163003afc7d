"""The Relax pipeline shared by task extraction and build, and task extraction itself.

Workloads are matched by the structural hash of the PrimFunc including its attributes, so
extraction and build must prepare the module with exactly the same passes.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms


def backend_passes(target: tvm.target.Target, stage: str) -> list[tvm.transform.Pass]:
    """A stage of TVM's per-backend Relax pipeline (``library_dispatch_passes``,
    ``dataflow_lower_passes``, ``finalize_passes``) for the target's backend."""
    backend = "cuda" if target.kind.name == "cuda" else "cpu_generic"
    module = importlib.import_module(f"tvm.relax.backend.{backend}.pipeline")
    return list(getattr(module, stage)(target))


def _keep(_bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    return call


def legalize() -> tvm.transform.Pass:
    """``LegalizeOps``, except that reshapes stay Relax ops, which the VM runs as views of the
    same memory (no kernel). A reshape to a symbolic shape legalizes to a kernel indexing with
    ``% s``, which ``FuseOps`` leaves alone, while the same reshape at a bucket's constant
    shape fuses into its neighbour: the symbolic module's kernels and its buckets' kernels
    then differ (a ``transpose`` against a ``fused_reshape_transpose``) and never share
    records. Kept as views, both have the same ``transpose``."""
    return relax.transform.LegalizeOps({"relax.reshape": _keep})


def prepare_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """Library dispatch, legalization and fusion: what both extraction and build run first."""
    return [
        *backend_passes(target, "library_dispatch_passes"),
        legalize(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]


def prepare(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """Legalize and fuse a Relax module for ``target``."""
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(prepare_passes(target))(mod)


@dataclass(frozen=True)
class Task:
    """One tensor program to tune: a normalized single-PrimFunc module and its call count."""

    name: str
    mod: tvm.IRModule
    weight: int
    flops: float | None
    symbolic_vars: tuple[str, ...] = ()

    @property
    def is_symbolic(self) -> bool:
        return bool(self.symbolic_vars)


def symbolic_vars_of(func: tvm.tirx.PrimFunc) -> tuple[str, ...]:
    """Names of the symbolic dims in a PrimFunc's buffer shapes."""
    from tuner.symbolic.walk import vars_of

    return tuple(vars_of(func.params))


def extract_tasks(prepared: tvm.IRModule, target: tvm.target.Target) -> list[Task]:
    """The tasks of a prepared module, heaviest first (weights are call counts)."""
    tasks = []
    for ext in ms.relax_integration.extract_tasks(prepared, target):
        mod = ext.dispatched[0]
        func = mod["main"]
        if func.attrs is not None and func.attrs.get("tirx.is_scheduled", False):
            continue
        try:
            flops = float(tvm.s_tir.analysis.estimate_tir_flops(mod))
        except Exception:
            flops = None
        tasks.append(
            Task(
                name=str(ext.task_name),
                mod=mod,
                weight=int(ext.weight),
                flops=flops,
                symbolic_vars=symbolic_vars_of(func),
            )
        )
    return sorted(tasks, key=lambda t: (-(t.flops or 0) * t.weight, t.name))


def normalize(func: tvm.tirx.PrimFunc) -> tvm.IRModule:
    """The module MetaSchedule keys a PrimFunc by (as ``MetaScheduleApplyDatabase`` does)."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    return _normalize_mod(func)
