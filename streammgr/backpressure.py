"""Heron's backpressure as a pure state machine (events in, actions out).

A stream manager *starts* backpressure when the bytes queued toward one of its
destinations (a local instance, or a peer stream manager) rise above the high
watermark, and *clears* its own cause when every such queue has fallen below the
low watermark. It announces both to every peer. Local spouts are paused while
this stream manager or any peer holds backpressure, and resume only when none
does. Peers re-announce their state periodically; an announcement that is not
refreshed expires, so a dead peer cannot pause the topology forever.

It also keeps, per destination, the time that destination's queue held this stream
manager in backpressure (from crossing the high watermark until it fell back to the
low one): the *initiator's* share, Heron's ``__time_spent_back_pressure_by_compid``.
Only a queue above the watermark accumulates; the others (and peers' announcements)
do not, so the health manager can tell the cause from the victims.
"""
from __future__ import annotations

ANNOUNCE = "announce"  # (ANNOUNCE, on: bool): tell every peer
SPOUTS = "spouts"  # (SPOUTS, paused: bool): tell the local spouts


class Backpressure:
    def __init__(self, high, low, expire_after=5.0):
        if not 0 <= low < high:
            raise ValueError(f"backpressure watermarks need 0 <= low < high, got low={low} high={high}")
        self.high = high
        self.low = low
        self.expire_after = expire_after
        self.local = set()  # destination keys above the watermark (this stmgr's own cause)
        self.remote = {}  # peer container -> last time it said it holds backpressure
        self._since = None  # when this stmgr started its own backpressure
        self.total_secs = 0.0  # time this stmgr held backpressure
        self.episodes = 0
        self._paused = False
        self._key_since = {}  # destination key -> when its queue started backpressure
        self._key_secs = {}  # destination key -> seconds of finished episodes it caused

    @property
    def active(self):
        """This stream manager holds backpressure (its own cause)."""
        return bool(self.local)

    @property
    def paused(self):
        return self._paused

    def time_in_backpressure(self, now):
        return self.total_secs + ((now - self._since) if self._since is not None else 0.0)

    def time_by_key(self, now):
        """``{key: seconds}``: how long each destination's queue has held this stream
        manager in backpressure (cumulative, the running episode included); keys that
        never did are absent."""
        out = dict(self._key_secs)
        for k, t in self._key_since.items():
            out[k] = out.get(k, 0.0) + (now - t)
        return out

    def observe(self, key, queued_bytes, now):
        """The queue toward ``key`` holds ``queued_bytes``; returns actions."""
        actions = []
        if key not in self.local:
            if queued_bytes >= self.high:
                self.local.add(key)
                self._key_since[key] = now
                if len(self.local) == 1:
                    self._since = now
                    self.episodes += 1
                    actions.append((ANNOUNCE, True))
        elif queued_bytes <= self.low:
            self.local.discard(key)
            self._key_secs[key] = self._key_secs.get(key, 0.0) + (now - self._key_since.pop(key, now))
            if not self.local:
                self.total_secs += now - self._since
                self._since = None
                actions.append((ANNOUNCE, False))
        return actions + self._spouts()

    def forget(self, key, now):
        """A destination went away (its queue was dropped)."""
        return self.observe(key, 0, now) if key in self.local else []

    def peer(self, container, on, now):
        """A peer announced (or re-announced) its state."""
        if on:
            self.remote[container] = now
        else:
            self.remote.pop(container, None)
        return self._spouts()

    def tick(self, now):
        """Expire peers that stopped re-announcing."""
        for c, t in list(self.remote.items()):
            if now - t > self.expire_after:
                del self.remote[c]
        return self._spouts()

    def _spouts(self):
        paused = bool(self.local or self.remote)
        if paused != self._paused:
            self._paused = paused
            return [(SPOUTS, paused)]
        return []
