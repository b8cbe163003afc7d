"""Verdicts on the benchmarks' targets from paired seeds (issue 65), pooled over runs and hosts.

A **pair** is one seed of a benchmark: the compared variants run back to back (the order
alternating from pair to pair), so that whatever the machine did then hits both sides.
``python -m benchmarks time-to-quality`` and ``planner`` append each finished pair to a pairs
file (JSON Lines, one pair a line, with the host, its CPU model and the git commit), and
``--resume FILE`` adds pairs to it in a later run on any host: pairs are only ever compared
within themselves, then pooled. Each target gets the verdict of
:func:`tuner.paired.judge` on the pairs' log-ratios: **met** (the whole 90% bootstrap interval
on the good side of the target), **missed** (all on the bad side) or **undecided**, with the
number of pairs it would take.

The targets (:data:`TARGETS`):

- time to 90% of the best (``time-to-quality``, per workload ``qkv``, ``mlp``,
  ``transformer``): TuneFarm cold (``tunefarm``) at most 0.7x stock MetaSchedule's, warm
  (``tunefarm-warm``) at most 0.35x. Within a pair the level is 90% of the better final
  latency of the two runs compared (head to head); a run that never got there counts its
  whole wall time (a bound: such pairs are counted in the table's ``bound`` column);
- the planned build's traffic-weighted mean latency (``planner``, per model and traffic
  profile): at most 0.85x powers of two's, and at most 0.9x the better hand choice's (the
  hand choice with the lower geometric mean over the cell's pairs; each pair compares with
  that one's run of the same seed).

Results files made before pairs files (one JSON per run, seeds outermost, variants side by
side) are read as pairs too: each seed of a workload (or of a model and profile) is a pair.

Usage::

    python -m benchmarks verdicts FILE... [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.paired import LEVEL, Judgement, judge

ROOT = Path(__file__).resolve().parent.parent
TTQ, PLANNER = "time-to-quality", "planner"
TTQ_LEVEL = 0.9  # time to this share of the best


@dataclass(frozen=True)
class Target:
    """``variant``'s figure over ``baseline``'s at most ``ratio``, in each cell of a benchmark."""

    benchmark: str
    variant: str
    baseline: str  # "best-hand": the cell's better hand choice
    ratio: float
    what: str

    def __post_init__(self) -> None:
        if self.benchmark not in (TTQ, PLANNER) or not self.ratio > 0:
            raise ValueError(f"bad target {self}")


TARGETS: tuple[Target, ...] = (
    Target(TTQ, "tunefarm", "stock", 0.7, "cold, time to 90% / stock's"),
    Target(TTQ, "tunefarm-warm", "stock", 0.35, "warm, time to 90% / stock's"),
    Target(PLANNER, "planned", "pow2", 0.85, "planned / powers of two"),
    Target(PLANNER, "planned", "best-hand", 0.9, "planned / better hand choice"),
)


# --------------------------------------------------------------------------- pair records
def git_commit() -> str | None:
    """The checkout's commit (short), ``-dirty`` when tracked files differ; None outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def pair_header() -> dict[str, Any]:
    """What every pair record says about where it ran: host, CPU model, commit, date."""
    from benchmarks.common import machine_header

    machine = machine_header()
    return {
        "host": machine["hostname"],
        "cpu": machine["cpu"],
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def alternate(variants: list[str], index: int, fixed_first: int = 0) -> list[str]:
    """The run order of pair ``index``: ``variants`` as given for even pairs, reversed for odd
    ones; the first ``fixed_first`` stay first (a wall-time budget is stock's wall time)."""
    head, rest = variants[:fixed_first], variants[fixed_first:]
    return head + (rest if index % 2 == 0 else rest[::-1])


def append_pair(path: Path, record: dict[str, Any]) -> None:
    """Append one pair (one JSON line) to ``path`` and flush it to disk."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


class PairsError(ValueError):
    """A file that holds no pairs this module can read."""


def pairs_of(path: Path, benchmark: str) -> list[dict[str, Any]]:
    """The pairs of ``benchmark`` in a JSON Lines pairs file (a line cut short by a killed run
    is skipped)."""
    pairs = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("benchmark") == benchmark:
            pairs.append(rec)
    return pairs


def read_pairs(path: Path) -> list[dict[str, Any]]:
    """The pairs of ``path``: a pairs file (JSON Lines; a line cut short by a killed run is
    skipped), or an older time-to-quality or planner results file, each seed a pair."""
    try:
        text = path.read_text()
    except OSError as err:
        raise PairsError(f"{path}: {err.strerror or err}") from err
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and "workloads" in data:
        return _ttq_pairs(data, path.name)
    if isinstance(data, dict) and "cases" in data:
        return _planner_pairs(data, path.name)
    pairs = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # the last line of a killed run
        if isinstance(rec, dict) and rec.get("benchmark") in (TTQ, PLANNER) and "runs" in rec:
            pairs.append(rec | {"source": path.name})
    if not pairs:
        raise PairsError(f"{path}: no time-to-quality or planner pairs in it")
    return pairs


def last_settings(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """The protocol settings of a pairs file's last pair (what ``--resume`` continues)."""
    return dict(pairs[-1].get("settings") or {}) if pairs else {}


def resume(
    parser: argparse.ArgumentParser, args: argparse.Namespace, benchmark: str
) -> list[dict[str, Any]]:
    """``--resume FILE``: ``args`` given the protocol settings of FILE's last ``benchmark``
    pair; FILE's pairs of that benchmark. A usage error (``parser.error``) for a file that is
    not a pairs file or holds none."""
    path: Path = args.resume
    if path.suffix != ".jsonl":
        parser.error(f"--resume takes a pairs file (.jsonl), not {path}")
    if not path.is_file():
        parser.error(f"--resume: no such file {path}")
    try:
        if benchmark in (TTQ, PLANNER):
            pairs = [p for p in read_pairs(path) if p["benchmark"] == benchmark]
        else:
            pairs = pairs_of(path, benchmark)
    except PairsError as err:
        parser.error(str(err))
    if not pairs:
        parser.error(f"{path} holds no {benchmark} pairs")
    for key, value in last_settings(pairs).items():
        setattr(args, key, value)
    return pairs


def next_seed(pairs: list[dict[str, Any]], cell: dict[str, str]) -> int:
    """The first seed after every pair of ``cell`` (``{"workload": "mlp"}``, ...)."""
    seeds = [p["seed"] for p in pairs if all(p.get(k) == v for k, v in cell.items())]
    return max(seeds) + 1 if seeds else 0


def _cpu(machine: Any) -> str | None:
    from benchmarks.common import cpu_of

    return cpu_of(machine)


def _seed_pairs(
    data: dict[str, Any],
    source: str,
    settings: dict[str, Any],
    runs: list[dict[str, Any]],
    order_key: str,
    cell: dict[str, Any],
) -> list[dict[str, Any]]:
    """An older results file's ``runs`` of one cell grouped by seed, one pair per seed
    (``order_key``: the field naming each run's variant; runs without a seed left out)."""
    by_seed: dict[int, list[dict[str, Any]]] = {}
    for r in runs:
        if "seed" in r:
            by_seed.setdefault(r["seed"], []).append(r)
    return [
        {
            **cell,
            "seed": seed,
            "order": [r[order_key] for r in seed_runs],
            "cpu": _cpu(data.get("machine")),
            "commit": None,
            "settings": settings,
            "runs": seed_runs,
            "source": source,
        }
        for seed, seed_runs in sorted(by_seed.items())
    ]


def _ttq_pairs(data: dict[str, Any], source: str) -> list[dict[str, Any]]:
    """An older time-to-quality results file's seeds, one pair each."""
    settings = {
        k: data.get(k)
        for k in ("trials_per_task", "budget", "history_trials_per_task", "history_per_seed")
    }
    out = []
    for workload, res in data["workloads"].items():
        cell = {"benchmark": TTQ, "workload": workload}
        out += _seed_pairs(data, source, settings, res.get("runs", []), "variant", cell)
    return out


def _planner_pairs(data: dict[str, Any], source: str) -> list[dict[str, Any]]:
    """An older planner results file's (model, profile, seed) runs, one pair each."""
    settings = {k: data.get(k) for k in ("trials", "stages")}
    out = []
    for case in data["cases"]:
        cell = {"benchmark": PLANNER, "model": case["model"], "profile": case["profile"]}
        out += _seed_pairs(data, source, settings, case.get("runs", []), "strategy", cell)
    return out


# --------------------------------------------------------------------------- figures of a pair
@dataclass(frozen=True)
class Observation:
    """One pair's ratio for a target; ``bound``: ``"upper"`` when the baseline's side is a
    bound (its run never got there: the true ratio is at most this), ``"lower"`` when the
    variant's is (at least this), None when both are measured."""

    ratio: float
    bound: str | None = None


def time_to(curve: list[list[float]], level_sec: float) -> float | None:
    """Seconds until a best-so-far curve ``[(t, sec), ...]`` was at most ``level_sec``."""
    return next((t for t, sec in curve if sec <= level_sec), None)


def ttq_observation(pair: dict[str, Any], variant: str, baseline: str) -> Observation | None:
    """``variant``'s time to 90% of the better final of the two runs, over ``baseline``'s (a
    run that never got there: its wall time, and the observation is a bound); None when the
    pair lacks either run or a final."""
    runs = {r["variant"]: r for r in pair["runs"]}
    a, b = runs.get(variant), runs.get(baseline)
    if not (a and b and a.get("curve") and b.get("curve")):
        return None
    best = min(a["curve"][-1][1], b["curve"][-1][1])
    times = [time_to(r["curve"], best / TTQ_LEVEL) for r in (a, b)]
    ta, tb = (t if t is not None else r["wall_sec"] for t, r in zip(times, (a, b), strict=True))
    if not (ta > 0 and tb > 0):
        return None
    bound = "lower" if times[0] is None else "upper" if times[1] is None else None
    return Observation(ta / tb, bound)


def planner_observation(pair: dict[str, Any], variant: str, baseline: str) -> Observation | None:
    """``variant``'s traffic-weighted mean latency over ``baseline``'s in this pair."""
    means = {r["strategy"]: r.get("mean_sec") for r in pair["runs"] if not r.get("error")}
    a, b = means.get(variant), means.get(baseline)
    return Observation(a / b) if a and b else None


def cell_of(pair: dict[str, Any]) -> str:
    """The cell a pair belongs to: its workload, or its model and profile."""
    if pair["benchmark"] == TTQ:
        return pair["workload"]
    return f"{pair['model']} {pair['profile']}"


def protocol_of(pair: dict[str, Any]) -> str:
    """The protocol settings of a pair, in a few words."""
    s = pair.get("settings") or {}
    if pair["benchmark"] == TTQ:
        return f"{s.get('trials_per_task')}/task, {s.get('budget') or 'trials'}"
    return f"{s.get('trials')} trials, {s.get('stages')} stage(s)"


def best_hand(pairs: list[dict[str, Any]]) -> str | None:
    """The hand choice with the lower geometric mean over ``pairs`` (of those run in all)."""
    scores = {}
    for hand in ("hand-a", "hand-b"):
        means = [
            r["mean_sec"]
            for p in pairs
            for r in p["runs"]
            if r.get("strategy") == hand and r.get("mean_sec")
        ]
        if means:
            scores[hand] = statistics.fmean(math.log(m) for m in means)
    return min(scores, key=scores.__getitem__) if scores else None


# --------------------------------------------------------------------------- verdicts
@dataclass(frozen=True)
class Row:
    """A target's verdict in one cell."""

    target: Target
    cell: str
    baseline: str  # the baseline actually compared with (best-hand resolved)
    judgement: Judgement | None  # None: no pair has both sides
    upper: int  # pairs whose ratio is an upper bound (the baseline never got there)
    lower: int  # pairs whose ratio is a lower bound (the variant never got there)
    cpus: tuple[str, ...]
    protocols: tuple[str, ...]
    sources: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        j = self.judgement
        iv = j.interval if j else None
        return {
            "benchmark": self.target.benchmark,
            "target": f"{self.target.variant} / {self.baseline} <= {self.target.ratio}",
            "what": self.target.what,
            "cell": self.cell,
            "pairs": iv.pairs if iv else 0,
            "ratio": iv.ratio if iv else None,
            "interval": [iv.low, iv.high] if iv else None,
            "verdict": j.verdict if j else "undecided",
            "pairs_needed": j.needed if j else None,
            "upper_bounds": self.upper,
            "lower_bounds": self.lower,
            "cpus": list(self.cpus),
            "protocols": list(self.protocols),
            "sources": list(self.sources),
        }


def verdicts(
    pairs: Iterable[dict[str, Any]], targets: Iterable[Target] = TARGETS, level: float = LEVEL
) -> list[Row]:
    """Each target's verdict in each cell the pairs cover, pooling every pair of the cell."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in pairs:
        cells.setdefault((p["benchmark"], cell_of(p)), []).append(p)
    rows = []
    for target in targets:
        observe: Callable[[dict[str, Any], str, str], Observation | None] = (
            ttq_observation if target.benchmark == TTQ else planner_observation
        )
        for (bench, cell), mine in cells.items():
            if bench != target.benchmark:
                continue
            baseline = target.baseline
            if baseline == "best-hand":
                baseline = best_hand(mine) or "best-hand"
            used = [(p, observe(p, target.variant, baseline)) for p in mine]
            used = [(p, o) for p, o in used if o is not None]
            if not used and not any(
                r.get("variant", r.get("strategy")) == target.variant
                for p in mine
                for r in p["runs"]
            ):
                continue  # the variant never ran in this cell: no row
            logs = [math.log(o.ratio) for _, o in used]
            rows.append(
                Row(
                    target,
                    cell,
                    baseline,
                    judge(logs, target.ratio, level) if logs else None,
                    sum(o.bound == "upper" for _, o in used),
                    sum(o.bound == "lower" for _, o in used),
                    tuple(sorted({str(p.get("cpu")) for p, _ in used})),
                    tuple(sorted({protocol_of(p) for p, _ in used})),
                    tuple(dict.fromkeys(p.get("source", "?") for p, _ in used)),
                )
            )
    return rows


def table(rows: list[Row]) -> str:
    """The verdict table (markdown): target, cell, pairs, ratio, interval, verdict, bounds."""
    lines = [
        f"| target | cell | pairs | ratio (geo. mean) | {round(LEVEL * 100)}% interval | "
        "verdict | bounds (upper/lower) | protocol | from |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        j = row.judgement
        t = row.target
        head = f"| {t.what} ≤ {t.ratio:g}x (`{t.variant}` / `{row.baseline}`) | {row.cell} |"
        if j is None:
            lines.append(f"{head} 0 | - | - | undecided (no pair ran both) | - | - | - |")
            continue
        iv = j.interval
        lines.append(
            f"{head} {iv.pairs} | {iv.ratio:.2f}x | {iv.low:.2f}x-{iv.high:.2f}x | "
            f"**{j.describe()}** | {row.upper}/{row.lower} | {'; '.join(row.protocols)} | "
            f"{', '.join(Path(s).stem for s in row.sources)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks verdicts",
        description="The targets' verdicts from paired seeds, pooling every file given.",
    )
    parser.add_argument("files", nargs="+", type=Path, help="pairs files or older results files")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    pairs: list[dict[str, Any]] = []
    for path in args.files:
        try:
            pairs += read_pairs(path)
        except PairsError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    rows = verdicts(pairs)
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        print(table(rows))
        print(
            f"\n{len(pairs)} pairs from {len(args.files)} file(s). Bounds: pairs where one run "
            "never reached 90% of the better final and counts its wall time (upper: the "
            "baseline's, the ratio is at most this; lower: the variant's, at least this)."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())


def add_pair_args(parser: argparse.ArgumentParser) -> None:
    """``--out`` and ``--resume``, the options every paired benchmark takes."""
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results JSON path (this run's summary; its pairs go beside it, .pairs.jsonl)",
    )
    parser.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="FILE",
        help="append pairs to this pairs file, with its protocol settings and the next seeds",
    )
