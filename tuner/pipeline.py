"""The Relax pipeline shared by task extraction and build, and task extraction itself.

Workloads are matched by the structural hash of the PrimFunc including its attributes, so
extraction and build must prepare the module with exactly the same passes.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax, topi
from tvm.relax import PyExprMutator, expr_functor
from tvm.s_tir import meta_schedule as ms

EXACT_MATH_ENV = "TUNEFARM_EXACT_MATH"


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


_FAST = {"relax.tanh": topi.fast_tanh, "relax.erf": topi.fast_erf}
_POWERS = (2.0, 3.0)


def _small_power(call: relax.Call) -> int | None:
    """The exponent of ``power(x, c)`` for a scalar constant c of 2 or 3, else None."""
    exponent = call.args[1]
    if not isinstance(exponent, tvm.ir.expr.Constant):
        return None
    value = np.asarray(exponent.value.numpy())
    if value.size != 1 or float(value) not in _POWERS:
        return None
    return int(float(value))


@expr_functor.mutator
class _FastMath(PyExprMutator):
    """See :func:`fast_math`."""

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        op = call.op
        if not isinstance(op, tvm.ir.Op) or not call.args:
            return call
        ty = call.args[0].ty
        if not isinstance(ty, relax.TensorType) or ty.dtype != "float32":
            return call
        if op.name in _FAST:
            return self.builder_.call_te(_FAST[op.name], call.args[0])
        if op.name == "relax.sigmoid":
            return self.builder_.call_te(_sigmoid, call.args[0])
        if op.name == "relax.power" and (n := _small_power(call)) is not None:
            x = out = call.args[0]
            for _ in range(n - 1):
                out = self.builder_.emit(relax.op.multiply(out, x))
            return out
        return call


def _sigmoid(x: tvm.te.Tensor) -> tvm.te.Tensor:
    """``1 / (1 + exp(-x))`` with TVM's vectorizable ``fast_exp``."""
    return topi.divide(tvm.tirx.const(1.0, x.dtype), topi.add(1.0, topi.fast_exp(topi.negative(x))))


@tvm.transform.module_pass(opt_level=0, name="TuneFarmFastMath")
def fast_math(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """float32 ``tanh``, ``erf`` and ``sigmoid`` as TVM's vectorizable approximations
    (``topi.fast_tanh``/``fast_erf``/``fast_exp``: errors near float32 rounding, as ONNX
    Runtime's), and ``power(x, 2|3)`` as multiplies. LLVM lowers ``tanh``, ``exp`` and
    ``pow`` to scalar libm calls that no schedule vectorizes: GPT-2's ``gelu_new``
    (``tanh`` of ``x + 0.044715 * x**3``) took 38% of the tuned model, and 12 us instead of
    357 us rewritten. ``exp`` stays exact: softmax range kernels pad with -inf and rely on
    ``exp(-inf) = 0`` (see :mod:`tuner.symbolic.rangekernel`). CPU targets only (GPUs
    have their own fast ``tanh``); off when the
    ``TUNEFARM_EXACT_MATH`` environment variable is 1 (for tuning and build alike: the
    kernels differ, so records of one do not serve the other)."""
    mutator = _FastMath(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


def _is_gpu(target: tvm.target.Target) -> bool:
    return bool(relax.pipeline.BackendDispatcher.is_gpu_target(target))


def exact_math() -> bool:
    """Whether ``TUNEFARM_EXACT_MATH=1`` turns :func:`fast_math` off."""
    return os.environ.get(EXACT_MATH_ENV, "0").strip() not in ("", "0")


def prepare_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """Library dispatch, legalization and fusion: what both extraction and build run first."""
    return [
        *backend_passes(target, "library_dispatch_passes"),
        *([] if exact_math() or _is_gpu(target) else [fast_math]),
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
