"""How large a search round is and how many schedules its evolutionary search evolves:
the rounds a job's budget is cut into, and the population sized from the round."""

from __future__ import annotations

# MetaSchedule's EvolutionarySearch population, and the least one a round gets (each round
# samples at least 50 new schedules beside the 20% it takes from the database)
MAX_POPULATION = 512
MIN_POPULATION = 64
POPULATION_PER_CANDIDATE = 8


def search_population(per_round: int) -> int:
    """The evolutionary search's population for rounds of ``per_round`` candidates:
    :data:`POPULATION_PER_CANDIDATE` per candidate, between :data:`MIN_POPULATION` and
    MetaSchedule's :data:`MAX_POPULATION`. Every round samples, mutates and scores its whole
    population for several generations, so a population of 512 for a round of one or two
    candidates (a dozen bucket tasks sharing a small budget) spends most of a job in the
    driver. The search's time per measured candidate is proportional to this ratio. At equal
    wall time (5 seeds, rounds of 8, docs/time-to-quality.md): 32 → 16 per candidate took a
    QKV job's search share from 36% to 27% and its measured candidates from 95 to 122; 16 → 8
    took it from 30% to 22% and reached 90% of the best in 0.76x stock's time against 0.99x,
    its final kernels re-timed at 0.65x stock's latency against 0.82x."""
    return max(MIN_POPULATION, min(MAX_POPULATION, POPULATION_PER_CANDIDATE * per_round))


def trials_per_round(cap: int, remaining: int, n_tasks: int) -> int:
    """Candidates per search round: at most ``cap``; small enough that every task gets about
    two rounds of the budget, or at least one when the budget is tight. The gradient scheduler
    visits tasks in order at first, so a larger round would spend the budget on the first
    tasks and leave later buckets untuned."""
    return max(1, min(cap, remaining // (2 * n_tasks) or remaining // n_tasks or 1))
