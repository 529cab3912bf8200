"""A windowed bolt in its instance: the per-tuple path into the window operator
(:mod:`bittern.time.windowing`), and what happens when a window fires.

The runtime binds the bolt's ``process``: it reads the tuple's key (the fields of its
input's fields grouping; None otherwise) and timestamp (``timestamp_field`` or
``timestamp_fn``; the wall clock on processing time) and adds it to the operator.
Tuples whose timestamp is not a number, and tuples too late for any window, go to the
bolt's ``late_stream`` with the reason (or are counted and logged when it has none).

At least once (Storm's windowed bolts): a tuple is acked once every window it joined
has fired, and what ``process_window``/``emit_window`` emit is anchored to the tuples of
the window that had not been handed out yet, so a lost result replays them. Under
EFFECTIVELY_ONCE the windows are saved with the task's checkpoint (``snapshot_key``).
"""
from __future__ import annotations

import inspect
import logging
import time

from bittern.api.tuple import Tuple
from bittern.api.windows import AggregatingWindowBolt, TupleWindow, Window, WindowSpan
from bittern.lograte import Throttle as LogThrottle
from bittern.time.slicing import make_operator
from bittern.time.windowing import TOO_LATE

log = logging.getLogger("bittern.instance")
_new_tuple = tuple.__new__
_INFINITIES = (float("inf"), float("-inf"))


def timestamp_fn(obj):
    """The bolt's ``timestamp_fn`` as a function of the values: a method
    (``def timestamp_fn(self, values)``), a ``staticmethod``, or a plain function or
    lambda assigned in the class body (``timestamp_fn = lambda values: values[2] / 1000``)."""
    raw = inspect.getattr_static(type(obj), "timestamp_fn", None)
    if raw is None:
        return None
    if isinstance(raw, staticmethod):
        return raw.__func__
    try:
        n = len(inspect.signature(raw).parameters)
    except (TypeError, ValueError):
        n = 2
    return raw if n == 1 else getattr(obj, "timestamp_fn")


class WindowRuntime:
    def __init__(self, inst, clock, obj):
        self.inst, self.clock, self.obj = inst, clock, obj
        t = inst.cdef.time
        self.event_time = t["event_time"]
        self.aggregating = t["aggregating"]
        self.track = inst.acking
        self.op = make_operator(Window.from_dict(t["window"]), clock.timers,
                                aggregate=obj if self.aggregating else None, event_time=self.event_time,
                                lateness=t["lateness"], track=self.track,
                                mergeable=getattr(type(obj), "merge", None) is not AggregatingWindowBolt.merge)
        self.late_stream = t.get("late_stream")
        self.remaining = {}  # at least once: id(tuple) -> [tuple, windows it is still in]
        self.ts_field, self.ts_fn = t.get("timestamp_field"), timestamp_fn(obj)
        self.derived = clock.input.derived
        self._inputs = {}  # (component, stream) -> (key index, timestamp index)
        tdef = inst.plan.topology
        for i in inst.cdef.inputs:
            fields = tdef.components[i.component].outputs[i.stream]["fields"]
            if i.grouping.kind == "fields":
                idx = [fields.index(f) for f in i.grouping.fields]
                key = idx[0] if len(idx) == 1 else tuple(idx)
            else:
                key = None
            ts = fields.index(self.ts_field) if self.ts_field else None
            self._inputs[(i.component, i.stream)] = (key, ts)
        self._last = (None, None, None, None)  # component, stream, key index, ts index
        # what process reads for every tuple, fixed for the bolt's life (one tuple, one read)
        self._hot = (self.event_time, self.ts_fn, self.derived, clock.input, self.op.add, self.track)
        self._warn = LogThrottle(10.0)
        obj.process = self.process

    # -- the per-tuple path --------------------------------------------------------------
    def process(self, tup):
        # (unpacked, not tup[i]: Tuple.__getitem__ is Python code, it also takes field names;
        # the bolt's constants come in one read of _hot)
        _, comp, stream, src, values = tup
        lc, ls, ki, ti = self._last
        if comp is not lc or stream is not ls:
            ki, ti = self._inputs.get((comp, stream), (None, None))
            self._last = (comp, stream, ki, ti)
        if ki is None:
            key = None
        elif type(ki) is int:
            key = values[ki]
        else:
            key = tuple(values[i] for i in ki)
        event_time, ts_fn, derived, watermark, add, track = self._hot
        if event_time:
            try:
                ts = values[ti] if ts_fn is None else ts_fn(values)
            except Exception as e:  # noqa: BLE001 - user code or a short tuple
                return self.reject(tup, None, f"no timestamp: {type(e).__name__}: {e}", bad=True)
            kind = type(ts)
            if kind is float:
                if ts - ts:  # NaN or an infinity (0.0 for any other float): no window holds it
                    return self.reject(tup, ts, f"timestamp {ts!r} is not a finite number", bad=True)
            elif kind is not int:
                if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts != ts or ts in _INFINITIES:
                    return self.reject(tup, ts, f"timestamp {ts!r} is not a number", bad=True)
            if src in derived:
                bm = self.clock.batch_max
                if ts > bm.get(src, ts - 1):
                    bm[src] = ts
            wm = watermark.current
        else:
            ts = wm = time.time()
        n, firings = add(key, ts, tup, wm)
        if n is TOO_LATE:
            return self.reject(tup, ts, f"later than the allowed lateness: window over, watermark {wm}")
        if track:
            self.remaining[id(tup)] = [tup, n]
        if firings:  # (usually none: no loop over an empty tuple)
            for f in firings:
                if f.late:
                    self.clock.counters["__late-count"] += 1
                self.fire(f)

    def reject(self, tup, ts, reason, bad=False):
        """A tuple no window takes: to the late stream (anchored to it) or the log; counted."""
        c = self.clock.counters
        c["__bad-timestamp-count" if bad else "__too-late-count"] += 1
        inst = self.inst
        if self.late_stream:
            if self.track:
                inst.window_anchors = (tup,)
            try:
                self.obj.emit([list(tup[4]), ts if ts is None or isinstance(ts, (int, float)) else repr(ts),
                               reason], stream=self.late_stream)
            finally:
                inst.window_anchors = None
        elif self._warn.ready():
            log.warning("%s[task %d]: tuple %r from %s dropped: %s (no late_stream; counted in %s)",
                        inst.component, inst.task, list(tup[4])[:8], tup[1], reason,
                        "__bad-timestamp-count" if bad else "__too-late-count")
        if self.track:
            self.obj.ack(tup)

    # -- firing --------------------------------------------------------------------------
    def on_timer(self, key, tag):
        f = self.op.on_timer(key, tag)
        if f is None:
            return
        if isinstance(f, list):  # (sliced sliding windows: every key due at one window end)
            for one in f:
                self.fire(one)
        else:
            self.fire(f)

    def fire(self, f):
        self.clock.counters["__windows-fired-count"] += 1
        inst, obj = self.inst, self.obj
        if self.track and f.pending:
            inst.window_anchors = f.pending
        ok = True
        try:
            if self.aggregating:
                obj.emit_window(f.key, WindowSpan(f.start, f.end, f.key, f.late), obj.result(f.result))
            else:
                obj.process_window(TupleWindow(f.result, f.new, f.expired, f.start, f.end, f.key, f.late))
        except Exception as e:  # noqa: BLE001 - user code: logged, counted, its tuples failed
            ok = False
            inst.report_error("process_window" if not self.aggregating else "emit_window", e)
        finally:
            inst.window_anchors = None
        if self.track and f.pending:
            remaining = self.remaining
            for t in f.pending:
                r = remaining.get(id(t))
                if r is None:
                    continue
                if not ok:
                    del remaining[id(t)]
                    obj.fail(t)
                    continue
                r[1] -= 1
                if r[1] <= 0:
                    del remaining[id(t)]
                    obj.ack(t)

    # -- checkpoints ---------------------------------------------------------------------
    @staticmethod
    def _encode(t):
        return [t[1], t[2], t[3], t[4]]

    @staticmethod
    def _decode(d):
        return _new_tuple(Tuple, (None, d[0], d[1], d[2], d[3]))

    def snapshot_key(self, key):
        return self.op.snapshot_key(key, self._encode)

    def load_key(self, key, doc):
        self.op.load_key(key, doc, self._decode)

    def reset(self):
        self.op.clear()
        self.remaining.clear()
