"""Throughput of the worker pool: real builds per second vs builders, dispatch overhead, scaling.

1. Builds: N distinct matmul candidates (64 by default: a tune job's iteration) built by
   RayBuilder on the embedded default, a local Ray with 1, then 2 CPUs (one build task per
   CPU); after a warm-up round (each worker's build child imports TVM once), candidates per
   second, median of the rounds, 1 and 2 builders interleaved.
2. Dispatch: the RunnerPool with synthetic runners that sleep a fixed time. Overhead per
   candidate = wall time per candidate through one runner that does not sleep; efficiency at
   W runners = (N x sleep / W) / wall; utilization = time the runners spent in measurements
   (the sleeps as they really lasted) / (W x wall): the share of device time the pool keeps busy.

Usage: ``python -m benchmarks throughput [--builds 64] [--build-rounds 3] [--workers 1 4 16 64]
[--sleep-ms 50] [--in-flight 2] [--max-batch 1 4]`` (each ``--max-batch`` value is one
scaling series).
Results go to ``benchmarks/results/<date>-<hostname>-throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import machine_header, results_path

ROOT = Path(__file__).resolve().parent.parent


def sleep_measure(artifact: Any, args_info: list, device: str, config: Any) -> Any:
    """A synthetic runner: sleeps ``artifact`` seconds and reports how long it really slept
    (with 64 processes on 2 cores a 50 ms sleep overshoots: that is the OS, not the pool)."""
    from workers.results import RunResult

    start = time.perf_counter()
    time.sleep(float(artifact))
    return RunResult(
        run_secs=(time.perf_counter() - start,), device=device, worker=str(os.getpid())
    )


def _matmul(rows: int) -> Any:
    """A tiled, unrolled and vectorized [rows,128]x[128,128] matmul: a candidate whose build
    costs a few hundred ms of a core, like a real one (a bare tiny kernel builds in ~50 ms and
    would measure Ray's per-task overhead instead of building)."""
    import tvm
    from tvm import te

    from tuner.pipeline import normalize

    a = te.placeholder((rows, 128), name="A")
    b = te.placeholder((128, 128), name="B")
    r = te.reduce_axis((0, 128), name="k")
    c = te.compute((rows, 128), lambda x, y: te.sum(a[x, r] * b[r, y], axis=r), name="C")
    sch = tvm.s_tir.Schedule(normalize(te.create_prim_func([a, b, c])))
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 16])
    ko, ki = sch.split(k, [None, 8])
    sch.reorder(io, jo, ko, ii, ki, ji)
    for loop in (ko, ii, ki):
        sch.unroll(loop)
    sch.vectorize(ji)
    sch.parallel(io)
    return sch.mod


def _mods(n: int, offset: int = 0) -> list:
    """``n`` distinct candidates (rows 16, 20, 24, ...)."""
    return [_matmul(16 + 4 * (i + offset)) for i in range(n)]


_SPIN = (
    "import time\nt = time.perf_counter()\nx = 0\nfor i in range(10_000_000): x += i\n"
    "print(time.perf_counter() - t)"
)


def cpu_ceiling(procs: int = 2, rounds: int = 5) -> dict[str, Any]:
    """How much ``procs`` CPU-bound processes at once get done vs one alone on this machine:
    the most any parallel speedup can be here (vCPUs that are SMT siblings or shared with
    other guests give less than ``procs``)."""
    import subprocess
    import sys

    def run(n: int) -> float:
        ps = [
            subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE, text=True)
            for _ in range(n)
        ]
        return max(float(p.communicate()[0]) for p in ps)

    pairs = [(run(1), run(procs)) for _ in range(rounds)]  # interleaved, like the builds
    speedups = sorted(procs * alone / together for alone, together in pairs)
    return {
        "procs": procs,
        "alone_s": statistics.median(a for a, _ in pairs),
        "together_s": statistics.median(t for _, t in pairs),
        "speedup": statistics.median(speedups),
        "speedups": [round(x, 3) for x in speedups],
    }


def builds_per_second(builders: int, n: int, offset: int) -> dict[str, Any]:
    """Candidates per second of ``RayBuilder`` on the embedded default (a local Ray with
    ``builders`` CPUs: one build task per CPU), over ``n`` distinct candidates after a warm-up
    round in which each worker's build child imports TVM once."""
    import ray
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from tuner.targets import resolve_target
    from workers.builder import RayBuilder
    from workers.config import MeasureConfig
    from workers.connection import RayConnection
    from workers.ledger import Ledger

    target = resolve_target("llvm")
    with RayConnection(num_cpus=builders):
        ray.get([])
        builder = RayBuilder(Ledger(), MeasureConfig())
        builder.build([BuilderInput(m, target) for m in _mods(2 * builders, offset=10_000)])
        batch = [BuilderInput(m, target) for m in _mods(n, offset=offset)]
        start = time.perf_counter()
        results = builder.build(batch)
        wall = time.perf_counter() - start
    assert all(r.error_msg is None for r in results), [r.error_msg for r in results]
    return {"builders": builders, "candidates": n, "wall_s": wall, "per_s": n / wall}


def build_scaling(builders: list[int], n: int, rounds: int) -> list[dict[str, Any]]:
    """Each builder count ``rounds`` times, interleaved (1, 2, 1, 2, ...) so that drift in
    the machine's speed hits every count alike; the median round per count. Every round
    builds modules no earlier round built (nothing cached)."""
    runs: dict[int, list[dict[str, Any]]] = {b: [] for b in builders}
    offset = 0
    for _ in range(rounds):
        for b in builders:
            runs[b].append(builds_per_second(b, n, offset))
            offset += n
    out = []
    for b in builders:
        rows = sorted(runs[b], key=lambda r: r["per_s"])
        mid = rows[len(rows) // 2]
        out.append(
            {
                "builders": b,
                "candidates": n,
                "rounds": rounds,
                "per_s_each": [round(r["per_s"], 3) for r in runs[b]],
                "wall_s": mid["wall_s"],
                "per_s": mid["per_s"],
            }
        )
    return out


def dispatch(
    workers: list[int],
    sleep_s: float,
    per_worker: int,
    in_flight: int = 2,
    max_batches: tuple[int, ...] = (1,),
    repeats: int = 3,
) -> dict[str, Any]:
    import ray

    from workers.config import FaultPolicy, MeasureConfig
    from workers.connection import RayConnection
    from workers.runner_pool import RunnerPool
    from workers.slots import SlotSpec

    fn = "benchmarks.throughput:sleep_measure"
    out: dict[str, Any] = {"sleep_ms": sleep_s * 1000, "in_flight": in_flight, "scaling": []}
    with RayConnection(num_cpus=2):
        ray.get([])  # connected
        policy = FaultPolicy(startup_timeout_s=600)
        one = [SlotSpec("w0", measure_fn=fn)]
        with RunnerPool(one, MeasureConfig(), policy, in_flight=in_flight) as pool:
            for f in [pool.submit(0.0, []) for _ in range(20)]:
                f.result()
            n = 400
            start = time.perf_counter()
            for f in [pool.submit(0.0, []) for _ in range(n)]:
                f.result()
            out["overhead_ms"] = (time.perf_counter() - start) / n * 1000
        for w in workers:
            slots = [SlotSpec(f"w{i}", measure_fn=fn) for i in range(w)]
            for batch in max_batches:
                pool = RunnerPool(slots, MeasureConfig(), policy, in_flight, max_batch=batch)
                n = per_worker * w
                walls, calls, utils = [], [], []
                with pool:
                    for f in [pool.submit(0.0, []) for _ in range(w)]:  # start every actor
                        f.result()
                    for _ in range(repeats):
                        before = sum(row["calls"] for row in pool.stats())
                        start = time.perf_counter()
                        futures = [pool.submit(sleep_s, []) for _ in range(n)]
                        busy = sum(f.result().run_secs[0] for f in futures)
                        walls.append(time.perf_counter() - start)
                        utils.append(busy / (w * walls[-1]))
                        calls.append(sum(row["calls"] for row in pool.stats()) - before)
                ideal = n * sleep_s / w
                effs = sorted(ideal / wall for wall in walls)
                out["scaling"].append(
                    {
                        "workers": w,
                        "max_batch": batch,
                        "candidates": n,
                        "calls": int(statistics.median(calls)),
                        "wall_s": statistics.median(walls),
                        "efficiency": statistics.median(effs),
                        "efficiency_min": effs[0],
                        "efficiency_max": effs[-1],
                        "utilization": statistics.median(utils),
                        "repeats": repeats,
                    }
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks throughput", description=__doc__)
    parser.add_argument(
        "--builds", type=int, default=64, help="candidates per build round (a job's iteration)"
    )
    parser.add_argument("--build-rounds", type=int, default=3, help="rounds per builder count")
    parser.add_argument("--builders", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 4, 16, 64])
    parser.add_argument("--sleep-ms", type=float, default=50.0)
    parser.add_argument("--per-worker", type=int, default=10)
    parser.add_argument("--in-flight", type=int, default=2, help="calls queued per runner")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per pool (median)")
    parser.add_argument(
        "--max-batch", type=int, nargs="*", default=[1, 4], help="candidates per call (series)"
    )
    args = parser.parse_args(argv)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    report: dict[str, Any] = {"machine": machine_header(), "builds": []}
    for row in build_scaling(args.builders, args.builds, args.build_rounds):
        report["builds"].append(row)
        print(
            f"{row['builders']} builder(s): {row['per_s']:.2f} candidates/s "
            f"(median of {row['per_s_each']})"
        )
    if len(report["builds"]) >= 2:
        report["build_speedup"] = report["builds"][-1]["per_s"] / report["builds"][0]["per_s"]
        ceiling = cpu_ceiling(report["builds"][-1]["builders"])
        report["cpu_ceiling"] = ceiling
        report["build_speedup_vs_ceiling"] = report["build_speedup"] / ceiling["speedup"]
        print(
            f"speedup {report['build_speedup']:.2f}x; this machine's CPU ceiling for "
            f"{ceiling['procs']} processes: {ceiling['speedup']:.2f}x "
            f"(builders reach {report['build_speedup_vs_ceiling']:.0%} of it)"
        )
    disp = dispatch(
        args.workers,
        args.sleep_ms / 1000,
        args.per_worker,
        args.in_flight,
        tuple(args.max_batch),
        args.repeats,
    )
    report["dispatch"] = disp
    print(f"dispatch overhead {disp['overhead_ms']:.2f} ms per candidate (one runner)")
    for row in disp["scaling"]:
        print(
            f"{row['workers']:4d} runners x {args.sleep_ms:.0f} ms, batch <= {row['max_batch']}: "
            f"efficiency {row['efficiency']:.2f} "
            f"[{row['efficiency_min']:.2f}-{row['efficiency_max']:.2f}], "
            f"utilization {row['utilization']:.2f} ({row['wall_s']:.2f} s, "
            f"{row['candidates']} candidates in {row['calls']} calls)"
        )
    out = results_path("throughput")
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
