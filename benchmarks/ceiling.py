"""The farm's ceilings (issue 18), one measured part at a time.

``search``: how many candidates the driver's search produces per core-second. One task (a
[M,768]x[768,2304] matmul for the host CPU), MetaSchedule's evolutionary search with the
population a TuneFarm job gives a round of that size (:func:`tuner.job.search_population`) and
TuneFarm's cost model, cold. For each round size, ``repeats`` rounds, each from a fresh search
(pre-tuning, one ``generate_measure_candidates``, post-tuning), on one thread: candidates per
core-second = candidates / wall seconds. Round sizes are interleaved across repeats.

Usage: ``python -m benchmarks ceiling [--rounds 16 64 256] [--repeats 3] [--out PATH]``.
Results: ``benchmarks/results/<date>-<hostname>-ceiling.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import machine_header, results_path, stat


def _task(rows: int = 128) -> Any:
    import tvm
    from tvm import te

    from tuner.pipeline import normalize

    a = te.placeholder((rows, 768), name="A")
    b = te.placeholder((768, 2304), name="B")
    r = te.reduce_axis((0, 768), name="k")
    c = te.compute((rows, 2304), lambda x, y: te.sum(a[x, r] * b[r, y], axis=r), name="C")
    return tvm.IRModule({"main": normalize(te.create_prim_func([a, b, c]))["main"]})


def search_round(
    mod: Any, target: Any, per_round: int, cost_model: Any, seed: int
) -> tuple[float, int]:
    """Seconds one fresh search takes to propose a round of ``per_round`` candidates (one
    thread), and how many it proposed (a few fewer when its samples repeat)."""
    from tvm.s_tir import meta_schedule as ms

    from tuner.job import search_population

    ctx = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.EvolutionarySearch(
            population_size=search_population(per_round)
        ),
        task_name="ceiling",
        rand_state=seed,
        num_threads=1,
    ).clone()
    start = time.perf_counter()
    ctx.pre_tuning(
        max_trials=per_round,
        num_trials_per_iter=per_round,
        design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(),
        cost_model=cost_model,
    )
    found = ctx.generate_measure_candidates() or []
    wall = time.perf_counter() - start
    ctx.post_tuning()
    if not found:
        raise RuntimeError(f"the search proposed no candidate for a round of {per_round}")
    return wall, len(found)


def search_throughput(rounds: list[int], repeats: int) -> list[dict[str, Any]]:
    """Candidates per core-second at each round size (see the module docstring)."""
    from database import Storage
    from tuner.cost_model import create_cost_model
    from tuner.targets import resolve_target

    mod, target = _task(), resolve_target("llvm")
    walls: dict[int, list[float]] = {r: [] for r in rounds}
    rates: dict[int, list[float]] = {r: [] for r in rounds}
    with tempfile.TemporaryDirectory(prefix="tunefarm-ceiling-") as tmp:
        storage = Storage(f"sqlite:///{tmp}/empty.db")
        model, _ = create_cost_model(
            "tunefarm", storage=storage, target=target, mods=[mod], seed=0, warm=False
        )
        for rep in range(repeats):
            for r in rounds:
                wall, found = search_round(mod, target, r, model, seed=rep)
                walls[r].append(wall)
                rates[r].append(found / wall)
                print(f"round {r}: {found / wall:.1f} candidates/core-s", flush=True)
        storage.dispose()
    from tuner.job import search_population

    return [
        {
            "round": r,
            "population": search_population(r),
            "wall_s": stat(walls[r]),
            "candidates_per_core_s": stat(rates[r])["median"],
            "rate_spread": stat(rates[r])["spread"],
        }
        for r in rounds
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks ceiling")
    parser.add_argument("--rounds", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = {
        "machine": machine_header(),
        "search": search_throughput(args.rounds, args.repeats),
    }
    out = args.out or results_path("ceiling")
    out.write_text(json.dumps(result, indent=2))
    for row in result["search"]:
        spread = row["rate_spread"]
        noisy = " (noisy: spread above 25%)" if spread > 0.25 else ""
        print(
            f"round {row['round']:>4} (population {row['population']}): "
            f"{row['candidates_per_core_s']:.1f} candidates/core-s{noisy}"
        )
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
