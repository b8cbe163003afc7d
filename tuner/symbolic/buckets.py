"""Shape buckets for symbolic dims, and the static tasks a model has at each bucket.

Bucket values per symbolic variable come from, in order of precedence: ``--shape VAR=V1,V2``
on the CLI, ``SHAPE_VARS`` in the model file, the function attribute ``tir_var_upper_bound``
(powers of two up to the bound), or :data:`DEFAULT_BUCKETS`.

Each bucket is specialized at the Relax level (``bind_symbolic_vars``), so a bucket's tasks are
exactly the static kernels the model has at that size; a kernel identical across the values of
a variable (it does not depend on it) is one task, not one per value.

Which symbolic kernel a bucket's static task belongs to is decided by structure, never by name:
the symbolic kernel with its variables bound to the bucket's values (:func:`bind_kernel`) is
that static kernel. Names are counters that legalization and fusion hand out in module order,
and they differ between the symbolic module and a specialized one (BERT's feed-forward
``fused_matmul3_add4`` is ``fused_matmul2_add4`` at s=64); two symbolic kernels can also be
one static kernel at a bucket (``q @ k^T`` and ``probs @ v`` at s=64).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace

import tvm
from tvm import relax, tirx

from tuner.errors import TuneFarmError
from tuner.pipeline import Task, extract_tasks, normalize, prepare
from tuner.symbolic.walk import dims_of, vars_of

DEFAULT_BUCKETS = (1, 16, 64, 256)


def parse_shape_options(options: list[str]) -> dict[str, list[int]]:
    """``["b=1,8", "s=16"]`` → ``{"b": [1, 8], "s": [16]}`` with one-line errors; the values
    of a variable given twice are merged (``["b=1", "b=8"]`` → ``{"b": [1, 8]}``). A key may
    also name an input's axis, ``INPUT.AXIS`` (``input_ids.1=16,64``): :func:`choose_buckets`
    resolves it to the variable at that axis."""
    out: dict[str, list[int]] = {}
    for opt in options:
        name, sep, values = opt.partition("=")
        name = name.strip()
        if not sep or not (name.isidentifier() or _axis_key(name) is not None):
            raise TuneFarmError(
                f"--shape expects VAR=V1,V2,... or INPUT.AXIS=V1,V2,... (got {opt!r})"
            )
        try:
            nums = sorted({int(v) for v in values.split(",") if v.strip()})
        except ValueError:
            raise TuneFarmError(
                f"--shape {name}: values must be integers (got {values!r})"
            ) from None
        if not nums or nums[0] < 1:
            raise TuneFarmError(f"--shape {name}: values must be positive integers")
        out[name] = sorted({*out.get(name, []), *nums})
    return out


def _axis_key(key: str) -> tuple[str, int] | None:
    """``"input_ids.1"`` → ``("input_ids", 1)``; None when ``key`` is not ``INPUT.AXIS``."""
    inp, dot, axis = key.rpartition(".")
    if not dot or not inp or not axis.isdigit() or any(c in inp for c in "=, "):
        return None
    return inp, int(axis)


def data_inputs(mod: tvm.IRModule, entry: str = "main") -> list[relax.Var]:
    """The entry function's data inputs (weights kept as inputs, ``num_input``, excluded)."""
    params = list(mod[entry].params)
    attrs = mod[entry].attrs
    num = attrs.get("num_input") if attrs is not None else None
    return params[: int(num)] if num is not None else params


def symbolic_dims(mod: tvm.IRModule, entry: str = "main") -> dict[str, list[tuple[str, int]]]:
    """Each symbolic variable of the entry function's inputs → the ``(input, axis)`` pairs
    whose extent is exactly that variable, in order (an axis like ``2*s`` is not listed)."""
    out: dict[str, list[tuple[str, int]]] = {name: [] for name in symbolic_vars(mod, entry)}
    for param in data_inputs(mod, entry):
        ty = param.ty
        if isinstance(ty, relax.TensorType) and ty.shape is not None:
            for axis, dim in enumerate(ty.shape.values):
                if isinstance(dim, tvm.tirx.Var) and dim.name in out:
                    out[dim.name].append((param.name, axis))
    return out


def lower_bounds(mod: tvm.IRModule, entry: str = "main") -> dict[str, int]:
    """``tir_var_lower_bound`` of the entry function."""
    attrs = mod[entry].attrs
    bounds = attrs.get("tir_var_lower_bound") if attrs is not None else None
    return {str(k): int(v) for k, v in bounds.items()} if bounds else {}


def describe_vars(mod: tvm.IRModule, entry: str = "main") -> str:
    """``s98: input_ids axis 1, 2..256; b: x axis 0`` — where each symbolic variable appears
    and its range, for error messages."""
    lows, highs = lower_bounds(mod, entry), upper_bounds(mod, entry)
    parts = []
    for name, where in symbolic_dims(mod, entry).items():
        text = name
        if where:
            text += ": " + ", ".join(f"{inp} axis {axis}" for inp, axis in where)
        if name in lows or name in highs:
            text += f", {lows.get(name, 1)}..{highs.get(name, 'inf')}"
        parts.append(text)
    return "; ".join(parts) or "none"


def resolve_shape_keys(mod: tvm.IRModule, cli: dict[str, list[int]]) -> dict[str, list[int]]:
    """``cli`` with each ``INPUT.AXIS`` key replaced by the name of the symbolic variable at
    that axis (values of keys naming one variable are merged). One-line errors for an unknown
    input, an axis out of range, a static axis or one whose extent is an expression."""
    inputs = {p.name: p for p in data_inputs(mod)}
    out: dict[str, list[int]] = {}
    for key, values in cli.items():
        name = key
        parsed = None if key.isidentifier() else _axis_key(key)
        if parsed is not None:
            inp, axis = parsed
            param = inputs.get(inp)
            if param is None:
                raise TuneFarmError(
                    f"--shape {key}: the model has no input {inp!r} "
                    f"(inputs: {', '.join(inputs) or 'none'})"
                )
            ty = param.ty
            shape = ty.shape.values if isinstance(ty, relax.TensorType) and ty.shape else None
            if shape is None or axis >= len(shape):
                ndim = len(shape) if shape is not None else "unknown"
                raise TuneFarmError(f"--shape {key}: {inp} has no axis {axis} (ndim {ndim})")
            dim = shape[axis]
            if isinstance(dim, tvm.tirx.IntImm):
                raise TuneFarmError(f"--shape {key}: axis {axis} of {inp} is static ({int(dim)})")
            if not isinstance(dim, tvm.tirx.Var):
                raise TuneFarmError(
                    f"--shape {key}: axis {axis} of {inp} is {dim}, not a variable; "
                    f"address its variables ({describe_vars(mod)})"
                )
            name = dim.name
        out[name] = sorted({*out.get(name, []), *values})
    return out


def symbolic_vars(mod: tvm.IRModule, entry: str = "main") -> list[str]:
    """Names of the symbolic variables in the signature of the entry function, in order."""
    return list(vars_of(mod[entry].params))


def upper_bounds(mod: tvm.IRModule, entry: str = "main") -> dict[str, int]:
    """``tir_var_upper_bound`` of the entry function."""
    attrs = mod[entry].attrs
    bounds = attrs.get("tir_var_upper_bound") if attrs is not None else None
    return {str(k): int(v) for k, v in bounds.items()} if bounds else {}


def choose_buckets(
    mod: tvm.IRModule,
    cli: dict[str, list[int]] | None = None,
    model_defaults: dict[str, list[int]] | None = None,
) -> dict[str, list[int]]:
    """Bucket values for every symbolic variable of the model (see module docstring).

    ``INPUT.AXIS`` keys of ``cli`` are resolved to variable names (:func:`resolve_shape_keys`)
    *in place*, so a caller's later ``cli.get(name)`` sees them."""
    names = symbolic_vars(mod)
    cli, model_defaults = cli if cli is not None else {}, model_defaults or {}
    resolved = resolve_shape_keys(mod, cli)
    cli.clear()
    cli.update(resolved)
    unknown = sorted(set(cli) - set(names))
    if unknown:
        dims = symbolic_dims(mod)
        example = next(((n, w[0]) for n, w in dims.items() if w), None)
        how = (
            f"; address an axis as INPUT.AXIS, e.g. --shape {example[1][0]}.{example[1][1]}="
            f"V1,V2 for {example[0]}"
            if example
            else ""
        )
        raise TuneFarmError(
            f"--shape names unknown variable(s) {', '.join(unknown)}; model has "
            f"{describe_vars(mod)}{how}"
        )
    bounds = upper_bounds(mod)
    out = {}
    for name in names:
        if name in cli:
            if name in bounds and cli[name][-1] > bounds[name]:
                raise TuneFarmError(
                    f"--shape {name}={cli[name][-1]} exceeds the model's tir_var_upper_bound "
                    f"{bounds[name]}"
                )
            out[name] = cli[name]
        elif name in model_defaults:
            out[name] = sorted(set(model_defaults[name]))
        elif name in bounds:
            out[name] = [2**k for k in range(bounds[name].bit_length()) if 2**k <= bounds[name]]
        else:
            out[name] = list(DEFAULT_BUCKETS)
    return out


def specialize(mod: tvm.IRModule, values: dict[str, int], entry: str = "main") -> tvm.IRModule:
    """The module with the entry function's symbolic variables bound to ``values``."""
    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    out[entry] = mod[entry].bind_symbolic_vars(values)
    return out


def bind_kernel(func: tirx.PrimFunc, values: Mapping[str, int]) -> tvm.IRModule | None:
    """The symbolic kernel ``func`` with its variables bound to ``values``, normalized as
    MetaSchedule keys workloads: the static kernel a bucket's own extraction has for it, up to
    the constant folding legalization does at constant shapes (see :func:`kernel_key`). None
    when ``values`` leaves a variable of ``func`` unbound, or TIR cannot bind it; a kernel
    without variables is itself."""
    found = vars_of(func.params)
    if not set(found) <= set(values):
        return None
    if not found:
        return normalize(func)
    consts = {var: tirx.IntImm(str(var.ty), values[name]) for name, var in found.items()}
    analyzer = tvm.sym.Analyzer()
    for var, const in consts.items():
        analyzer.bind(var, const)
    remap = {
        param: tirx.decl_buffer(
            [analyzer.simplify(d) for d in dims_of(param)], param.dtype, name=param.name
        )
        for param in func.params
        if any(not isinstance(d, tirx.IntImm) for d in dims_of(param))
    }
    try:  # new buffers of constant shapes: binds the variables of their dims
        return normalize(func.specialize(remap))
    except (TypeError, ValueError):  # a dim such as ``65 * b`` binds no variable
        pass
    try:  # the variables as scalar parameters, bound, then dropped
        wide = tirx.PrimFunc([*consts, *func.params], func.body, attrs=func.attrs)
        bound = wide.specialize(consts)
    except (TypeError, ValueError):
        return None
    return normalize(tirx.PrimFunc(list(bound.params), bound.body, attrs=bound.attrs))


def kernel_key(mod: tvm.IRModule) -> str:
    """The structural hash of a kernel after TIR's simplifier: a bound symbolic kernel and the
    static kernel it is compare equal (``T.Cast("float32", 16)`` against ``16.0``)."""
    from database import shash_of

    return shash_of(tvm.tirx.transform.StmtSimplify()(mod))


def kernels_at(
    kernels: Mapping[str, tirx.PrimFunc], values: Mapping[str, int]
) -> dict[str, list[str]]:
    """:func:`kernel_key` of each kernel bound to ``values`` -> the names of the kernels that
    are it (several symbolic kernels can be one static kernel at a bucket)."""
    out: dict[str, list[str]] = {}
    for name, func in kernels.items():
        bound = bind_kernel(func, values)
        if bound is not None:
            out.setdefault(kernel_key(bound), []).append(name)
    return out


@dataclass(frozen=True)
class BucketTask:
    """A static task, the bucket values it was specialized at (only the variables it
    depends on) and the kernels of the symbolic module it is at those values (by structure:
    :func:`bind_kernel`; empty when it is none of them, e.g. a kernel that fusion forms
    only at constant shapes)."""

    task: Task
    bucket: dict[str, int]
    kernels: tuple[str, ...] = ()


def bucket_tasks(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    buckets: dict[str, list[int]],
    kernels: Mapping[str, tirx.PrimFunc] | None = None,
) -> list[BucketTask]:
    """Static tasks of every bucket combination, deduplicated by structural hash; with
    ``kernels`` (the symbolic module's kernels by name), each task's :attr:`BucketTask.kernels`."""
    from database import shash_of

    names = list(buckets)
    seen: dict[str, tuple[Task, list[dict[str, int]]]] = {}
    owners: dict[str, list[str]] = {}
    for combo in itertools.product(*(buckets[n] for n in names)):
        values = dict(zip(names, combo, strict=True))
        bound = kernels_at(kernels or {}, values)
        for task in extract_tasks(prepare(specialize(mod, values), target), target):
            key = shash_of(task.mod)
            found = owners.setdefault(key, [])
            if bound:
                found.extend(k for k in bound.get(kernel_key(task.mod), ()) if k not in found)
            if key in seen:
                old, combos = seen[key]
                seen[key] = (replace(old, weight=max(old.weight, task.weight)), [*combos, values])
            else:
                seen[key] = (task, [values])
    out = []
    for key, (task, combos) in seen.items():
        bucket = {
            n: combos[0][n]
            for n in names
            if len(buckets[n]) == 1 or {c[n] for c in combos} != set(buckets[n])
        }
        label = ",".join(f"{k}={v}" for k, v in bucket.items())
        out.append(
            BucketTask(
                replace(task, name=f"{task.name}[{label}]" if label else task.name),
                bucket,
                tuple(owners[key]),
            )
        )
    return out
