"""A tuning job: extract a model's tasks, measure their untuned defaults, search with
MetaSchedule on Ray workers, record every candidate into the database.

- :mod:`tuner.job.config`: :class:`TuneConfig`, what a job does.
- :mod:`tuner.job.run`: :func:`tune`, the job as a sequence of phases.
- :mod:`tuner.job.tasks`: the model's tasks (at each bucket of a symbolic model), named.
- :mod:`tuner.job.baselines`: the untuned defaults, timed and recorded.
- :mod:`tuner.job.modes`: where the search runs (actors, a driver thread, MetaSchedule's loop).
- :mod:`tuner.job.recorder`: :class:`JobRecorder`, what the search records through.
- :mod:`tuner.job.probes`: the dispatch rule's probes, built and timed after the search.
- :mod:`tuner.job.summary`: :class:`JobSummary`, what a finished job reports.
"""

from tuner.job.config import TuneConfig
from tuner.job.run import tune
from tuner.job.summary import JobSummary, TaskSummary

__all__ = ["JobSummary", "TaskSummary", "TuneConfig", "tune"]
