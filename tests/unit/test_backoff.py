"""Restart backoff of the supervisor."""
from __future__ import annotations

from supervisor.backoff import Backoff


def test_exponential_and_capped():
    b = Backoff(initial=0.5, maximum=10.0, reset_after=30.0)
    assert [b.next_delay(1.0) for _ in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert b.failures == 8


def test_reset_after_a_healthy_run():
    b = Backoff(initial=1.0, maximum=60.0, reset_after=30.0)
    assert [b.next_delay(0.1) for _ in range(3)] == [1.0, 2.0, 4.0]
    assert b.next_delay(29.9) == 8.0  # just short of healthy
    assert b.next_delay(30.0) == 1.0  # ran long enough: start over
    assert b.next_delay(0.0) == 2.0


def test_defaults_match_the_config_defaults():
    from bittern.config import defaults
    d = defaults()
    b = Backoff()
    assert (b.initial, b.maximum, b.reset_after) == (d["bittern.restart.backoff.initial.secs"],
                                                     d["bittern.restart.backoff.max.secs"],
                                                     d["bittern.restart.backoff.reset.secs"])
