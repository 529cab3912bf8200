"""Rate-limited logging: traffic a stream manager drops or refuses, tuples a windowed
bolt cannot place."""
from __future__ import annotations

import time

LOG_EVERY = 1.0  # seconds between two log lines about dropped or refused traffic on the tcp port


class Throttle:
    """At most one log line per ``every`` seconds; counts the lines it held back."""

    def __init__(self, every=LOG_EVERY):
        self.every = every
        self._next = 0.0
        self.held = 0

    def ready(self, now=None):
        """True if a line may be logged now (then ``held`` says how many were not)."""
        now = time.monotonic() if now is None else now
        if now < self._next:
            self.held += 1
            return False
        self._next = now + self.every
        return True

    def take(self, now=None):
        """None if no line may be logged now; else what to append to it: how many lines
        were held back since the last one ('' if none)."""
        held = self.held
        if not self.ready(now):
            return None
        self.held = 0
        return f" (and {held} more like it)" if held else ""

    def filter(self, record):  # as a logging filter (the ZAP thread logs each refused key)
        suffix = self.take()
        if suffix is None:
            return False
        if suffix:
            record.msg = f"{record.msg}{suffix}"
        return True
