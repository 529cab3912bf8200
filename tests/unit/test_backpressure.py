"""streammgr.backpressure.Backpressure: Heron's scheme as a pure state machine
(queue sizes and peer announcements in, announce / pause-spouts actions out)."""
from __future__ import annotations

import pytest

from streammgr.backpressure import ANNOUNCE, SPOUTS, Backpressure

HIGH, LOW = 1000, 400
START = [(ANNOUNCE, True), (SPOUTS, True)]
CLEAR = [(ANNOUNCE, False), (SPOUTS, False)]


def bp(expire_after=5.0):
    return Backpressure(HIGH, LOW, expire_after=expire_after)


def test_below_the_high_watermark_nothing_happens():
    b = bp()
    assert b.observe(("i", 3), 0, 1.0) == []
    assert b.observe(("i", 3), HIGH - 1, 1.0) == []
    assert not b.active and not b.paused and b.episodes == 0
    assert b.time_in_backpressure(100.0) == 0.0


def test_high_watermark_starts_and_low_watermark_clears():
    b = bp()
    assert b.observe(("i", 3), HIGH, 10.0) == START  # reaching the watermark is enough
    assert b.active and b.paused and b.local == {("i", 3)} and b.episodes == 1
    assert b.observe(("i", 3), LOW, 13.0) == CLEAR  # reaching the low one clears
    assert not b.active and not b.paused and b.local == set()
    assert b.time_in_backpressure(50.0) == pytest.approx(3.0)


def test_hysteresis_between_the_watermarks():
    b = bp()
    assert b.observe("q", 5000, 1.0) == START
    for size in (HIGH - 1, 700, LOW + 1, HIGH, 5000, LOW + 1):
        assert b.observe("q", size, 2.0) == [], size  # still above the low watermark
    assert b.active and b.paused
    assert b.observe("q", LOW - 1, 3.0) == CLEAR
    for size in (LOW + 1, 700, HIGH - 1):
        assert b.observe("q", size, 4.0) == [], size  # still below the high watermark
    assert not b.active and b.episodes == 1


def test_several_local_causes_announce_once_and_clear_with_the_last():
    b = bp()
    assert b.observe(("i", 1), 2000, 1.0) == START
    assert b.observe(("p", 1), 2000, 2.0) == []  # a second cause: no new announcement
    assert b.observe(("i", 2), 1500, 3.0) == []
    assert b.local == {("i", 1), ("p", 1), ("i", 2)} and b.episodes == 1
    assert b.observe(("i", 1), 0, 4.0) == []
    assert b.observe(("p", 1), 100, 5.0) == []
    assert b.active and b.paused
    assert b.time_in_backpressure(6.0) == pytest.approx(5.0)  # still running since 1.0
    assert b.observe(("i", 2), LOW, 7.0) == CLEAR
    assert b.time_in_backpressure(100.0) == pytest.approx(6.0)


def test_time_in_backpressure_adds_up_episodes():
    b = bp()
    b.observe("q", HIGH, 10.0)
    b.observe("q", 0, 12.5)
    assert b.time_in_backpressure(20.0) == pytest.approx(2.5)
    b.observe("q", HIGH, 30.0)
    assert b.time_in_backpressure(31.0) == pytest.approx(3.5)  # the running episode counts
    b.observe("q", 0, 34.0)
    assert b.total_secs == pytest.approx(6.5) and b.episodes == 2
    assert b.time_in_backpressure(1000.0) == pytest.approx(6.5)


def test_peer_backpressure_pauses_spouts_without_announcing():
    b = bp()
    assert b.peer(1, True, 1.0) == [(SPOUTS, True)]
    assert b.paused and not b.active  # paused, but it is not this stream manager's cause
    assert b.peer(1, True, 2.0) == []  # a re-announcement changes nothing
    assert b.peer(1, False, 3.0) == [(SPOUTS, False)]
    assert not b.paused
    assert b.time_in_backpressure(10.0) == 0.0  # only its own cause is counted


def test_spouts_resume_only_when_no_one_holds_backpressure():
    b = bp()
    assert b.peer(1, True, 1.0) == [(SPOUTS, True)]
    assert b.peer(2, True, 1.0) == []
    assert b.observe("q", HIGH, 2.0) == [(ANNOUNCE, True)]  # already paused: announce only
    assert b.peer(1, False, 3.0) == []
    assert b.observe("q", 0, 4.0) == [(ANNOUNCE, False)]  # peer 2 still holds it
    assert b.paused
    assert b.peer(2, False, 5.0) == [(SPOUTS, False)]
    assert not b.paused


def test_local_cause_outlives_a_peer():
    b = bp()
    assert b.observe("q", HIGH, 1.0) == START
    assert b.peer(3, True, 1.0) == []
    assert b.peer(3, False, 2.0) == []
    assert b.paused
    assert b.observe("q", 0, 3.0) == CLEAR


def test_a_peer_saying_off_without_on_is_harmless():
    b = bp()
    assert b.peer(4, False, 1.0) == []
    assert not b.paused and b.remote == {}


def test_tick_expires_silent_peers():
    b = bp(expire_after=5.0)
    b.peer(1, True, 0.0)
    b.peer(2, True, 3.0)
    assert b.tick(5.0) == []  # 5.0 - 0.0 is not more than expire_after
    assert set(b.remote) == {1, 2}
    assert b.tick(5.5) == []  # peer 1 expires; peer 2 still pauses the spouts
    assert set(b.remote) == {2} and b.paused
    b.peer(2, True, 6.0)  # a refresh pushes its expiry back
    assert b.tick(10.5) == [] and b.paused
    assert b.tick(11.01) == [(SPOUTS, False)]
    assert b.remote == {} and not b.paused


def test_tick_does_not_expire_the_local_cause():
    b = bp(expire_after=1.0)
    b.observe("q", HIGH, 0.0)
    assert b.tick(100.0) == []
    assert b.active and b.paused


def test_forget_a_destination_that_went_away():
    b = bp()
    b.observe(("i", 5), 3000, 1.0)
    b.observe(("i", 6), 3000, 1.0)
    assert b.forget(("i", 5), 2.0) == []
    assert b.local == {("i", 6)}
    assert b.forget(("i", 7), 2.0) == []  # never above the watermark: nothing to do
    assert b.forget(("i", 6), 4.0) == CLEAR
    assert b.local == set() and b.time_in_backpressure(9.0) == pytest.approx(3.0)
    assert b.forget(("i", 6), 5.0) == []  # forgetting twice is harmless


@pytest.mark.parametrize("high, low", [(100, 100), (100, 200), (100, -1), (0, 0)])
def test_invalid_watermarks_raise(high, low):
    with pytest.raises(ValueError, match=f"need 0 <= low < high, got low={low} high={high}"):
        Backpressure(high, low)


def test_zero_low_watermark_needs_an_empty_queue():
    b = Backpressure(10, 0)
    assert b.observe("q", 10, 1.0) == START
    assert b.observe("q", 1, 2.0) == []
    assert b.observe("q", 0, 3.0) == CLEAR
