"""TuneFarm workers: builders and device runners as Ray tasks and actors."""

from workers import torchless
from workers.config import MeasureConfig  # neither imports TVM
from workers.results import BuildResult, ErrorKind, RunResult

torchless.install()  # before anything imports TVM: a worker never needs torch with it

__all__ = ["BuildResult", "ErrorKind", "MeasureConfig", "RunResult"]
