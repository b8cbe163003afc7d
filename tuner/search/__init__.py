"""Task-parallel search: each task's evolutionary search lives in a Ray actor.

- :mod:`tuner.search.task`: one task's search state (MetaSchedule's ``TuneContext``, its
  evolutionary search, an in-memory database of the task's records, its own cost model copy);
  candidates leave it as plain data (:class:`Candidate`).
- :mod:`tuner.search.actor`: :class:`SearchActor`, a Ray actor hosting the states of a few tasks.
- :mod:`tuner.search.scheduler`: which task searches next.
- :mod:`tuner.search.driver`: the driver's loop: rounds handed to actors, candidates routed to
  builders and runners, results recorded and fed back, the next round generated while the
  current one builds.
- :mod:`tuner.search.recorder`: :class:`Recorder`, what the driver records measured rounds
  through (the job implements it).
- :mod:`tuner.search.population`: how many candidates a round has and how large a population
  its evolutionary search evolves.
"""

from tuner.search.task import Candidate, ModelSpec, TaskSearch

__all__ = ["Candidate", "ModelSpec", "TaskSearch"]
