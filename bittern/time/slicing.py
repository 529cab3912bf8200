"""Sliding windows that aggregate, as slices (Flink's panes): one accumulator per key and
slide interval instead of one per key and window.

A sliding window of length L every S (L a whole multiple m of S) is the union of m
slices ``[k*S, (k+1)*S)``. A tuple goes into its one slice; window *j* (``[(j-m+1)*S,
(j+1)*S)``) fires by merging the accumulators of its slices with the aggregate's
``merge``. So a key seen once in L keeps one accumulator, not m, and no timer of its
own: each key is on a chain (``nxt``) at the next window that holds any of its slices,
and one timer per window end fires every key due there; firing window *j* moves the
key to its next window, jumping over windows with nothing in them. A slice goes when no window that holds it can fire again: at once
without allowed lateness, at ``(sid + m) * S + lateness`` (a cleanup timer) with it.

Used by :func:`make_operator` for sliding duration windows of an aggregating bolt with a
``merge``, when nothing is tracked for acking (at least once needs each window's own
tuples: :class:`~bittern.time.windowing.WindowOperator` keeps them). Results are the
same as the per-window operator's; the brute-force tests run both.
"""
from __future__ import annotations

import math

from .windowing import TOO_LATE, Firing, WindowOperator

_floor = math.floor
_CHAIN = "s"
_SLICE_CLEAN = "sc"


class SlicedWindowOperator(WindowOperator):
    """``windows[key]`` is ``{slice id: accumulator}``; ``nxt[key]`` the window the key's
    chain fires next, and ``due[j]`` the keys whose chain is at window *j*: one timer per
    window end (key None, tag ``("s", j)``) serves all of them, so a key costs a slice
    and two dict entries. The chain is part of each key's snapshot (``nxt``), so it is
    rebuilt with the key's slices wherever they are restored."""

    def __init__(self, window, timers, aggregate, event_time=True, lateness=0.0):
        super().__init__(window, timers, aggregate=aggregate, event_time=event_time, lateness=lateness,
                         track=False)
        self.m = int(round(self.size / self.slide))
        self.nxt = {}  # key -> the window its chain fires next
        self.due = {}  # window j -> {key: None} (insertion order: keys fire in a stable order)

    def add(self, key, ts, tup, wm):
        S, m = self.slide, self.m
        sid = _floor(ts / S)
        slices = self.windows.get(key)
        if ts >= wm:  # on time: no window holding its slice has fired
            if slices is None:
                slices = self.windows[key] = {}
            acc = slices.get(sid, _NONE)
            if acc is _NONE:
                acc = self.agg.create()
                self._slice_timers(key, sid)
            slices[sid] = self.agg.add(acc, tup)
            return m, ()
        lateness = self.lateness
        live = [j for j in range(sid, sid + m) if (j + 1) * S + lateness > wm]
        if not live:
            return TOO_LATE, ()
        if slices is None:
            slices = self.windows[key] = {}
        acc = slices.get(sid, _NONE)
        if acc is _NONE:
            acc = self.agg.create()
            self._slice_timers(key, sid, wm)
        slices[sid] = self.agg.add(acc, tup)
        firings = [f for f in (self._fire_window(key, j, late=True) for j in live if (j + 1) * S <= wm) if f]
        return len(live), firings

    def _slice_timers(self, key, sid, wm=None):
        """A new slice: the chain reaches its first window that has not ended; with
        lateness, the slice is kept until its last window's end + lateness."""
        S = self.slide
        first = sid
        while wm is not None and (first + 1) * S <= wm:
            first += 1
        if first <= sid + self.m - 1:
            self._chain(key, first)
        if self.lateness:
            self.timers.set(self.tkind, key, (sid + self.m) * S + self.lateness, (_SLICE_CLEAN, sid))

    def _chain(self, key, j):
        cur = self.nxt.get(key)
        if cur is not None:
            if cur <= j:
                return
            keys = self.due.get(cur)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del self.due[cur]
                    self.timers.delete(self.tkind, None, (cur + 1) * self.slide, (_CHAIN, cur))
        keys = self.due.get(j)
        if keys is None:
            keys = self.due[j] = {}
            self.timers.set(self.tkind, None, (j + 1) * self.slide, (_CHAIN, j))
        keys[key] = None
        self.nxt[key] = j

    def on_timer(self, key, tag):
        """A chain timer fires window j of every key due there (a list of Firings); a
        cleanup timer drops a slice (None)."""
        what, j = tag
        if what == _SLICE_CLEAN:
            slices = self.windows.get(key)
            if slices is not None:
                slices.pop(j, None)
                if not slices:
                    del self.windows[key]
            return None
        if what != _CHAIN:
            return super().on_timer(key, tag)
        out = []
        m = self.m
        for k in self.due.pop(j, ()):
            if self.nxt.get(k) == j:
                del self.nxt[k]
            f = self._fire_window(k, j)
            if f is not None:
                out.append(f)
            slices = self.windows.get(k)
            if slices:
                if not self.lateness:
                    for sid in [s for s in slices if s <= j - m + 1]:
                        del slices[sid]  # in no window still to fire
                rest = [s for s in slices if s >= j - m + 2]
                if rest:
                    self._chain(k, max(j + 1, min(rest)))
                if not slices:
                    del self.windows[k]
        return out

    def _fire_window(self, key, j, late=False):
        """Window j of ``key``: its slices merged, or None when it holds nothing."""
        slices = self.windows.get(key)
        if not slices:
            return None
        agg, acc, found = self.agg, None, False
        for sid in range(j - self.m + 1, j + 1):
            part = slices.get(sid, _NONE)
            if part is not _NONE:
                acc = agg.merge(acc if found else agg.create(), part)
                found = True
        if not found:
            return None
        self.fired += 1
        S = self.slide
        return Firing(key, (j - self.m + 1) * S, (j + 1) * S, acc, None, None, late, None)

    def open_windows(self):
        return sum(len(d) for d in self.windows.values())

    def snapshot_key(self, key, encode):
        slices = self.windows.get(key)
        if not slices:
            return None
        return {"sl": [[sid, acc] for sid, acc in slices.items()], "nxt": self.nxt.get(key)}

    def load_key(self, key, doc, decode):
        slices = self.windows.setdefault(key, {})
        for sid, acc in doc.get("sl", ()):
            have = slices.get(sid, _NONE)  # (the same slice of two old tasks: an unkeyed rescale)
            slices[sid] = acc if have is _NONE else self.agg.merge(have, acc)
        if doc.get("nxt") is not None:
            self._chain(key, doc["nxt"])

    def clear(self):
        super().clear()
        self.nxt.clear()
        self.due.clear()


_NONE = object()


def make_operator(window, timers, aggregate=None, event_time=True, lateness=0.0, track=False, mergeable=False):
    """The window operator for a bolt: sliced for sliding duration windows of an
    aggregating bolt with ``merge`` that tracks nothing, the per-window one otherwise."""
    if (window.kind == "sliding" and not window.by_count and aggregate is not None and mergeable
            and not track and abs(window.size / window.slide - round(window.size / window.slide)) < 1e-9):
        return SlicedWindowOperator(window, timers, aggregate, event_time=event_time, lateness=lateness)
    return WindowOperator(window, timers, aggregate=aggregate, event_time=event_time, lateness=lateness,
                          track=track)
