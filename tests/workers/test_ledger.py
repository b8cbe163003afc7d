"""A timed job's pace (workers.ledger.RoundPace): rounds cut to what fits before the deadline."""

from __future__ import annotations

from workers.ledger import RoundPace


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_everything_fits_until_a_round_was_timed() -> None:
    clock = Clock()
    pace = RoundPace(10.0, clock=clock)
    assert pace.sending(16) == 16 and pace.another_round()
    clock.now = 11.0
    assert pace.sending(16) == 16  # still untimed: nothing to go by
    assert not pace.another_round()  # but past the deadline no round starts


def test_a_round_is_cut_to_the_candidates_that_end_in_time() -> None:
    clock = Clock()
    pace = RoundPace(100.0, clock=clock)
    clock.now = 10.0
    assert pace.sending(16) == 16
    clock.now = 42.0
    pace.recorded()  # 2 s a candidate from build to record
    assert pace.candidate_sec == 2.0 and pace.another_round()
    clock.now = 48.0  # the next round's search took 6 s; 52 s left hold 26 of 30
    assert pace.sending(30) == 26 and pace.search_sec == 6.0 and pace.cut == 4
    clock.now = 100.0 - 7.0
    pace.recorded()  # 45 s for 26: about 1.73 s a candidate
    # 7 s left: less than a search (6 s) and a candidate (1.73 s); a round sent all the
    # same (the actors' rounds are generated beside the measurement) gets 4 of them
    assert not pace.another_round()
    assert pace.sending(16) == 4


def test_no_candidate_fits_after_the_deadline() -> None:
    clock = Clock()
    pace = RoundPace(20.0, clock=clock)
    pace.sending(4)
    clock.now = 8.0
    pace.recorded()
    clock.now = 21.0
    assert pace.sending(4) == 0 and pace.cut == 4
