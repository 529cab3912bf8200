"""When a supervisor without a ZooKeeper session must stop its containers (pure logic).

Nimbus moves the containers of a supervisor whose session expired (the session
timeout, 10 s by default, plus its reconciliation round of about a second). A
supervisor cut off from ZooKeeper cannot learn that, so its copies would run on
beside the new ones; after ``supervisor.session.lost.grace.secs`` without a session
it stops them itself (supervisor/cluster.py), and starts what the assignments still
place here once it has a session again.

"Without a session" is counted from the last moment the supervisor *knows* it had
one: the start of a request to ZooKeeper that was answered in its session (a read of
the assignments, every second). Not from the moment kazoo reports the connection
lost: a process that was frozen (SIGSTOP, a paused VM) learns that only after it
resumes, and what counts is how long it was away. ``time.monotonic()`` keeps running
while a process is stopped, so a supervisor frozen 40 s sees 40 s at once.

kazoo's word that the connection is up is only believed as "do not stop yet": right
after a freeze it still says connected until its next read fails, and the guard waits
for that read rather than stopping on the clock alone. Only an answered request
counts as the session being back.
"""
from __future__ import annotations

import math

GRACE_KEY = "supervisor.session.lost.grace.secs"
DEFAULT_GRACE_SECS = 30.0


def check_grace(value, name=GRACE_KEY):
    """``value`` as a float of seconds; ValueError (one line, naming ``name``) unless it
    is a positive, finite number."""
    try:
        secs = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(secs) or secs <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
    return secs


class SessionGuard:
    """Decides when a supervisor has been without a ZooKeeper session for longer than
    ``grace`` seconds. Times are ``time.monotonic()`` values passed in by the caller.

    * :meth:`alive` ``(at)``: a request sent at ``at`` was answered in our session;
    * :meth:`on_state` ``(connected)``: what kazoo says now (False: disconnected, or
      the session expired and no new one is open yet);
    * :meth:`due` ``(now)``: True once per loss, when the containers must stop.
    """

    def __init__(self, grace, now):
        self.grace = check_grace(grace)
        self.last_alive = now  # the last moment a session is known to have been open
        self.connected = True
        self.fired_at = None  # when due() last said True, until a session is back

    def alive(self, at):
        """A request sent at ``at`` was answered in our session."""
        if at > self.last_alive:
            self.last_alive = at
        if self.fired_at is not None and at > self.fired_at:
            self.fired_at = None  # back after the stop: the next loss counts afresh

    def on_state(self, connected):
        self.connected = bool(connected)

    def without(self, now):
        """Seconds since the last moment a session is known to have been open."""
        return max(0.0, now - self.last_alive)

    @property
    def stopped(self):
        """The containers were stopped for this loss and no session is back yet."""
        return self.fired_at is not None

    def due(self, now):
        """True (once per loss) when kazoo says there is no session and the last known
        one is more than ``grace`` seconds old."""
        if self.fired_at is not None or self.connected or self.without(now) <= self.grace:
            return False
        self.fired_at = now
        return True
