"""TuneFarm's tuner: task extraction, tuning jobs, build with the database, benchmarks.

The Python API mirrors the CLI::

    from tuner import compile, load_model, resolve_target, tune
"""

from __future__ import annotations

from typing import Any

from workers import torchless

torchless.install()  # `import tvm` without torch (see workers.torchless)

__all__ = ["TuneConfig", "compile", "load_model", "resolve_target", "tune"]


def __getattr__(name: str) -> Any:  # lazy: keep `import tuner` (and the CLI) fast
    if name == "compile":
        from tuner.compile import compile

        return compile
    if name in ("tune", "TuneConfig"):
        from tuner import job

        return getattr(job, name)
    if name == "load_model":
        from tuner.model import load_model

        return load_model
    if name == "resolve_target":
        from tuner.targets import resolve_target

        return resolve_target
    raise AttributeError(name)
