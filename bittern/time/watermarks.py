"""Watermarks as a task sees them: the input watermark over its upstream channels, and
the watermark a source derives from the timestamps it emits.

A watermark ``w`` promises that no tuple stamped below ``w`` follows on its channel.
A task's *input watermark* is the minimum over its channels (one per upstream task)
that are not idle; it never moves backwards. A channel is idle when its source said
so (a spout that emitted nothing for ``topology.watermark.idle.secs``), or, for a
channel whose watermark is derived from tuple timestamps (Storm's rule, used when the
upstream sends none), when nothing came on it for that long. An idle channel joins
again with its next watermark (or, derived, its next tuple); whatever it sends below
the input watermark by then is late. When every channel is idle (or ended: +inf) the
input watermark stays where it is and the task reports itself idle downstream.
"""
from __future__ import annotations

NEG_INF = float("-inf")
POS_INF = float("inf")


class InputWatermark:
    """``channels``: upstream tasks that send watermarks in band; ``derived``: upstream
    tasks whose watermark is the largest timestamp seen from them minus ``lag``."""

    def __init__(self, channels=(), derived=(), lag=0.0, idle_secs=0.0):
        self.wm = {c: NEG_INF for c in channels}
        self.derived = frozenset(derived)
        for c in self.derived:
            self.wm[c] = NEG_INF
        self.lag = float(lag)
        self.idle_secs = float(idle_secs)
        self.idle = set()
        self.last_seen = {}  # derived channel -> time of its last tuple (caller's clock)
        self.current = NEG_INF

    @property
    def channels(self):
        return frozenset(self.wm)

    @property
    def all_idle(self):
        """Every channel that has not ended (+inf) is idle (and one at least is)."""
        return bool(self.idle) and all(c in self.idle or w == POS_INF for c, w in self.wm.items())

    def on_watermark(self, channel, w):
        """Watermark ``w`` (None: the channel went idle) arrived from ``channel``; True
        if the input watermark advanced. Unknown channels are ignored (a stale plan)."""
        if channel not in self.wm:
            return False
        if w is not None and (type(w) not in (int, float) or w != w):
            return False  # not a watermark (a garbled frame): ignored, never a crash
        if w is None:
            self.idle.add(channel)
        else:
            self.idle.discard(channel)
            if w > self.wm[channel]:
                self.wm[channel] = w
        return self._recompute()

    def on_timestamp(self, channel, max_ts, now):
        """Tuples stamped up to ``max_ts`` came from derived ``channel`` at ``now``."""
        if channel not in self.derived:
            return False
        self.last_seen[channel] = now
        self.idle.discard(channel)
        w = max_ts - self.lag
        if w > self.wm[channel]:
            self.wm[channel] = w
        return self._recompute()

    def check_idle(self, now):
        """Mark derived channels silent for ``idle_secs`` idle; True if that advanced
        the input watermark."""
        if not self.idle_secs or not self.derived:
            return False
        changed = False
        for c in self.derived:
            seen = self.last_seen.setdefault(c, now)  # (never sent: silent since the first check)
            if c not in self.idle and now - seen >= self.idle_secs:
                self.idle.add(c)
                changed = True
        return self._recompute() if changed else False

    def _recompute(self):
        low = POS_INF
        seen = False
        for c, w in self.wm.items():
            if c not in self.idle:
                seen = True
                if w < low:
                    low = w
        if seen and low > self.current:
            # (also when only ended channels are awake beside idle ones: +inf then, as in
            # Flink; what an idle source sends when it wakes is late)
            self.current = low
            return True
        return False

    def restore(self, current):
        """After a rollback: the input watermark of the checkpoint; channels start over
        (they send theirs again), and the input never goes below ``current``."""
        self.current = NEG_INF if current is None else current
        for c in self.wm:
            self.wm[c] = NEG_INF
        self.idle.clear()
        self.last_seen.clear()


class SourceWatermark:
    """A spout's watermark under ``EventTime(field|fn, lag)``: the largest timestamp it
    emitted minus ``lag``."""

    __slots__ = ("lag", "max_ts")

    def __init__(self, lag=0.0):
        self.lag = float(lag)
        self.max_ts = NEG_INF

    def observe(self, ts):
        if ts > self.max_ts:
            self.max_ts = ts

    @property
    def watermark(self):
        return self.max_ts - self.lag


def watermark_components(tdef):
    """The components whose outputs carry watermarks: spouts that declare event time,
    windowed bolts on event time, and every bolt downstream of one of them."""
    carries = {c.name for c in tdef.components.values()
               if c.time.get("watermarks") or c.time.get("event_time")}
    changed = True
    while changed:
        changed = False
        for c in tdef.bolts:
            if c.name not in carries and any(i.component in carries for i in c.inputs):
                carries.add(c.name)
                changed = True
    return carries
