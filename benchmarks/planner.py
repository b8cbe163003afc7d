"""Buckets from traffic (issue 19's benchmark): the planner's buckets and trial split against
powers-of-two buckets and hand choices of three buckets, at the same total trials, over three
traffic profiles, measured as a user would: ``tunefarm tune`` then ``tunefarm bench
--shape-profile`` (the traffic-weighted mean latency of the tuned build), each in its own
process and its own fresh database.

- **Profiles** (:func:`make_profile`, deterministic): ``narrow`` (values around 30, spread 5),
  ``bimodal`` (60% around 8, 40% around 0.4 x the model's bound) and ``long-tail`` (log-normal,
  median 24, to the bound), 20,000 samples each.
- **Strategies** at the same ``--trials``: ``planned`` (``tune --shape-profile``; the plan's
  predicted mean is read from ``tunefarm plan --json`` on the same empty database first),
  ``pow2`` (the planner's own alternative, :func:`tuner.planner.powers_of_two`) and
  two hand choices of three buckets from the profile's quantiles (``hand-a``: p50, p90, max;
  ``hand-b``: p25, p75, p99), each rounded up as the planner's candidates are
  (:func:`~tuner.planner.tileable`); ``best hand`` is the better
  of the two as measured.
- **Figures** per (model, profile): the measured traffic-weighted mean of each strategy (median
  over seeds, with the range), planned / pow2, planned / best hand, and the plan's predicted
  mean over the measured one (the prediction is kernel time only; the VM's own overhead is
  not modelled), and the runs benched while other processes and the hypervisor's steal took
  more than :data:`~benchmarks.common.DISTURBED_CORES` of CPU (``disturbed``; each run's
  ``other_cores`` and ``steal_cores``, :func:`~benchmarks.common.foreign_load`).

- **Paired seeds**: each (model, profile, seed) is a pair, its strategies run back to back
  in an order alternating from seed to seed; each finished pair is appended, one line, to the
  pairs file beside the results (``<results>.pairs.jsonl``, with the host, its CPU model and
  the git commit), so a run killed midway keeps its finished pairs. ``--resume PAIRS.jsonl``
  appends to an existing pairs file on any host, with its settings (:data:`PROTOCOL`) and as
  many seeds as ``--seeds`` names, after its last; ``python -m benchmarks verdicts`` judges the
  targets from the pairs (:mod:`benchmarks.verdict`). The defaults (both models, three
  profiles, ``--trials 64``, seeds 0 and 1) fit about an hour on a 2-core machine: one seed
  of one model is some 15 minutes (six to eight tunes of 64 trials, about 80 s each, the hand
  and powers-of-two bucket sets tuned once per model and seed and benched over each profile
  that chose them, and twelve benches).

Usage::

    python -m benchmarks planner [--models mlp transformer] [--profiles narrow bimodal long-tail]
                                 [--trials 64] [--seeds 0 1] [--out PATH] [--resume PAIRS.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import disturbed, foreign_load, machine_header, results_path
from benchmarks.models import _cli, _json_of
from benchmarks.verdict import add_pair_args, alternate, append_pair, pair_header, resume
from tuner.planner import powers_of_two, tileable
from tuner.symbolic.profile import profile_from_mapping

ROOT = Path(__file__).resolve().parent.parent
# name -> (model file, symbolic variable, its upper bound)
WORKLOADS: dict[str, tuple[str, str, int]] = {
    "mlp": ("examples/mlp_dynamic.py", "b", 512),
    "transformer": ("examples/transformer_block_dynamic.py", "s", 256),
}
PROFILES = ("narrow", "bimodal", "long-tail")
STRATEGIES = ("planned", "pow2", "hand-a", "hand-b")
# the options a pairs file records and ``--resume`` continues with
PROTOCOL = ("trials", "stages", "strategies", "models", "profiles")
SAMPLES = 20_000


def make_profile(kind: str, bound: int, samples: int = SAMPLES) -> dict[int, int]:
    """A histogram (value -> count) of ``samples`` draws of the named traffic, in 1..bound."""
    import numpy as np

    rng = np.random.default_rng(19)
    if kind == "narrow":
        draws = rng.normal(30, 5, samples)
    elif kind == "bimodal":
        low = rng.normal(8, 2, int(samples * 0.6))
        high = rng.normal(0.4 * bound, 0.04 * bound, samples - low.size)
        draws = np.concatenate([low, high])
    elif kind == "long-tail":
        draws = rng.lognormal(math.log(24), 0.9, samples)
    else:
        raise ValueError(f"unknown profile {kind!r} (known: {', '.join(PROFILES)})")
    values = np.clip(np.rint(draws), 1, bound).astype(int)
    uniq, counts = np.unique(values, return_counts=True)
    return {int(v): int(c) for v, c in zip(uniq, counts, strict=True)}


def quantile(hist: dict[int, int], q: float) -> int:
    """The least value with at least ``q`` of the traffic at or below it."""
    return profile_from_mapping({"v": hist}, "benchmark").quantile("v", q)


def hand_buckets(hist: dict[int, int], bound: int) -> dict[str, list[int]]:
    """Two hand choices of three buckets from the profile's quantiles."""
    pick = lambda qs: sorted({tileable(quantile(hist, q), bound) for q in qs})  # noqa: E731
    return {"hand-a": pick((0.5, 0.9, 1.0)), "hand-b": pick((0.25, 0.75, 0.99))}


def _run_one(
    model: str,
    var: str,
    profile: Path,
    strategy: str,
    buckets: list[int] | None,
    trials: int,
    seed: int,
    env: dict[str, str],
    work: Path,
    stages: int = 2,
    tuned: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Tune (fresh database) and bench over the profile; the traffic mean and what it took.

    ``tuned``: an earlier run of the same buckets, model and seed under another profile (a
    tune with ``--shape`` does not read the profile): its database is benched over this
    profile instead of tuning the same buckets again."""
    if tuned is not None:
        keep = ("db", "buckets", "tune_wall_sec", "trials_measured")
        out = {"strategy": strategy, "seed": seed, "tune_shared_with": tuned["profile"]}
        return _bench(model, profile, env, {**out, **{k: tuned[k] for k in keep}})
    url = f"sqlite:///{work}/{strategy}-{seed}.db"
    out: dict[str, Any] = {"strategy": strategy, "seed": seed, "db": url}
    tune = ["tune", model, "--trials", str(trials), "--db", url, "--seed", str(seed), "--json"]
    if buckets is None:
        tune += ["--stages", str(stages)]
        plan_args = ["plan", model, "--shape-profile", str(profile), "--trials", str(trials)]
        plan = _cli([*plan_args, "--db", url, "--json"], env, 600)
        if plan.returncode != 0:
            return {**out, "error": f"plan failed: {(plan.stderr or plan.stdout).strip()[-300:]}"}
        data = _json_of(plan.stdout)
        out["predicted_sec"] = data["after_sec"]
        out["alternatives"] = data.get("alternatives", {})
        buckets = list(data["buckets"])
        tune += ["--shape-profile", str(profile)]
    else:
        tune += ["--shape", f"{var}={','.join(map(str, buckets))}"]
    out["buckets"] = buckets
    start = time.perf_counter()
    proc = _cli(tune, env, 3600)
    out["tune_wall_sec"] = time.perf_counter() - start
    if proc.returncode != 0:
        return {**out, "error": f"tune failed: {(proc.stderr or proc.stdout).strip()[-300:]}"}
    tuned = _json_of(proc.stdout)
    out["trials_measured"] = tuned.get("trials_measured")
    if "stages" in tuned:  # the build dispatches over every bucket any stage tuned
        out["stage_buckets"] = [st["plan"]["buckets"] for st in tuned["stages"]]
        out["buckets"] = sorted({b for bs in out["stage_buckets"] for b in bs})
        out["replanned_sec"] = tuned["plan"]["after_sec"]
    return _bench(model, profile, env, out)


def _bench(model: str, profile: Path, env: dict[str, str], out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with the traffic mean of ``bench --shape-profile`` on its tuned database."""
    bench = ["bench", model, "--db", out["db"], "--shape-profile", str(profile), "--json"]
    with foreign_load() as other:
        proc = _cli([*bench, "--runtimes", "none"], env, 1800)
    out["other_cores"] = other.cores  # other processes' CPU while it ran
    out["steal_cores"] = other.steal  # and the hypervisor's
    try:
        stats = _json_of(proc.stdout)["traffic"]["stats"]
    except (ValueError, KeyError):
        return {**out, "error": f"bench failed: {(proc.stderr or proc.stdout).strip()[-300:]}"}
    out["mean_sec"] = stats["tuned"]["mean_sec"]
    out["p99_sec"] = stats["tuned"]["p99_sec"]
    out["untuned_mean_sec"] = stats["untuned"]["mean_sec"]
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over seeds per strategy, and the issue's three ratios (None where a strategy
    has no figure)."""
    by: dict[str, list[float]] = {}
    for r in runs:
        if r.get("mean_sec"):
            by.setdefault(r["strategy"], []).append(r["mean_sec"])
    med = {k: statistics.median(v) for k, v in by.items()}
    rng = {k: [min(v), max(v)] for k, v in by.items()}
    hands = [k for k in ("hand-a", "hand-b") if k in med]
    best_hand = min(hands, key=lambda k: med[k]) if hands else None
    # the prediction of the plan the job ended with (re-planned from the first stages'
    # measurements), and of the first plan, made from an empty database
    predicted = [
        r.get("replanned_sec") or r["predicted_sec"] for r in runs if r.get("predicted_sec")
    ]
    first = [r["predicted_sec"] for r in runs if r.get("predicted_sec")]
    out: dict[str, Any] = {"median_sec": med, "range_sec": rng, "best_hand": best_hand}
    planned = med.get("planned")
    out["planned_vs_pow2"] = planned / med["pow2"] if planned and "pow2" in med else None
    out["planned_vs_best_hand"] = planned / med[best_hand] if planned and best_hand else None
    out["predicted_vs_measured"] = (
        statistics.median(predicted) / planned if planned and predicted else None
    )
    out["first_predicted_vs_measured"] = (
        statistics.median(first) / planned if planned and first else None
    )
    # repeats that spread by more than 25% are reported as noisy, not as ratios
    out["noisy"] = sorted(k for k, (lo, hi) in rng.items() if med[k] and (hi - lo) / med[k] > 0.25)
    # benched while other processes took CPU (their figure measures that work too)
    out["disturbed"] = [
        f"{r['strategy']}@{r['seed']}"
        for r in runs
        if disturbed(r.get("other_cores"), r.get("steal_cores"))
    ]
    return out


def run(
    models: list[str],
    profiles: list[str],
    trials: int,
    seeds: list[int],
    stages: int = 2,
    log: Any = print,
    save: Callable[[dict[str, Any]], None] | None = None,
    strategies: tuple[str, ...] = STRATEGIES,
    on_pair: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every (model, profile, seed, strategy) run; ``save(data)`` is called after each one
    with the results so far (a long benchmark cut off keeps what it measured). Each (model,
    profile, seed) is a pair: its strategies back to back, in an order alternating from seed
    to seed (:func:`benchmarks.verdict.alternate`); ``on_pair(record)`` gets each finished
    pair (``benchmark``, ``model``, ``profile``, ``seed``, ``order``, ``runs``)."""
    env = dict(os.environ)
    env.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    cases: list[dict[str, Any]] = []

    def data() -> dict[str, Any]:
        return {
            "threads": int(env["TVM_NUM_THREADS"]),
            "trials": trials,
            "stages": stages,
            "seeds": seeds,
            "strategies": list(strategies),
            "cases": cases,
        }

    with tempfile.TemporaryDirectory(prefix="tunefarm-planner-") as tmp:
        setups = []  # (model, var, case, profile file, work dir, choices), made once
        for name in models:
            model, var, bound = WORKLOADS[name]
            for kind in profiles:
                hist = make_profile(kind, bound)
                work = Path(tmp) / f"{name}-{kind}"
                work.mkdir()
                profile = work / "profile.json"
                profile.write_text(json.dumps({var: {str(v): c for v, c in hist.items()}}))
                choices: dict[str, list[int] | None] = {
                    "planned": None,
                    "pow2": powers_of_two(hist, bound),
                    **hand_buckets(hist, bound),
                }
                choices = {k: v for k, v in choices.items() if k in strategies}
                case: dict[str, Any] = {
                    "model": name,
                    "profile": kind,
                    "histogram": hist,
                    "runs": [],
                }
                cases.append(case)  # filled in run by run
                setups.append((model, var, case, profile, work, choices))
        # seed by seed over every case, so a run cut off keeps whole seeds of every profile;
        # a bucket set chosen by hand or pow2 is tuned once per model and seed (the tune does
        # not read the profile) and benched over each profile that chose it
        tunes: dict[tuple[str, tuple[int, ...], int], dict[str, Any]] = {}
        for seed in seeds:
            for model, var, case, profile, work, choices in setups:
                runs = case["runs"]
                pair: list[dict[str, Any]] = []
                for strategy in alternate(list(choices), seed):
                    buckets = choices[strategy]
                    head = f"{case['model']} {case['profile']} seed {seed}"
                    key = (model, tuple(buckets or ()), seed)
                    earlier = tunes.get(key) if buckets else None
                    shared = f" (tuned for {earlier['profile']})" if earlier else ""
                    log(f"{head}: {strategy} {buckets or ''}{shared}")
                    r = _run_one(
                        model,
                        var,
                        profile,
                        strategy,
                        buckets,
                        trials,
                        seed,
                        env,
                        work,
                        stages,
                        tuned=earlier,
                    )
                    if buckets and earlier is None and not r.get("error"):
                        tunes[key] = {**r, "profile": case["profile"]}
                    if r.get("error"):
                        log(f"  {r['error']}")
                    else:
                        other, steal = r.get("other_cores"), r.get("steal_cores")
                        busy = f", other processes {other:.2f} cores" if other else ""
                        busy += f", stolen {steal:.2f} cores" if steal else ""
                        log(f"  mean {r['mean_sec'] * 1e6:.1f} us, buckets {r['buckets']}{busy}")
                    runs.append(r)
                    pair.append(r)
                    case["summary"] = summarize(runs)
                    if save is not None:
                        save(data())
                if on_pair is not None:
                    on_pair(
                        {
                            "benchmark": "planner",
                            "model": case["model"],
                            "profile": case["profile"],
                            "seed": seed,
                            "order": [r["strategy"] for r in pair],
                            "runs": pair,
                        }
                    )
    return data()


def table_lines(data: dict[str, Any]) -> list[str]:
    """The results as a markdown table (medians over seeds, us)."""
    us = lambda s: f"{s * 1e6:.1f}" if s else "-"  # noqa: E731
    ratio = lambda x: f"{x:.2f}x" if x else "-"  # noqa: E731
    lines = [
        f"{data['trials']} trials per job ({data.get('stages', 1)} planned stage(s)), seeds "
        f"{', '.join(map(str, data['seeds']))}; "
        "traffic-weighted mean latency of the tuned build (us, median over seeds)",
        "",
        "| model | profile | planned | pow2 | hand-a | hand-b | planned / pow2 "
        "| planned / best hand | predicted / measured (first plan) | noisy | disturbed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in data["cases"]:
        s = case["summary"]
        med = s["median_sec"]
        bk = {r["strategy"]: r.get("buckets") or [] for r in case["runs"]}
        cells = [f"{us(med.get(k))} ({','.join(map(str, bk.get(k, [])))})" for k in STRATEGIES]
        lines.append(
            f"| {case['model']} | {case['profile']} | "
            + " | ".join(cells)
            + f" | {ratio(s['planned_vs_pow2'])} | {ratio(s['planned_vs_best_hand'])} "
            f"| {ratio(s['predicted_vs_measured'])} "
            f"({ratio(s.get('first_predicted_vs_measured'))}) | {', '.join(s['noisy']) or '-'} "
            f"| {', '.join(s.get('disturbed', [])) or '-'} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks planner", description=__doc__)
    parser.add_argument("--models", nargs="*", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--profiles", nargs="*", choices=PROFILES, default=list(PROFILES))
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument(
        "--seeds",
        nargs="*",
        type=int,
        default=[0, 1],
        help="the seeds (with --resume: as many seeds, after the file's last)",
    )
    parser.add_argument(
        "--stages", type=int, default=2, help="the planned jobs' --stages (1: no re-plan)"
    )
    parser.add_argument(
        "--strategies",
        nargs="*",
        choices=STRATEGIES,
        default=list(STRATEGIES),
        help="which strategies to run (the planned one alone re-measures a planner change)",
    )
    add_pair_args(parser)
    args = parser.parse_args(argv)
    if args.resume is not None:
        # a later run of the same protocol, on any host: the file's settings, the next seeds
        earlier = resume(parser, args, "planner")
        first = max(p["seed"] for p in earlier) + 1
        args.seeds = list(range(first, first + max(1, len(args.seeds))))
    if args.trials < 1 or args.stages < 1 or not args.seeds:
        parser.error(
            "--trials and --stages must be at least 1 and --seeds must name one seed or more"
        )
    out = args.out or results_path("planner")
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = machine_header()
    pairs_path = args.resume or out.with_suffix(".pairs.jsonl")
    header = pair_header()
    settings = {key: getattr(args, key) for key in PROTOCOL}
    print(f"pairs: {pairs_path} (each finished pair appended)")

    def save(data: dict[str, Any]) -> None:
        body = {
            "machine": machine,
            "commit": header["commit"],
            "pairs": str(pairs_path),
            "loadavg": list(os.getloadavg()),
            **data,
        }
        out.write_text(json.dumps(body, indent=2))

    # run saves after every run, the last included
    data = run(
        args.models,
        args.profiles,
        args.trials,
        args.seeds,
        args.stages,
        save=save,
        strategies=tuple(args.strategies),
        on_pair=lambda pair: append_pair(pairs_path, pair | header | {"settings": settings}),
    )
    print("\n".join(table_lines(data)))
    print(f"wrote {out}")
    failed = [r for c in data["cases"] for r in c["runs"] if r.get("error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
