"""Sliding windows that aggregate, as slices (Flink's panes): one accumulator per key and
slide interval instead of one per key and window.

A sliding window of length L every S (L a whole multiple m of S) is the union of m
slices ``[k*S, (k+1)*S)``. A tuple goes into its one slice; window *j* (``[(j-m+1)*S,
(j+1)*S)``) fires by merging the accumulators of its slices with the aggregate's
``merge``. So a key seen once in L keeps one accumulator, not m, and one timer: each key
has a single chain of fire timers (``nxt``), at the end of the next window that holds
any of its slices; firing window *j* sets the next link, jumping over windows with
nothing in them. A slice goes when no window that holds it can fire again: at once
without allowed lateness, at ``(sid + m) * S + lateness`` (a cleanup timer) with it.

Used by :func:`make_operator` for sliding duration windows of an aggregating bolt with a
``merge``, when nothing is tracked for acking (at least once needs each window's own
tuples: :class:`~bittern.time.windowing.WindowOperator` keeps them). Results are the
same as the per-window operator's; the brute-force tests run both.
"""
from __future__ import annotations

import math

from .windowing import TOO_LATE, Firing, Win, WindowOperator

_floor = math.floor
_CHAIN = "s"
_SLICE_CLEAN = "sc"


class SlicedWindowOperator(WindowOperator):
    def __init__(self, window, timers, aggregate, event_time=True, lateness=0.0):
        super().__init__(window, timers, aggregate=aggregate, event_time=event_time, lateness=lateness,
                         track=False)
        self.m = int(round(self.size / self.slide))
        self.nxt = {}  # key -> the window its chain of fire timers fires next

    def add(self, key, ts, tup, wm):
        S, m = self.slide, self.m
        sid = _floor(ts / S)
        slices = self.windows.get(key)
        if ts >= wm:  # on time: no window holding its slice has fired
            if slices is None:
                slices = self.windows[key] = {}
            w = slices.get(sid)
            if w is None:
                start = sid * S
                w = slices[sid] = Win(start, start + S, self.agg.create(), False)
                self._slice_timers(key, sid)
            w.content = self.agg.add(w.content, tup)
            return m, ()
        lateness = self.lateness
        live = [j for j in range(sid, sid + m) if (j + 1) * S + lateness > wm]
        if not live:
            return TOO_LATE, ()
        if slices is None:
            slices = self.windows[key] = {}
        w = slices.get(sid)
        if w is None:
            start = sid * S
            w = slices[sid] = Win(start, start + S, self.agg.create(), False)
            self._slice_timers(key, sid, wm)
        w.content = self.agg.add(w.content, tup)
        firings = [f for f in (self._fire_window(key, j, late=True) for j in live if (j + 1) * S <= wm) if f]
        return len(live), firings

    def _slice_timers(self, key, sid, wm=None):
        """A new slice: the chain reaches its first window that has not ended; with
        lateness, the slice is kept until its last window's end + lateness."""
        S = self.slide
        first = sid if wm is None else max(sid, _floor(wm / S))  # (end of window j is (j+1)*S)
        while wm is not None and (first + 1) * S <= wm:
            first += 1
        if first <= sid + self.m - 1:
            self._chain(key, first)
        if self.lateness:
            self.timers.set(self.tkind, key, (sid + self.m) * S + self.lateness, (_SLICE_CLEAN, sid))

    def _chain(self, key, j):
        cur = self.nxt.get(key)
        if cur is not None and cur <= j:
            return
        if cur is not None:
            self.timers.delete(self.tkind, key, (cur + 1) * self.slide, (_CHAIN, cur))
        self.timers.set(self.tkind, key, (j + 1) * self.slide, (_CHAIN, j))
        self.nxt[key] = j

    def on_timer(self, key, tag):
        what, j = tag
        slices = self.windows.get(key)
        if what == _SLICE_CLEAN:
            if slices is not None:
                slices.pop(j, None)
                if not slices:
                    del self.windows[key]
            return None
        if what != _CHAIN:
            return super().on_timer(key, tag)
        if self.nxt.get(key) == j:
            del self.nxt[key]
        f = self._fire_window(key, j)
        slices = self.windows.get(key)
        if slices:
            m = self.m
            if not self.lateness:
                for sid in [s for s in slices if s <= j - m + 1]:
                    del slices[sid]  # in no window still to fire
            rest = [s for s in slices if s >= j - m + 2]
            if rest:
                self._chain(key, max(j + 1, min(rest)))
            if not slices:
                del self.windows[key]
        return f

    def _fire_window(self, key, j, late=False):
        """Window j of ``key``: its slices merged, or None when it holds nothing."""
        slices = self.windows.get(key)
        if not slices:
            return None
        agg, acc, any_ = self.agg, None, False
        for sid in range(j - self.m + 1, j + 1):
            s = slices.get(sid)
            if s is not None:
                acc = agg.merge(agg.create() if not any_ else acc, s.content)
                any_ = True
        if not any_:
            return None
        self.fired += 1
        S = self.slide
        return Firing(key, (j - self.m + 1) * S, (j + 1) * S, acc, None, None, late, None)

    def snapshot_key(self, key, encode):
        doc = super().snapshot_key(key, encode)
        if doc is not None and key in self.nxt:
            doc["nxt"] = self.nxt[key]
        return doc

    def load_key(self, key, doc, decode):
        super().load_key(key, doc, decode)
        j = doc.get("nxt")
        if j is not None:
            cur = self.nxt.get(key)
            self.nxt[key] = j if cur is None else min(cur, j)

    def clear(self):
        super().clear()
        self.nxt.clear()


def make_operator(window, timers, aggregate=None, event_time=True, lateness=0.0, track=False, mergeable=False):
    """The window operator for a bolt: sliced for sliding duration windows of an
    aggregating bolt with ``merge`` that tracks nothing, the per-window one otherwise."""
    if (window.kind == "sliding" and not window.by_count and aggregate is not None and mergeable
            and not track and abs(window.size / window.slide - round(window.size / window.slide)) < 1e-9):
        return SlicedWindowOperator(window, timers, aggregate, event_time=event_time, lateness=lateness)
    return WindowOperator(window, timers, aggregate=aggregate, event_time=event_time, lateness=lateness,
                          track=track)
