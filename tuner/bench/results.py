"""What bench measured: per shape a :class:`BenchResult` (TuneFarm tuned and untuned, the
reference, the other runtimes as :class:`RuntimeResult`, paired ratios as :class:`Paired`),
the notes printed under its tables, and latency over a shape profile's traffic."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.errors import TuneFarmError

if TYPE_CHECKING:
    from tuner.kernel_profile import KernelProfile

NOISY = 0.25  # (max - min) / median over the repeats above this: the figure is marked noisy


@dataclass(frozen=True)
class RuntimeResult:
    """Another runtime at one shape: its median time, its outputs checked against the
    reference, or why it did not run (``error``, one line)."""

    name: str  # "torch.compile", "onnxruntime"
    sec: float | None = None
    max_abs_err: float | None = None
    agree: bool | None = None
    warmup_sec: float | None = None  # the first call at this shape (compilation), not timed
    setup_sec: float | None = None  # before any call: the ONNX export and session, the wrapper
    error: str | None = None
    spread: float | None = None  # (max - min) / median of the repeats

    @property
    def ok(self) -> bool:
        return self.error is None and self.sec is not None


@dataclass(frozen=True)
class Paired:
    """Another runtime (or the reference) timed back to back with the tuned build, round after
    round (:func:`time_paired`): the median of the rounds' ratios, their spread ((max - min) /
    median) and the median of each side's own times in those rounds."""

    ratio: float  # its time / tuned's time: above 1, tuned is faster
    spread: float
    sec: float
    tuned_sec: float


@dataclass(frozen=True)
class BenchResult:
    """Latencies (median seconds), ratios and numerics of one benchmark run at one shape."""

    untuned_sec: float
    tuned_sec: float
    numpy_sec: float | None  # the reference's time when the reference is numpy
    max_abs_err: float
    reference: str  # "numpy", "pytorch" or "untuned"
    agree: bool
    tuned_share: float
    untuned_kernels: list[str]
    shape: dict[str, int]
    kernels: dict[str, str]  # symbolic kernel -> the variant that ran ("b8", "generic")
    reference_sec: float | None = None  # the reference implementation's time (numpy, pytorch)
    runtimes: tuple[RuntimeResult, ...] = ()  # the other runtimes (torch.compile, onnxruntime)
    threads: int | None = None  # threads of every runtime (TVM, torch, ORT)
    # (max - min) / median of the repeats of "tuned", "untuned", "reference"
    spread: dict[str, float] = field(default_factory=dict)
    # where the tuned build's time goes (bench(kernels=True)): each kernel timed alone
    profile: KernelProfile | None = None
    # the reference (by its name) and each other runtime timed back to back with the tuned
    # build: the ratios reported
    paired: dict[str, Paired] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.untuned_sec / self.tuned_sec

    @property
    def slower(self) -> bool:
        """The tuned build ran slower than the untuned default at this shape (a defect: the
        dispatch rule should have picked the generic kernel)."""
        return self.tuned_sec > self.untuned_sec

    @property
    def speedup_label(self) -> str:
        """``speedup`` for a table, marked where the tuned build is the slower one."""
        return f"{self.speedup:.2f}x" + (" SLOWER" if self.slower else "")

    @property
    def vs_numpy(self) -> float | None:
        return self.numpy_sec / self.tuned_sec if self.numpy_sec else None

    @property
    def vs_reference(self) -> float | None:
        """Reference time / tuned time (> 1: the tuned build is faster): the paired ratio
        where there is one."""
        if self.reference in self.paired:
            return self.paired[self.reference].ratio
        return self.reference_sec / self.tuned_sec if self.reference_sec else None

    def vs_runtime(self, name: str) -> float | None:
        """``name``'s time / tuned time (> 1: the tuned build is faster): the median of the
        paired rounds where there are some (:func:`time_paired`), else the ratio of the two
        medians; None where it did not run."""
        rt = self.runtime(name)
        if rt is None or not rt.ok or not rt.sec:
            return None
        return self.paired[name].ratio if name in self.paired else rt.sec / self.tuned_sec

    def runtime(self, name: str) -> RuntimeResult | None:
        return next((r for r in self.runtimes if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["profile"] = self.profile.to_dict() if self.profile is not None else None
        out["speedup"], out["vs_numpy"] = self.speedup, self.vs_numpy
        out["vs_reference"] = self.vs_reference
        out["slower_than_untuned"] = self.slower
        out["runtimes"] = {
            r.name: {
                **{k: v for k, v in asdict(r).items() if k != "name"},
                "tuned_speedup": self.vs_runtime(r.name),
            }
            for r in self.runtimes
        }
        return out


def shape_label(shape: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items()) or "static"


def runtime_notes(results: list[BenchResult]) -> list[str]:
    """One line per other runtime: why it did not run, mismatches, torch.compile's warm-up."""
    notes: list[str] = []
    names = list(dict.fromkeys(r.name for res in results for r in res.runtimes))
    for name in names:
        rows = [(res, res.runtime(name)) for res in results]
        rows = [(res, rt) for res, rt in rows if rt is not None]
        failed = [(res, rt) for res, rt in rows if rt.error and rt.sec is None]
        if failed and len(failed) == len(rows):
            notes.append(f"{name}: not run: {failed[0][1].error}")
            continue
        for res, rt in failed:
            notes.append(f"{name} at {shape_label(res.shape)}: not run: {rt.error}")
        bad = [
            shape_label(res.shape) for res, rt in rows if rt.sec is not None and rt.agree is False
        ]
        if bad:
            errs = [rt.max_abs_err for _, rt in rows if rt.agree is False and rt.max_abs_err]
            worst = f" (max err {max(errs):.1e})" if errs else ""
            where = ", ".join(bad)
            notes.append(f"{name}: output MISMATCH against the reference at {where}{worst}")
        warm = [(res, rt.warmup_sec) for res, rt in rows if rt.warmup_sec is not None]
        if name == "torch.compile" and warm:
            per = ", ".join(f"{shape_label(res.shape)} {sec:.1f} s" for res, sec in warm)
            notes.append(
                f"torch.compile: warm-up (compilation) {sum(s for _, s in warm):.1f} s in all, "
                f"excluded from its times: {per}"
            )
        setup = next((rt.setup_sec for _, rt in rows if rt.setup_sec), None)
        if name == "onnxruntime" and setup:
            notes.append(
                f"onnxruntime: setup (the ONNX export, the session) {setup:.1f} s, not timed"
            )
    noisy = noisy_figures(results)
    if noisy:
        load = f" (load average {os.getloadavg()[0]:.1f})" if hasattr(os, "getloadavg") else ""
        notes.append(
            f"noisy: {len(noisy)} figure(s) spread by more than {NOISY:.0%} over the repeats"
            f"{load}: {', '.join(noisy[:6])}{' ...' if len(noisy) > 6 else ''}; re-run on a "
            "quiet machine"
        )
    return notes


def noisy_figures(results: list[BenchResult]) -> list[str]:
    """``runtime@shape`` of every time, and ``runtime/tuned@shape`` of every paired ratio,
    whose spread over the repeats is above :data:`NOISY`."""
    out = []
    for r in results:
        spreads = dict(r.spread)
        spreads |= {rt.name: rt.spread for rt in r.runtimes if rt.spread is not None}
        spreads |= {f"{k}/tuned": v.spread for k, v in r.paired.items()}
        out += [f"{k}@{shape_label(r.shape)}" for k, v in spreads.items() if v > NOISY]
    return out


def slower_shapes(results: list[BenchResult]) -> list[str]:
    """The shapes (``s=1``, ``static``) at which the tuned build ran slower than untuned."""
    return [shape_label(r.shape) for r in results if r.slower]


def slower_note(results: list[BenchResult]) -> str | None:
    """One line naming the shapes where tuned < untuned, or None when there are none."""
    shapes = slower_shapes(results)
    if not shapes:
        return None
    worst = min(results, key=lambda r: r.speedup)
    return (
        f"tuned build SLOWER than the untuned default at {len(shapes)} shape(s): "
        f"{', '.join(shapes)} (worst {worst.speedup:.2f}x)"
    )


# ------------------------------------------------------------------ traffic (--shape-profile)
@dataclass(frozen=True)
class TrafficStats:
    """One runtime's latency over a shape profile's traffic: weighted mean, p50 and p99."""

    mean_sec: float
    p50_sec: float
    p99_sec: float


@dataclass(frozen=True)
class TrafficSummary:
    """Latencies weighted by a shape profile: per runtime (``tuned``, ``untuned``, the
    reference by its name, the other runtimes that ran at every shape) its
    :class:`TrafficStats`; ``weights`` the share of traffic each benched shape stands for."""

    profile: str
    weights: tuple[tuple[str, float], ...]
    stats: dict[str, TrafficStats]

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "weights": dict(self.weights),
            "stats": {k: asdict(v) for k, v in self.stats.items()},
            "tuned_speedup_mean": (
                self.stats["untuned"].mean_sec / self.stats["tuned"].mean_sec
                if "tuned" in self.stats and "untuned" in self.stats
                else None
            ),
        }


def weighted_quantile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """The least value with at least ``q`` of the total weight at or below it."""
    pairs = sorted(zip(values, weights, strict=True))
    total, acc = sum(weights), 0.0
    for value, weight in pairs:
        acc += weight
        if acc >= q * total - 1e-12:
            return value
    return pairs[-1][0]


def traffic_summary(
    results: list[BenchResult], weights: Sequence[float], profile: str
) -> TrafficSummary:
    """Traffic-weighted mean, p50 and p99 latency of each runtime over ``results`` (one per
    benched shape, ``weights[i]`` the share of traffic ``results[i]``'s shape stands for).
    A runtime missing at some shape (did not run there) is left out."""
    if len(results) != len(weights) or not results:
        raise TuneFarmError("traffic summary: one weight per benched shape is needed")
    series: dict[str, list[float | None]] = {
        "tuned": [r.tuned_sec for r in results],
        "untuned": [r.untuned_sec for r in results],
    }
    if results[0].reference != "untuned":
        series[results[0].reference] = [r.reference_sec for r in results]
    for name in dict.fromkeys(rt.name for r in results for rt in r.runtimes):
        series[name] = [
            rt.sec if (rt := r.runtime(name)) is not None and rt.ok else None for r in results
        ]
    stats = {}
    for name, secs in series.items():
        if any(s is None for s in secs):
            continue
        vals = [float(s) for s in secs if s is not None]
        total = sum(weights)
        stats[name] = TrafficStats(
            mean_sec=sum(v * w for v, w in zip(vals, weights, strict=True)) / total,
            p50_sec=weighted_quantile(vals, weights, 0.50),
            p99_sec=weighted_quantile(vals, weights, 0.99),
        )
    labels = tuple((shape_label(r.shape), float(w)) for r, w in zip(results, weights, strict=True))
    return TrafficSummary(profile, labels, stats)
