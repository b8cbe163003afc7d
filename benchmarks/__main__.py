"""Benchmarks by first argument: ``models`` (the default; :mod:`benchmarks.models`: each example
model tuned, then TuneFarm tuned / untuned vs its reference, torch.compile and ONNX Runtime),
``suite`` (the whole scoreboard, ``make bench``; see :mod:`benchmarks.suite`), ``symbolic``,
``database``, ``cost-model``, ``warm-start``, ``cost-model-study``, ``throughput``,
``time-to-quality`` (:mod:`benchmarks.time_to_quality`), ``ceiling`` (:mod:`benchmarks.ceiling`).

All ratios are measured side by side in one run. Usage::

    python -m benchmarks [models] [--trials 32] [--models examples/mlp.py ...] [--db URL]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
    if argv and argv[0] == "time-to-quality":
        from benchmarks.time_to_quality import main as ttq_main

        return ttq_main(argv[1:])
    if argv and argv[0] == "ceiling":
        from benchmarks.ceiling import main as ceiling_main

        return ceiling_main(argv[1:])
    if argv and argv[0] == "models":
        argv = argv[1:]
    from benchmarks.models import main as models_main

    return models_main(argv)


if __name__ == "__main__":
    sys.exit(main())
