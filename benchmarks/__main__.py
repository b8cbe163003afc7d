"""Model benchmark: tune each example model at a fixed budget, then time tuned vs untuned vs numpy.

Other benchmarks by first argument: ``suite`` (the whole scoreboard, ``make bench``; see
:mod:`benchmarks.suite`), ``symbolic``, ``database``, ``warm-start``.

All ratios are measured side by side in one run. Results go to
``benchmarks/results/<date>-<host>.json``. Usage::

    python -m benchmarks [--trials 32] [--models examples/mlp.py ...] [--db URL]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import socket
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from database import Storage, TuneFarmDatabase
from tuner.bench import bench
from tuner.job import TuneConfig, tune
from tuner.model import load_model
from tuner.targets import resolve_target
from workers.fingerprint import cpu_fingerprint

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = ["examples/mlp.py", "examples/conv2d_block.py"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "symbolic":
        from benchmarks.symbolic import main as symbolic_main

        return symbolic_main(argv[1:])
    if argv and argv[0] == "suite":
        from benchmarks.suite import main as suite_main

        return suite_main(argv[1:])
    if argv and argv[0] == "database":
        from benchmarks.database import main as database_main

        return database_main(argv[1:])
    if argv and argv[0] == "cost-model":
        from benchmarks.cost_model import main as cost_model_main

        return cost_model_main(argv[1:])
    if argv and argv[0] == "warm-start":
        from benchmarks.warm_start import main as warm_start_main

        return warm_start_main(argv[1:])
    if argv and argv[0] == "cost-model-study":
        from benchmarks.cost_model_study import main as study_main

        return study_main(argv[1:])
    if argv and argv[0] == "throughput":
        from benchmarks.throughput import main as throughput_main

        return throughput_main(argv[1:])
    if argv and argv[0] == "models":
        argv = argv[1:]
    parser = argparse.ArgumentParser(prog="python -m benchmarks [models]", description=__doc__)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--db", default=None, help="default: a fresh SQLite file")
    args = parser.parse_args(argv)
    console = Console()
    target = resolve_target("llvm")
    tmp = tempfile.TemporaryDirectory(prefix="tunefarm-bench-")
    url = args.db or f"sqlite:///{tmp.name}/bench.db"
    storage = Storage(url)
    rows = []
    for path in args.models:
        model = load_model(ROOT / path)
        summary = tune(
            model.mod, target, storage, TuneConfig(trials=args.trials, seed=0), console=console
        )
        (res,) = bench(model, target, TuneFarmDatabase(storage))
        rows.append(
            {
                "model": path,
                "trials": args.trials,
                "tune_wall_sec": summary.wall_sec,
                **res.to_dict(),
            }
        )
    table = Table(title=f"tuned vs untuned vs numpy, {args.trials} trials per model")
    for col in ("model", "untuned", "tuned", "numpy", "speedup", "tuned/numpy", "agree"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        table.add_row(
            r["model"],
            f"{r['untuned_sec'] * 1e3:.3f} ms",
            f"{r['tuned_sec'] * 1e3:.3f} ms",
            f"{r['numpy_sec'] * 1e3:.3f} ms" if r["numpy_sec"] else "-",
            f"{r['speedup']:.2f}x",
            f"{r['vs_numpy']:.2f}x" if r["vs_numpy"] else "-",
            "yes" if r["agree"] else "NO",
        )
    console.print(table)
    name = f"{dt.date.today()}-{socket.gethostname()}-models.json"  # the suite's is <date>-<host>
    out = ROOT / "benchmarks" / "results" / name
    out.write_text(
        json.dumps(
            {
                "machine": cpu_fingerprint(),
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "target": str(target),
                "results": rows,
            },
            indent=2,
        )
    )
    console.print(f"wrote {out}")
    return 0 if all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
