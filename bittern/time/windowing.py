"""The window operator: which windows a tuple belongs to, what each window holds, and
when it fires. Pure logic: the caller passes the watermark (or the wall clock, for
processing time) and fires what the timers say is due; nothing here calls user code
except the aggregate's ``create``/``add``/``merge``.

Windows are kept per key (the fields-grouping key; None for a bolt that is not keyed)
as :class:`Win` objects indexed by a window id:

* tumbling (length L): id ``k = floor(ts / L)``, window ``[k*L, k*L + L)``;
* sliding (length L every S): a tuple at ``ts`` is in every window ``[k*S, k*S + L)``
  that holds it, ``k`` counting down from ``floor(ts / S)``;
* session (gap G): a tuple starts ``[ts, ts + G)`` and merges with every window of its
  key that it overlaps or touches (Flink's merging windows); the id is the start;
* count windows (``Count(n)``): tuples are numbered per key in arrival order, and the
  window ending at tuple ``e`` holds tuples ``(e - L, e]``; it fires on its last tuple.

A time window fires through a timer at its end (event time: once the watermark
reaches the end; processing time: once the clock does). With allowed lateness it
is kept until ``end + lateness``: a late tuple in that span updates it and it fires
again at once (``late``); a tuple whose every window is past that is *too late*
(:data:`TOO_LATE`) and never touches the state.

A window holds an accumulator (aggregating bolts) or its tuples (Storm's windowed
bolts). With ``track`` (at least once) it also holds the tuples it has not yet
handed out for acking (``pending``): the caller acks a tuple once every window it
was added to has fired.
"""
from __future__ import annotations

import math

from .timers import EVENT, PROCESSING

TOO_LATE = "too late"
_FIRE = "w"
_CLEAN = "c"
_JOINED_ONE = (1, ())  # what add returns for a tuple that joined one window, firing none
_floor = math.floor


class Win:
    __slots__ = ("start", "end", "content", "new", "fired", "pending")

    def __init__(self, start, end, content, track):
        self.start, self.end, self.content = start, end, content
        self.new = 0  # list mode: index of the first tuple added since the last fire
        self.fired = False
        self.pending = [] if track else None


class Firing:
    """A window that fires: ``result`` is the accumulator (aggregating) or the tuple
    list; ``new``/``expired`` (list mode, Storm's TupleWindow); ``pending``: tuples to
    anchor the output to and to count down for acking (at least once)."""

    __slots__ = ("key", "start", "end", "result", "new", "expired", "late", "pending")

    def __init__(self, key, start, end, result, new, expired, late, pending):
        self.key, self.start, self.end, self.result = key, start, end, result
        self.new, self.expired, self.late, self.pending = new, expired, late, pending

    def __repr__(self):
        return f"<Firing key={self.key!r} [{self.start}, {self.end}) late={self.late}>"


class WindowOperator:
    """``window``: a :class:`bittern.api.windows.Window`; ``aggregate``: an object with
    ``create/add/merge`` (None: keep the tuples); ``timers``: the task's
    :class:`~bittern.time.timers.TimerQueue`; ``event_time``: windows on event time
    (else processing time); ``lateness``: allowed lateness (event time only);
    ``track``: keep pending tuples for acking."""

    def __init__(self, window, timers, aggregate=None, event_time=True, lateness=0.0, track=False):
        self.kind = window.kind
        self.by_count = window.by_count
        self.size = window.size
        self.slide = window.slide
        self.timers = timers
        self.agg = aggregate
        self.event_time = event_time
        self.tkind = EVENT if event_time else PROCESSING
        self.lateness = float(lateness) if event_time else 0.0
        self.track = track
        self.windows = {}  # key -> {wid: Win}
        self.counts = {}  # count windows: key -> tuples seen
        self.last = {}  # list mode: key -> tuples of its last (on-time) firing, for `expired`
        self.fired = 0
        self._tumbling = self.kind == "tumbling" and not self.by_count  # add's own path
        if self.by_count:
            self._assign = None  # count windows: see _add_count
        elif self.kind == "tumbling":
            self._assign = self._assign_tumbling
        elif self.kind == "sliding":
            self._assign = self._assign_sliding
        else:
            self._assign = None  # sessions merge (see _add_session)

    # -- input ----------------------------------------------------------------------------
    def add(self, key, ts, tup, wm):
        """Add ``tup`` (timestamp ``ts``; for count windows ignored) under ``key`` with the
        input watermark (or, on processing time, the clock) at ``wm``. Returns
        ``(n, firings)``: ``n`` the windows it joined, ``firings`` those that fire at once
        (count windows, late updates); or ``(TOO_LATE, ())``.

        The per-tuple path: tumbling time windows (one window per tuple) take a path of
        their own, without the assignment's list; both paths do ``_put`` inline."""
        if self._tumbling:
            wins = self.windows.get(key)
            if wins is None:
                wins = self.windows[key] = {}
            if ts >= wm:  # on time: the window it joins has not fired
                size = self.size
                k = _floor(ts / size)  # (= _assign_tumbling)
                w = wins.get(k)
                if w is None:
                    start = k * size
                    w = wins[k] = self._new(key, k, start, start + size)
                agg = self.agg
                if agg is not None:
                    w.content = agg.add(w.content, tup)
                else:
                    w.content.append(tup)
                if w.pending is not None:
                    w.pending.append(tup)
                return _JOINED_ONE
            return self._add_late(key, wins, ts, tup, wm)
        if self.by_count:
            return self._add_count(key, tup)
        if self._assign is None:
            return self._add_session(key, ts, tup, wm)
        wins = self.windows.get(key)
        if wins is None:
            wins = self.windows[key] = {}
        if ts >= wm:  # on time: no window it joins has fired
            agg = self.agg
            n = 0
            for wid, start, end in self._assign(ts):
                w = wins.get(wid)
                if w is None:
                    w = wins[wid] = self._new(key, wid, start, end)
                if agg is not None:  # (= _put)
                    w.content = agg.add(w.content, tup)
                else:
                    w.content.append(tup)
                if w.pending is not None:
                    w.pending.append(tup)
                n += 1
            return n, ()
        return self._add_late(key, wins, ts, tup, wm)

    def _add_late(self, key, wins, ts, tup, wm):
        n, firings = 0, []
        for wid, start, end in self._assign(ts):
            if end + self.lateness <= wm:
                continue  # this window is gone
            w = wins.get(wid)
            if w is None:
                w = wins[wid] = self._new(key, wid, start, end, timer=end > wm)
            self._put(w, tup)
            n += 1
            if end <= wm:  # it fired (or would have): fire again with the late tuple
                firings.append(self._fire(key, wid, w, late=True))
        if not n:
            if not wins:
                del self.windows[key]
            return TOO_LATE, ()
        return n, firings

    def _put(self, w, tup):
        if self.agg is not None:
            w.content = self.agg.add(w.content, tup)
        else:
            w.content.append(tup)
        if w.pending is not None:
            w.pending.append(tup)

    def _new(self, key, wid, start, end, timer=True):
        w = Win(start, end, self.agg.create() if self.agg is not None else [], self.track)
        if timer and not self.by_count:
            self.timers.set(self.tkind, key, end, (_FIRE, wid))
        return w

    def _assign_tumbling(self, ts):
        size = self.size
        k = math.floor(ts / size)
        start = k * size
        return ((k, start, start + size),)

    def _assign_sliding(self, ts):
        size, slide = self.size, self.slide
        k = math.floor(ts / slide)
        out = []
        while True:
            start = k * slide
            if start + size <= ts:
                break
            out.append((k, start, start + size))
            k -= 1
        return out

    def _add_count(self, key, tup):
        n = self.counts.get(key, 0) + 1
        self.counts[key] = n
        size, slide = self.size, self.slide
        wins = self.windows.get(key)
        if wins is None:
            wins = self.windows[key] = {}
        e = -(-n // slide) * slide  # the first window end at or after n
        joined = 0
        while e < n + size:
            w = wins.get(e)
            if w is None:
                w = wins[e] = self._new(key, e, max(0, e - size), e)
            self._put(w, tup)
            joined += 1
            e += slide
        firings = ()
        w = wins.get(n)
        if w is not None and n % slide == 0:
            firings = (self._fire(key, n, w),)
        return joined, firings

    def _add_session(self, key, ts, tup, wm):
        gap = self.size
        start, end = ts, ts + gap
        wins = self.windows.get(key)
        touching = [w for w in wins.values() if w.start <= end and start <= w.end] if wins else []
        if not touching and end + self.lateness <= wm:
            return TOO_LATE, ()  # (a session it touches is still kept, so it joins that one)
        if wins is None:
            wins = self.windows[key] = {}
        if not touching:
            w = wins[start] = self._new(key, start, start, end, timer=end > wm)
        else:
            touching.sort(key=lambda x: x.start)
            w = touching[0]
            old_start, old_end = w.start, w.end
            for other in touching[1:]:
                self._absorb(key, w, other)
            w.start, w.end = min(w.start, start), max(max(o.end for o in touching), end)
            if w.start != old_start or w.end != old_end:
                self._unset(key, old_start, old_end, w)
                del wins[old_start]
                wins[w.start] = w
                if w.end > wm:
                    self.timers.set(self.tkind, key, w.end, (_FIRE, w.start))
                elif w.fired and self.lateness:
                    self.timers.set(self.tkind, key, w.end + self.lateness, (_CLEAN, w.start))
        self._put(w, tup)
        if w.end <= wm:
            return 1, (self._fire(key, w.start, w, late=True),)
        return 1, ()

    def _absorb(self, key, w, other):
        """Merge session ``other`` into ``w`` (its content, pending, fired), dropping it."""
        wins = self.windows[key]
        self._unset(key, other.start, other.end, other)
        del wins[other.start]
        if self.agg is not None:
            w.content = self.agg.merge(w.content, other.content)
        else:
            w.content = w.content + other.content
            w.new = 0 if not w.fired else w.new
        if w.pending is not None:
            w.pending.extend(other.pending)
        w.fired = w.fired or other.fired

    def _unset(self, key, wid, end, w):
        self.timers.delete(self.tkind, key, end, (_FIRE, wid))
        self.timers.delete(self.tkind, key, end + self.lateness, (_CLEAN, wid))

    # -- firing ---------------------------------------------------------------------------
    def on_timer(self, key, tag):
        """A timer this operator set fired (``tag`` from the timer): the Firing, or None
        (a cleanup, or a window that is gone)."""
        what, wid = tag
        wins = self.windows.get(key)
        w = wins.get(wid) if wins else None
        if w is None:
            return None
        if what == _CLEAN:
            self._drop(key, wid)
            return None
        f = self._fire(key, wid, w)
        if self.lateness:
            self.timers.set(self.tkind, key, w.end + self.lateness, (_CLEAN, wid))
        else:
            self._drop(key, wid)
        return f

    def _fire(self, key, wid, w, late=False):
        self.fired += 1
        pending = None
        if w.pending is not None:
            pending, w.pending = w.pending, []
        if self.agg is not None:
            f = Firing(key, w.start, w.end, w.content, None, None, late, pending)
        else:
            tuples = list(w.content)
            if late:
                new, expired = tuples[w.new:], []
            else:
                prev = self.last.get(key) or []
                mine = set(map(id, tuples))
                was = set(map(id, prev))
                new = [t for t in tuples if id(t) not in was]
                expired = [t for t in prev if id(t) not in mine]
                self.last[key] = tuples
            w.new = len(tuples)
            f = Firing(key, w.start, w.end, tuples, new, expired, late, pending)
        w.fired = True
        if self.by_count:
            self._drop(key, wid)
        elif late and self.lateness:  # (a window made late never had a fire timer)
            self.timers.set(self.tkind, key, w.end + self.lateness, (_CLEAN, wid))
        return f

    def _drop(self, key, wid):
        wins = self.windows.get(key)
        if wins is not None:
            wins.pop(wid, None)
            if not wins:
                del self.windows[key]

    # -- introspection and checkpoints ----------------------------------------------------
    def open_windows(self):
        return sum(len(d) for d in self.windows.values())

    def keys(self):
        return set(self.windows) | set(self.counts) | set(self.last)

    def snapshot_key(self, key, encode):
        """This key's windows as a state value; ``encode(tup)`` turns a tuple into a
        state value (list mode). None when the key holds nothing."""
        wins = self.windows.get(key)
        count = self.counts.get(key)
        last = self.last.get(key)
        if not wins and count is None and last is None:
            return None
        # list mode: each tuple once ("t"), windows and `last` by index, so that a tuple in
        # several windows is one object again after a load (new/expired compare identities)
        table, index = [], {}

        def ref(t):
            i = index.get(id(t))
            if i is None:
                i = index[id(t)] = len(table)
                table.append(encode(t))
            return i
        ws = []
        for wid, w in (wins or {}).items():
            content = w.content if self.agg is not None else [ref(t) for t in w.content]
            ws.append([wid, w.start, w.end, content, w.new, w.fired])
        doc = {"w": ws, "n": count, "last": None if last is None else [ref(t) for t in last]}
        if self.agg is None:
            doc["t"] = table
        return doc

    def load_key(self, key, doc, decode):
        """Put back a key's windows from :meth:`snapshot_key` (timers come back with the
        timer queue's own state)."""
        if doc.get("t") is not None:
            decode = [decode(t) for t in doc["t"]].__getitem__
        if doc.get("n") is not None:
            self.counts[key] = doc["n"]
        if doc.get("last") is not None:
            self.last[key] = [decode(t) for t in doc["last"]]
        if doc.get("w"):
            wins = self.windows.setdefault(key, {})
            for wid, start, end, content, new, fired in doc["w"]:
                content = content if self.agg is not None else [decode(t) for t in content]
                have = wins.get(wid)
                if have is not None:  # the same window of another old task (a bolt not keyed, rescaled)
                    have.content = self.agg.merge(have.content, content) if self.agg is not None \
                        else have.content + content
                    have.fired = have.fired and fired
                    continue
                w = Win(start, end, content, False)
                w.new, w.fired = new, fired
                wins[wid] = w

    def clear(self):
        self.windows.clear()
        self.counts.clear()
        self.last.clear()
