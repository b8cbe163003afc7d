"""``bench`` and ``time_build``: the untuned and tuned builds, the model's reference and the
other runtimes on the same inputs at each shape (the protocol: :mod:`tuner.bench`)."""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import tvm

from database import TuneFarmDatabase
from tuner.bench.results import BenchResult
from tuner.bench.runtimes import (
    RUNTIMES,
    prepare_runtimes,
    run_others,
    runtime_result,
    runtimes_for,
)
from tuner.bench.timing import (
    InstrumentedVM,
    bench_threads,
    compare_outputs,
    interleave,
    random_inputs,
    time_paired,
)
from tuner.compile import BuildReport, compile
from tuner.errors import TuneFarmError
from tuner.kernel_profile import KernelProfile
from tuner.model import Model


def sweep_values(buckets: list[int], bound: int | None = None) -> list[int]:
    """The buckets plus off-bucket values: between neighbours, and above the largest (at most
    ``bound``, the variable's ``tir_var_upper_bound``)."""
    out = set(buckets)
    for lo, hi in itertools.pairwise(buckets):
        if hi - lo > 1:
            out.add((lo + hi) // 2 + 1)
    above = buckets[-1] * 2 + 1 if bound is None else min(buckets[-1] * 2 + 1, bound)
    if above > buckets[-1]:
        out.add(above)
    return sorted(out)


def _variants(report: BuildReport, called: list[str]) -> dict[str, str]:
    """Which variant of each symbolic kernel ran: a bucket kernel is named after its kernel
    (``fused_matmul_add_s16``), so a called name belongs to the longest kernel name that
    prefixes it (``fused_matmul_add_add1_s16`` is a variant of ``fused_matmul_add_add1``,
    not of ``fused_matmul_add``); a name that is itself a kernel is that kernel's generic
    variant."""
    names = {k.name for k in report.kernels}
    ran: dict[str, str] = {}
    for c in called:
        if c in names or "_dispatch" in c:
            continue
        owners = [n for n in names if c.startswith(n + "_")]
        if owners:
            owner = max(owners, key=len)
            ran.setdefault(owner, c[len(owner) + 1 :])
    return {k.name: ran.get(k.name, "generic") for k in report.kernels if k.symbolic}


def bench(
    model: Model,
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    shapes: list[dict[str, int]] | None = None,
    *,
    repeat: int = 5,
    min_repeat_ms: int = 50,
    runtimes: Sequence[str] | None = None,
    traffic: Mapping[str, Mapping[int, float]] | None = None,
    kernels: bool = False,
) -> list[BenchResult]:
    """Build untuned and tuned once, then run both, the model's reference and the other
    runtimes (``runtimes``, default :func:`runtimes_for` the model; ``()`` for none) on the
    same random inputs at each shape (values of the symbolic variables). ``traffic`` builds
    the tuned module as ``build --shape-profile`` does (see :func:`tuner.compile.compile`).
    With ``kernels``, each result also says where the tuned build's time goes
    (:attr:`BenchResult.profile`), measured after the timings.

    Weights kept as inputs (``model.params``) are passed as they are; only the data inputs
    are random."""
    if target.kind.name != "llvm":
        raise TuneFarmError("tunefarm bench runs locally on the CPU; use an llvm target")
    names = runtimes_for(model) if runtimes is None else tuple(dict.fromkeys(runtimes))
    unknown = [n for n in names if n not in RUNTIMES]
    if unknown:
        raise TuneFarmError(
            f"unknown runtime(s) {', '.join(unknown)} (known: {', '.join(RUNTIMES)})"
        )
    from tuner.symbolic.buckets import upper_bounds

    bounds = upper_bounds(model.mod)
    for shape in shapes or []:
        for name, value in shape.items():
            if name in bounds and value > bounds[name]:
                raise TuneFarmError(
                    f"{name}={value} exceeds the model's tir_var_upper_bound {bounds[name]}"
                )
    # One thread count for all: TVM's pool reads TVM_NUM_THREADS at its first use (its own
    # default on x86 is half the CPUs), torch and ORT are told.
    threads = bench_threads(target)
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    if model.path.suffix == ".pt2" or (model.reference and model.reference.name == "pytorch"):
        import torch

        torch.set_num_threads(threads)
    runs = [
        (shape, random_inputs(model.mod["main"], shape, np.random.default_rng(0), model.num_inputs))
        for shape in shapes or [{}]
    ]
    # The reference (numpy, PyTorch) and the other runtimes are run and timed first, before
    # any TVM kernel: after a call TVM's pool threads spin (TVM_THREAD_POOL_SPIN_COUNT) and
    # take the cores from OpenBLAS's and PyTorch's threads (numpy ran 25x slower right after
    # TVM calls).
    min_sec = min_repeat_ms / 1e3
    with tempfile.TemporaryDirectory(prefix="tunefarm-bench-") as tmp:
        others = prepare_runtimes(model, names, threads, tmp)
    reference = model.reference.fn if model.reference is not None else None
    refs, shape_timers = run_others(reference, others, runs, repeat, min_sec)
    untuned, _ = compile(model.mod, target, None)
    tuned_ex, report = compile(model.mod, target, db, traffic=traffic)
    untuned_vm, tuned_vm = InstrumentedVM(untuned), InstrumentedVM(tuned_ex)
    results = []
    for i, ((shape, args), ref) in enumerate(zip(runs, refs, strict=True)):
        full = [*args, *model.params]
        ref_untuned, _, untuned_timer = untuned_vm.first(full, min_repeat_ms)
        outs, called, tuned_timer = tuned_vm.first(full, min_repeat_ms)
        medians = interleave({"untuned": untuned_timer, "tuned": tuned_timer}, repeat)
        # then the reference and the others back to back with tuned: the ratios users read
        pairs = {
            (model.reference.name if name == "" and model.reference else name): timer
            for name, timer in shape_timers[i].items()
        }
        paired = time_paired(tuned_timer, pairs, repeat)
        reference_sec = None
        reference_name, expected = "untuned", ref_untuned
        spread = {k: v[1] for k, v in medians.items()}
        if model.reference is not None and ref is not None:
            expected, reference_sec, spread["reference"] = ref
            reference_name = model.reference.name
        max_err, agree = compare_outputs(outs, expected)
        results.append(
            BenchResult(
                untuned_sec=medians["untuned"][0],
                tuned_sec=medians["tuned"][0],
                numpy_sec=reference_sec if reference_name == "numpy" else None,
                max_abs_err=max_err,
                reference=reference_name,
                agree=agree,
                tuned_share=report.tuned_share,
                untuned_kernels=report.untuned,
                shape=dict(shape),
                kernels=_variants(report, called),
                reference_sec=reference_sec,
                runtimes=tuple(runtime_result(o, i, expected) for o in others),
                threads=threads,
                spread=spread,
                profile=replace(
                    tuned_vm.profile(full, medians["tuned"][0]),
                    evidence=report.function_evidence(),
                )
                if kernels
                else None,
                paired=paired,
            )
        )
    return results


def time_build(
    model: Model,
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    shapes: list[dict[str, int]],
    *,
    repeat: int = 3,
    min_repeat_ms: int = 50,
    traffic: Mapping[str, Mapping[int, float]] | None = None,
) -> list[KernelProfile]:
    """The tuned build at each shape: its time per call (median of ``repeat``) and its
    kernels timed alone (:mod:`tuner.kernel_profile`), built as ``bench`` builds it
    (``traffic``: as ``build --shape-profile``), on random inputs; no reference, no other
    runtime (the planner's calibration between stages)."""
    if target.kind.name != "llvm":
        raise TuneFarmError("timing a build runs locally on the CPU; use an llvm target")
    os.environ.setdefault("TVM_NUM_THREADS", str(bench_threads(target)))
    ex, _ = compile(model.mod, target, db, traffic=traffic)
    vm = InstrumentedVM(ex)
    rng = np.random.default_rng(0)
    out = []
    for shape in shapes:
        args = [*random_inputs(model.mod["main"], shape, rng, model.num_inputs), *model.params]
        _, _, timer = vm.first(args, min_repeat_ms)
        out.append(vm.profile(args, interleave({"tuned": timer}, repeat)["tuned"][0]))
    return out
