"""Throughput of the worker pool: real builds per second vs builders, dispatch overhead, scaling.

1. Builds: N distinct small matmul candidates built by RayBuilder on a local
   ``ray.cluster_utils.Cluster`` with 1, then 2 builder nodes (1 CPU each); after a warm-up
   round (each worker's build child imports TVM once), candidates per second (median of 3).
2. Dispatch: the RunnerPool with synthetic runners that sleep a fixed time. Overhead per
   candidate = wall time per candidate through one runner that does not sleep; efficiency at
   W runners = (N x sleep / W) / wall.

Usage: ``python -m benchmarks throughput [--builds 12] [--workers 1 4 16 64] [--sleep-ms 50]
[--in-flight 2] [--max-batch 1 4]`` (each ``--max-batch`` value is one scaling series).
Results go to ``benchmarks/results/<date>-throughput.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def sleep_measure(artifact: Any, args_info: list, device: str, config: Any) -> Any:
    """A synthetic runner: sleeps ``artifact`` seconds and reports one run time."""
    from workers.results import RunResult

    time.sleep(float(artifact))
    return RunResult(run_secs=(1e-3,), device=device, worker=str(os.getpid()))


def _matmul(rows: int) -> Any:
    from tvm import te

    from tuner.pipeline import normalize

    a = te.placeholder((rows, 32), name="A")
    b = te.placeholder((32, 32), name="B")
    r = te.reduce_axis((0, 32), name="k")
    c = te.compute((rows, 32), lambda x, y: te.sum(a[x, r] * b[r, y], axis=r), name="C")
    return normalize(te.create_prim_func([a, b, c]))


def _mods(n: int, offset: int = 0) -> list:
    """``n`` distinct small matmuls (rows 16, 20, 24, ...)."""
    return [_matmul(16 + 4 * (i + offset)) for i in range(n)]


def builds_per_second(builders: int, n: int, repeats: int = 3) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from tuner.targets import resolve_target
    from workers.config import MeasureConfig
    from workers.ray_pool import Ledger, RayBuilder

    target = resolve_target("llvm")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(builders):
            cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        cluster.wait_for_nodes()
        builder = RayBuilder(Ledger(), MeasureConfig())
        builder.build([BuilderInput(m, target) for m in _mods(2 * builders, offset=100)])
        walls = []
        for rep in range(repeats):  # distinct modules each time: nothing is cached
            batch = [BuilderInput(m, target) for m in _mods(n, offset=200 + rep * n)]
            start = time.perf_counter()
            results = builder.build(batch)
            walls.append(time.perf_counter() - start)
            assert all(r.error_msg is None for r in results), [r.error_msg for r in results]
    finally:
        ray.shutdown()
        cluster.shutdown()
    wall = sorted(walls)[len(walls) // 2]
    return {
        "builders": builders,
        "candidates": n,
        "walls_s": walls,
        "wall_s": wall,
        "per_s": n / wall,
    }


def dispatch(
    workers: list[int],
    sleep_s: float,
    per_worker: int,
    in_flight: int = 2,
    max_batches: tuple[int, ...] = (1,),
) -> dict[str, Any]:
    import ray

    from workers.config import MeasureConfig
    from workers.ray_pool import RayConnection
    from workers.runner_pool import FaultPolicy, RunnerPool, SlotSpec

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
                with pool:
                    for f in [pool.submit(0.0, []) for _ in range(w)]:  # start every actor
                        f.result()
                    n = per_worker * w
                    start = time.perf_counter()
                    for f in [pool.submit(sleep_s, []) for _ in range(n)]:
                        f.result()
                    wall = time.perf_counter() - start
                    calls = sum(row["calls"] for row in pool.stats()) - w
                ideal = n * sleep_s / w
                out["scaling"].append(
                    {
                        "workers": w,
                        "max_batch": batch,
                        "candidates": n,
                        "calls": calls,
                        "wall_s": wall,
                        "efficiency": ideal / wall,
                    }
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks throughput", description=__doc__)
    parser.add_argument("--builds", type=int, default=12, help="candidates per build run")
    parser.add_argument("--builders", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 4, 16, 64])
    parser.add_argument("--sleep-ms", type=float, default=50.0)
    parser.add_argument("--per-worker", type=int, default=10)
    parser.add_argument("--in-flight", type=int, default=2, help="calls queued per runner")
    parser.add_argument(
        "--max-batch", type=int, nargs="*", default=[1, 4], help="candidates per call (series)"
    )
    args = parser.parse_args(argv)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    from workers.fingerprint import cpu_fingerprint

    report: dict[str, Any] = {"host": cpu_fingerprint(), "builds": []}
    for b in args.builders:
        row = builds_per_second(b, args.builds)
        report["builds"].append(row)
        print(f"{b} builder(s): {row['per_s']:.2f} candidates/s ({row['wall_s']:.1f} s)")
    if len(report["builds"]) >= 2:
        report["build_speedup"] = report["builds"][-1]["per_s"] / report["builds"][0]["per_s"]
        print(f"speedup {report['build_speedup']:.2f}x")
    disp = dispatch(
        args.workers, args.sleep_ms / 1000, args.per_worker, args.in_flight, tuple(args.max_batch)
    )
    report["dispatch"] = disp
    print(f"dispatch overhead {disp['overhead_ms']:.2f} ms per candidate (one runner)")
    for row in disp["scaling"]:
        print(
            f"{row['workers']:4d} runners x {args.sleep_ms:.0f} ms, batch <= {row['max_batch']}: "
            f"efficiency {row['efficiency']:.2f} ({row['wall_s']:.2f} s, "
            f"{row['candidates']} candidates in {row['calls']} calls)"
        )
    out = ROOT / "benchmarks/results" / f"{dt.date.today().isoformat()}-throughput.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
