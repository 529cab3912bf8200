"""Restart backoff (pure logic): exponential, capped, reset after a healthy run."""
from __future__ import annotations


class Backoff:
    def __init__(self, initial=0.5, maximum=10.0, reset_after=30.0):
        self.initial = initial
        self.maximum = maximum
        self.reset_after = reset_after
        self.failures = 0

    def next_delay(self, ran_for):
        """Seconds to wait before restarting a process that ran ``ran_for`` seconds."""
        if ran_for >= self.reset_after:
            self.failures = 0
        delay = min(self.maximum, self.initial * (2 ** self.failures))
        self.failures += 1
        return delay
