"""TuneFarm workers: builders and device runners as Ray tasks and actors."""

from workers.config import MeasureConfig
from workers.results import BuildResult, ErrorKind, RunResult

__all__ = ["BuildResult", "ErrorKind", "MeasureConfig", "RunResult"]
