"""Shape buckets for symbolic dims, and the static tasks a model has at each bucket.

Bucket values per symbolic variable come from, in order of precedence: ``--shape VAR=V1,V2``
on the CLI, ``SHAPE_VARS`` in the model file, the function attribute ``tir_var_upper_bound``
(powers of two up to the bound), or :data:`DEFAULT_BUCKETS`.

Each bucket is specialized at the Relax level (``bind_symbolic_vars``), so a bucket's tasks are
exactly the static kernels the model has at that size; a kernel identical across the values of
a variable (it does not depend on it) is one task, not one per value.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import tvm
from tvm import relax

from tuner.errors import TuneFarmError
from tuner.pipeline import Task, extract_tasks, prepare

DEFAULT_BUCKETS = (1, 16, 64, 256)


def parse_shape_options(options: list[str]) -> dict[str, list[int]]:
    """``["b=1,8", "s=16"]`` → ``{"b": [1, 8], "s": [16]}`` with one-line errors; the values
    of a variable given twice are merged (``["b=1", "b=8"]`` → ``{"b": [1, 8]}``)."""
    out: dict[str, list[int]] = {}
    for opt in options:
        name, sep, values = opt.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise TuneFarmError(f"--shape expects VAR=V1,V2,... (got {opt!r})")
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


def symbolic_vars(mod: tvm.IRModule, entry: str = "main") -> list[str]:
    """Names of the symbolic variables in the signature of the entry function, in order."""
    names: list[str] = []
    for param in mod[entry].params:
        ty = param.ty
        if isinstance(ty, relax.TensorType) and ty.shape is not None:
            for dim in ty.shape.values:
                for var in tvm.tirx.analysis.undefined_vars(dim):
                    if var.name not in names:
                        names.append(var.name)
    return names


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
    """Bucket values for every symbolic variable of the model (see module docstring)."""
    names = symbolic_vars(mod)
    cli, model_defaults = cli or {}, model_defaults or {}
    unknown = sorted(set(cli) - set(names))
    if unknown:
        valid = ", ".join(names) or "none"
        raise TuneFarmError(
            f"--shape names unknown variable(s) {', '.join(unknown)}; model has {valid}"
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


@dataclass(frozen=True)
class BucketTask:
    """A static task and the bucket values it was specialized at (only the variables it
    depends on)."""

    task: Task
    bucket: dict[str, int]


def bucket_tasks(
    mod: tvm.IRModule, target: tvm.target.Target, buckets: dict[str, list[int]]
) -> list[BucketTask]:
    """Static tasks of every bucket combination, deduplicated by structural hash."""
    from database import shash_of

    names = list(buckets)
    seen: dict[str, tuple[Task, list[dict[str, int]]]] = {}
    for combo in itertools.product(*(buckets[n] for n in names)):
        values = dict(zip(names, combo, strict=True))
        for task in extract_tasks(prepare(specialize(mod, values), target), target):
            key = shash_of(task.mod)
            if key in seen:
                old, combos = seen[key]
                seen[key] = (replace(old, weight=max(old.weight, task.weight)), [*combos, values])
            else:
                seen[key] = (task, [values])
    out = []
    for task, combos in seen.values():
        bucket = {
            n: combos[0][n]
            for n in names
            if len(buckets[n]) == 1 or {c[n] for c in combos} != set(buckets[n])
        }
        label = ",".join(f"{k}={v}" for k, v in bucket.items())
        out.append(
            BucketTask(replace(task, name=f"{task.name}[{label}]" if label else task.name), bucket)
        )
    return out
