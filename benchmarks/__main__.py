"""Benchmarks by first argument: ``models`` (the default; :mod:`benchmarks.models`: each example
model tuned, then TuneFarm tuned / untuned vs its reference, torch.compile and ONNX Runtime),
``suite`` (the whole scoreboard, ``make bench``; see :mod:`benchmarks.suite`), ``symbolic``,
``database``, ``cost-model``, ``warm-start``, ``cost-model-study``, ``throughput``,
``time-to-quality`` (:mod:`benchmarks.time_to_quality`), ``ceiling`` (:mod:`benchmarks.ceiling`),
``planner`` (:mod:`benchmarks.planner`: planned buckets against powers of two and hand choices),
``verdicts`` (:mod:`benchmarks.verdict`: the targets' verdicts from paired seeds),
``retiming`` (:mod:`benchmarks.retiming`: recorded bests vs a fresh process's re-timing),
``decoder`` (:mod:`benchmarks.decoder`: ``make demo-llm``'s decoder against PyTorch),
``convergence`` (:mod:`benchmarks.convergence`: --until-converged against 4x the trials),
``matvec`` (:mod:`benchmarks.matvec`: a decoder's decode step with and without the known
matrix-vector schedule measured first), ``gemm`` (:mod:`benchmarks.gemm`: its prefill with and
without the known matrix-product tiling measured first).

All ratios are measured side by side in one run. Usage::

    python -m benchmarks [models] [--trials 32] [--models examples/mlp.py ...] [--db URL]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# first argument -> the module whose ``main(argv)`` runs it
PARTS: dict[str, str] = {
    "models": "benchmarks.models",
    "suite": "benchmarks.suite",
    "symbolic": "benchmarks.symbolic",
    "database": "benchmarks.database",
    "cost-model": "benchmarks.cost_model",
    "warm-start": "benchmarks.warm_start",
    "cost-model-study": "benchmarks.cost_model_study",
    "throughput": "benchmarks.throughput",
    "time-to-quality": "benchmarks.time_to_quality",
    "ceiling": "benchmarks.ceiling",
    "planner": "benchmarks.planner",
    "verdicts": "benchmarks.verdict",
    "dashboard": "benchmarks.dashboard",
    "retiming": "benchmarks.retiming",
    "decoder": "benchmarks.decoder",
    "convergence": "benchmarks.convergence",
    "matvec": "benchmarks.matvec",
    "gemm": "benchmarks.gemm",
}


def main(argv: list[str] | None = None) -> int:
    import importlib

    argv = list(sys.argv[1:] if argv is None else argv)
    name = argv[0] if argv and argv[0] in PARTS else "models"
    if argv and argv[0] in PARTS:
        argv = argv[1:]
    return importlib.import_module(PARTS[name]).main(argv)


if __name__ == "__main__":
    sys.exit(main())
