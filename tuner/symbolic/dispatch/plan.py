"""From the database to each symbolic kernel's dispatch: its buckets' best records, their
range kernels and timings, the intervals each kernel serves."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import tirx

from database import TuneFarmDatabase, shash_of
from tuner.pipeline import normalize
from tuner.symbolic.buckets import bind_kernel
from tuner.symbolic.dispatch.rule import BucketKernel, KernelDispatch, PadBuffer, offers_variant
from tuner.symbolic.rangekernel import (
    coefficient,
    free_inputs,
    instance_points,
    instances,
    is_default,
    pad_values,
    range_variants,
    replay,
    rewrite_tiles,
    static_key,
    symbolic_var,
    work_degree,
)


@dataclass
class KernelPlan:
    """A symbolic kernel's dispatch and the bucket kernels (each with its function) it picks."""

    dispatch: KernelDispatch
    kernels: list[tuple[BucketKernel, tirx.PrimFunc]] = field(default_factory=list)
    pads: tuple[float, ...] = ()  # per kernel input: the value its padding holds
    # the positions of the kernel inputs whose padding may hold anything (free_inputs)
    free: frozenset[int] = frozenset()


def timed_range_secs(
    db: TuneFarmDatabase,
    variants: Sequence[Any],
    bucket: dict[str, int],
    target: Any,
    mean_sec: float,
    degree: int,
    var_name: str | None = None,
) -> list[float | None]:
    """Each range variant's time at ``bucket`` as the rule prices it (None: the tune did not
    time it): its probe at the bucket padded to the tile, scaled back to the bucket,
    relative to the static kernel timed beside it, whose record's time (``mean_sec``) the
    static kernels are priced by (:mod:`tuner.job.probes`). The build and the planner
    both price by it."""
    if not variants:
        return []
    (value,) = bucket.values() if var_name is None else (bucket[var_name],)
    beside = db.generic_sec(static_key(variants[0].key), bucket, target)
    out: list[float | None] = []
    for rk in variants:
        sec = db.generic_sec(rk.key, bucket, target)
        if sec is not None:
            if beside:
                sec *= mean_sec / beside
            sec *= (value / rk.padded(value)) ** degree
        out.append(sec)
    return out


def plan_kernel(
    name: str,
    func: tirx.PrimFunc,
    target: Any,
    db: TuneFarmDatabase,
    traffic: Mapping[str, Mapping[int, float]],
) -> KernelPlan:
    """The dispatch of the symbolic kernel ``name`` (``func``) from ``db``'s records of its
    buckets on ``target``, its intervals weighed by ``traffic`` where given."""
    norm = normalize(func)
    var = symbolic_var(norm["main"])
    if var is None:
        return KernelPlan(KernelDispatch(name, None, reason="several symbolic variables"))
    usable = bucket_workloads(db, norm["main"], var.name)
    if not usable:
        return KernelPlan(KernelDispatch(name, var.name, reason="no bucket records"))
    pads = pad_values(norm["main"], var.name)
    if pads is None:
        return KernelPlan(KernelDispatch(name, var.name, reason=f"reduces over {var.name}"))
    inputs = norm["main"].params[:-1]
    free = free_inputs(norm["main"], var.name, pads)
    plan = KernelPlan(
        KernelDispatch(name, var.name),
        pads=tuple(pads.get(p.name, 0.0) for p in inputs),
        free=frozenset(i for i, p in enumerate(inputs) if p.name in free),
    )
    generic: list[tuple[int, float]] = []
    default_won = 0  # buckets whose best record is the untuned default schedule
    family = shash_of(norm)
    degree = work_degree(norm["main"], var.name)
    below = [0, *(b[var.name] for b, _, _ in usable)]  # each bucket's lower neighbour
    for (bucket, static_mod, bound), lower in zip(usable, below, strict=False):
        # the generic code's own time at the bucket, measured by the tune (constant extents
        # let LLVM vectorize what symbolic ones do not: BERT's attention matmuls ran 10x
        # slower generic than their untuned static kernel at s=16); databases tuned before
        # it was measured have only the static default schedule's time, a lower bound
        generic_sec = db.generic_sec(family, bucket, target)
        default_sec = db.default_schedule_sec(static_mod, target)
        if generic_sec is not None or default_sec is not None:
            generic.append((bucket[var.name], default_sec if generic_sec is None else generic_sec))
        found = db.best(static_mod, target)
        if found is None:
            continue
        record, level, mean_sec = found
        ev = found.evidence
        default = is_default(record.trace)
        if default and generic_sec is None:
            default_won += 1
            continue  # the default schedule won, and its static kernel is all that was timed
        value = bucket[var.name]
        kname = f"{name}_{var.name}{value}"
        rewrite = rewrite_tiles(norm["main"], record.trace, var.name)
        # the default schedule's range kernel is the generic kernel
        variants = () if default else range_variants(norm["main"], record.trace, var.name, rewrite)
        timed = timed_range_secs(db, variants, bucket, target, mean_sec, degree, var.name)
        for rk, range_sec in zip(variants, timed, strict=True):
            # its own time where the tune measured it; else the static kernel's time under
            # the tile-1 rule (a fine variant is offered only with its own time)
            fine = rk is not variants[0]
            if offers_variant(range_sec is not None, fine, rk.tile, degree):
                sec = mean_sec if range_sec is None else range_sec
                bk = BucketKernel(
                    value, rk.tile, f"{kname}_fine" if fine else kname, level, sec, evidence=ev
                )
                plan.kernels.append((bk, _mark(rk.func, name, f"{var.name}={value}", rk.tile)))
        static = replay(record.trace, bound)
        if static is not None:  # the kernel that was measured, for values padded to the bucket
            bk = BucketKernel(
                value, value, f"{kname}_static", level, mean_sec, static=True, evidence=ev
            )
            plan.kernels.append((bk, _mark(static, name, f"{var.name}={value}", value)))
            # and its static instances between the bucket below and this one
            bind = functools.partial(_bind_at, norm["main"], var.name)
            found = instances(rewrite, instance_points(lower, value), bind) if rewrite else []
            for at, func_at in found:
                sec = mean_sec * (at / value) ** degree
                bk = BucketKernel(
                    at, at, f"{kname}_at{at}", level, sec, static=True, origin=value, evidence=ev
                )
                plan.kernels.append((bk, _mark(func_at, name, f"{var.name}={value}@{at}", at)))
                # and at its point alone, unpadded, as the bucket's exact kernel (ViT at b=4:
                # without it every instance padded b=4 to 4, a copy in and a copy out)
                exact = BucketKernel(
                    at, 1, f"{kname}_at{at}_exact", level, sec, static=True, origin=value,
                    evidence=ev,
                )  # fmt: skip
                plan.kernels.append((exact, _mark(func_at, name, f"{var.name}={value}@{at}", 1)))
            if value > 1:  # and at the bucket itself, where it pads nothing (its own copy,
                # marked tile 1, so that a report says which of the two ran)
                exact = BucketKernel(
                    value, 1, f"{kname}_exact", level, mean_sec, static=True, evidence=ev
                )
                plan.kernels.append((exact, _mark(static, name, f"{var.name}={value}", 1)))
    if not plan.kernels:
        reason = (
            "the default schedule measured fastest at every bucket"
            if default_won == len(usable)
            else "no transplantable record"
        )
        plan.dispatch = KernelDispatch(
            name, var.name, reason=reason, default_won=default_won == len(usable)
        )
    else:
        plan.dispatch = KernelDispatch(
            name,
            var.name,
            tuple(k for k, _ in plan.kernels),
            generic=tuple(generic),
            degree=degree,
            buffers=pad_buffers(norm["main"], var.name),
            traffic=tuple(sorted(traffic.get(var.name, {}).items())),
        )
    return plan


def bucket_workloads(
    db: TuneFarmDatabase, func: tirx.PrimFunc, var_name: str
) -> list[tuple[dict[str, int], tvm.IRModule, tvm.IRModule]]:
    """The stored static workloads of the symbolic kernel ``func`` at buckets of ``var_name``,
    as ``(bucket, stored workload, func bound to the bucket)``: ``func`` bound to each bucket
    value the database knows (:func:`bind_kernel`) where that kernel is a stored workload
    (found by structure, whatever the kernels were named when tuned), else the workload
    linked to ``func`` at that bucket when it was tuned. Traces are replayed on the bound
    kernel, never on the stored one: a record serves only the kernel it replays on."""
    bound: dict[int, tvm.IRModule | None] = {}  # func bound to each value, bound once

    def bound_at(value: int) -> tvm.IRModule | None:
        if value not in bound:
            bound[value] = bind_kernel(func, {var_name: value})
        return bound[value]

    out: dict[int, tuple[dict[str, int], tvm.IRModule, tvm.IRModule]] = {}
    # a bucket of several variables serves too: its workload is this kernel's by structure (a
    # job tuned at one value of another variable labels every task with it, context=256)
    for bucket in sorted(db.bucket_values(), key=len):
        value = bucket.get(var_name)
        if value is not None and value not in out:
            mod = bound_at(value)
            if mod is not None and db.has_workload(mod):
                out[value] = (bucket, mod, mod)
    for bucket, stored in db.family_workloads(shash_of(normalize(func))):
        if set(bucket) == {var_name} and bucket[var_name] not in out:
            mod = bound_at(bucket[var_name])
            if mod is not None:
                out[bucket[var_name]] = (bucket, stored, mod)
    return [out[v] for v in sorted(out)]


def pad_buffers(func: tirx.PrimFunc, var_name: str) -> tuple[PadBuffer, ...]:
    """The buffers a bucket branch of ``func`` pads (its inputs) and crops (its output)."""
    out = []
    params = list(func.params)
    for i, param in enumerate(params):
        shape = list(getattr(param, "shape", None) or ())
        coefs = [c for d in shape if (c := coefficient(d, var_name)) is not None]
        elements = math.prod(int(d) for d in shape if isinstance(d, tirx.IntImm))
        axes, elements = len(coefs), elements * math.prod(coefs)
        out.append(PadBuffer(elements, axes, output=i == len(params) - 1))
    return tuple(out)


def _bind_at(func: tirx.PrimFunc, var_name: str, value: int) -> tvm.IRModule | None:
    return bind_kernel(func, {var_name: value})


def _mark(func: tirx.PrimFunc, kernel: str, bucket: str, tile: int) -> tirx.PrimFunc:
    """A bucket kernel as added to the module. The kernel and bucket attributes keep
    identical schedules apart (of two buckets, or of two kernels that are one static kernel
    at a bucket), so which kernel and bucket served a call stays observable."""
    return (
        func.without_attr("global_symbol")
        .with_attr("tirx.is_scheduled", True)
        .with_attr("tunefarm.kernel", kernel)
        .with_attr("tunefarm.bucket", bucket)
        .with_attr("tunefarm.tile", tile)
    )
