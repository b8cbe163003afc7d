"""What a candidate costs to compile, and picking a round by the model's order per second.

A task's candidates differ most in compile time by the auto-unroll limit MetaSchedule samples
(0, 16, 64 or 512 on a CPU): on a 2-core host a QKV candidate unrolled to 512 compiled in a
median 0.47 s against 0.16 s for the others, a GELU one in up to 6 s (LLVM's loop vectorizer
analyses 512 copies of an erf polynomial and declines). A warm cost model, which knows the
unrolled schedules are often the fastest, proposed them for 31% of its candidates and spent
70% of a job's compile time on them (docs/time-to-quality.md). With
``TuneConfig(compile_aware=True)`` a task's search therefore asks its evolutionary search for
:data:`OVERSAMPLE` times a round, in the model's order, and keeps the round's worth with the
most rank weight per expected compile second (:func:`pick`), the expected seconds learnt from
the task's own builds by unroll limit (:class:`CompileCosts`), and before its first build from
the builds its kernel family's records in the database took (``TaskSpec.compile_prior``), so
the first round is priced too. Opt-in: at the same trials it took a warm QKV job to 0.90x
the wall time at the same final latency on a Xeon, and gained nothing on the MLP or the
transformer block (the MLP's warm finals re-timed 1.12x slower); priced from the history, on
an AMD EPYC where warm and cold jobs already took the same time, it changed no wall time and
no final (docs/time-to-quality.md).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# candidates the evolutionary search is asked for, per candidate a round measures
OVERSAMPLE = 2
# MetaSchedule's annotations whose value is the sampled auto-unroll limit
UNROLL_KEYS = ("meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit")


def unroll_of(trace: Any) -> int:
    """A candidate's auto-unroll limit: the value its trace sampled for MetaSchedule's unroll
    annotation (0 when it has none)."""
    sampled: list[tuple[Any, int]] = []  # (the sampled variable, its value)
    limit = 0
    for inst in trace.insts:
        kind = inst.kind.name
        if kind == "SampleCategorical" and inst.outputs:
            decision = trace.decisions.get(inst)
            if decision is not None:
                candidates = inst.attrs[0]
                sampled.append((inst.outputs[0], int(candidates[int(decision)])))
        elif kind == "Annotate" and inst.attrs and str(inst.attrs[0]) in UNROLL_KEYS:
            value = inst.inputs[1]
            for var, chosen in sampled:
                if var.same_as(value):
                    limit = max(limit, chosen)
                    break
            else:
                if hasattr(value, "value"):  # an immediate, not a sampled variable
                    limit = max(limit, int(value.value))
    return limit


def unroll_of_json(trace_json: Any) -> int:
    """:func:`unroll_of` read from a trace as a record stores it (``[insts, decisions]``, or
    its JSON text), without parsing it against a kernel; 0 for anything unreadable."""
    try:
        insts, decisions = json.loads(trace_json) if isinstance(trace_json, str) else trace_json
        chosen = {int(i): d for i, d in decisions}
        sampled: dict[str, int] = {}
        limit = 0
        for i, (kind, inputs, attrs, outputs) in enumerate(insts):
            if kind == "SampleCategorical" and outputs and i in chosen:
                sampled[outputs[0]] = int(attrs[0][int(chosen[i])])
            elif kind == "Annotate" and attrs and attrs[0] in UNROLL_KEYS:
                value = inputs[1]
                if isinstance(value, str) and value in sampled:
                    limit = max(limit, sampled[value])
                elif isinstance(value, int):
                    limit = max(limit, value)
        return limit
    except (ValueError, TypeError, IndexError, KeyError):
        return 0


def _by_limit(builds: Iterable[tuple[int, float]]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for unroll, sec in builds:
        if sec > 0:
            out.setdefault(int(unroll), []).append(float(sec))
    return out


def _median(by_limit: dict[int, list[float]], unroll: int | None = None) -> float | None:
    """The median of ``unroll``'s builds (None: every build's)."""
    secs = [s for v in by_limit.values() for s in v] if unroll is None else by_limit.get(unroll, [])
    return statistics.median(secs) if secs else None


@dataclass
class CompileCosts:
    """Compile seconds of a task's built candidates by unroll limit: what a new candidate of a
    limit is expected to take. The task's own builds of the limit first (their median); else
    the ``prior`` (builds of the kernel family's records in the database, by limit) scaled to
    this job's builds (the median ratio of own to prior over the limits both have); else the
    median of every own build, else of the prior."""

    seen: dict[int, list[float]] = field(default_factory=dict)
    prior: dict[int, list[float]] = field(default_factory=dict)

    @classmethod
    def from_prior(cls, builds: Iterable[tuple[int, float]]) -> CompileCosts:
        """Costs that start from ``builds`` ((unroll limit, seconds) each) as the prior."""
        return cls(prior=_by_limit(builds))

    def add(self, unroll: int, sec: float) -> None:
        """One build of a candidate with ``unroll``, ``sec`` seconds (not positive: ignored)."""
        if sec > 0:
            self.seen.setdefault(unroll, []).append(float(sec))

    def typical(self) -> float | None:
        """The median of every own build (None: none yet)."""
        return _median(self.seen)

    def _scale(self) -> float:
        """Own seconds per prior second: the median ratio over the limits both have, else the
        ratio of all builds' medians (1 without own builds)."""
        common = [
            _median(self.seen, u) / _median(self.prior, u)  # type: ignore[operator]
            for u in self.seen
            if u in self.prior
        ]
        if common:
            return statistics.median(common)
        own, prior = self.typical(), _median(self.prior)
        return own / prior if own and prior else 1.0

    def expect(self, unroll: int) -> float | None:
        """Expected compile seconds of a candidate with ``unroll`` (None: no build seen, none
        in the prior)."""
        own = _median(self.seen, unroll)
        if own is not None:
            return own
        prior = _median(self.prior, unroll)
        if prior is not None:
            return prior * self._scale()
        return self.typical() or _median(self.prior)


def pick(costs: list[float | None], n: int) -> list[int]:
    """Which ``n`` of candidates given in the model's order (best first) with their expected
    compile seconds to measure, as their indices in that order: the ``n`` with the most rank
    weight per expected second, the weight falling linearly from 1 for the model's first to
    ``1/len`` for its last. All of them when there are no more than ``n``; the model's first
    ``n`` when a cost is unknown (nothing built yet)."""
    m = len(costs)
    if m <= n or any(c is None or c <= 0 for c in costs):
        return list(range(min(n, m)))
    value = [(1.0 - i / m) / float(c) for i, c in enumerate(costs)]  # type: ignore[arg-type]
    best = sorted(range(m), key=lambda i: (-value[i], i))[:n]
    return sorted(best)


__all__ = ["OVERSAMPLE", "UNROLL_KEYS", "CompileCosts", "pick", "unroll_of", "unroll_of_json"]
