"""Event time in an instance: the thin I/O around :mod:`bittern.time`.

* :class:`SpoutClock` (a spout declaring ``event_time``): follows the largest timestamp
  it emitted, sends its watermark every ``topology.watermark.interval.ms``, says it is
  idle after ``topology.watermark.idle.secs`` without an emit (and sends its watermark
  again before its next tuple), sends +inf once its source ended (``done()``, or a
  ``ReliableSpout`` exhausted), and ``emit_watermark(ts)`` for a spout that makes its own.
* :class:`BoltClock` (a bolt whose inputs carry watermarks, a windowed bolt, or a bolt
  with ``on_timer``): the input watermark over its upstream tasks, the timers, firing
  event timers as the watermark passes them and processing timers as the clock does,
  and forwarding its own watermark downstream after what those timers emitted.

Watermarks are DATA frames ``[src, "__watermark", ts]`` sent after a flush of the
emitter, so on every (source task, destination task) channel a watermark follows the
tuples emitted before it. Every task sends its current watermark again each interval,
so a restarted task downstream learns it; a receiver keeps the largest it saw per
channel, so nothing downstream moves backwards. Under EFFECTIVELY_ONCE the frames carry
the epoch, go through barrier alignment like data, and the watermarks, the source's
clock, the timers and the windows are part of the task's checkpoint.
"""
from __future__ import annotations

import logging
import numbers
import time

from bittern.api.stream import DEFAULT_STREAM
from bittern.hashing import stable_hash
from bittern.time.timers import EVENT, KINDS, PROCESSING, TimerQueue
from bittern.time.watermarks import NEG_INF, POS_INF, InputWatermark, SourceWatermark, watermark_components
from bittern.wire import DATA, task_bytes

from .emitter import downstream_tasks

log = logging.getLogger("bittern.instance")


class _Clock:
    """What spouts and bolts share: sending watermarks downstream."""

    def __init__(self, inst, carries=None):
        self.inst = inst
        conf = inst.conf
        self.interval = max(0.01, float(conf["topology.watermark.interval.ms"]) / 1000.0)
        self.idle_secs = float(conf["topology.watermark.idle.secs"])
        # the components whose outputs carry watermarks (from the plan, once per instance)
        self.carries = carries = watermark_components(inst.plan.topology) if carries is None else carries
        self.out_tasks = downstream_tasks(inst.plan, inst.component) if inst.component in carries else []
        self.sent = NEG_INF  # the last watermark sent downstream
        self.sent_idle = False
        self._next_send = time.monotonic() + self.interval

    def can_send(self):
        inst = self.inst
        return bool(self.out_tasks) and inst.started and (not inst.eo or inst.epoch >= 0)

    def send(self, w):
        """Flush, then watermark ``w`` (None: idle) to every downstream task."""
        if not self.can_send():
            return
        inst = self.inst
        em = inst.emitter
        em.flush()
        payload = em.watermark_payload(w)
        for t in self.out_tasks:
            inst.send([DATA, task_bytes(t), payload])
        if w is None:
            self.sent_idle = True
        else:
            self.sent_idle = False
            self.sent = max(self.sent, w)

    def metrics(self):
        out = self.sent if self.sent > NEG_INF else None
        return {"__output-watermark": out}


def _number(ts):
    return isinstance(ts, numbers.Real) and not isinstance(ts, bool) and ts == ts  # (not NaN)


class SpoutClock(_Clock):
    def __init__(self, inst, event_time):
        super().__init__(inst)
        self.et = event_time
        self.source = SourceWatermark(event_time.lag)
        self.ended = False
        self.bad = 0
        self._idx = {}
        if event_time.field is not None:
            for stream, decl in inst.cdef.outputs.items():
                if event_time.field in decl["fields"]:
                    self._idx[stream] = decl["fields"].index(event_time.field)
        self._last_count = -1
        self._quiet_since = time.monotonic()

    def wrap(self, emit):
        """The spout's emit, also following timestamps (once per emitted tuple)."""
        if self.et.manual_mode:
            def emit_manual(values, *args, **kwargs):
                if self.sent_idle:
                    self.send(self.sent if self.sent > NEG_INF else None)
                return emit(values, *args, **kwargs)
            return emit_manual
        fn, idx, source = self.et.fn, self._idx, self.source
        default_idx = idx.get(DEFAULT_STREAM)

        def emit_timed(values, tup_id=None, stream=DEFAULT_STREAM, direct_task=None, need_task_ids=False):
            if self.sent_idle:
                self.wake()
            r = emit(values, tup_id, stream, direct_task, need_task_ids)
            try:
                if fn is not None:
                    ts = fn(values)
                else:
                    i = default_idx if stream == DEFAULT_STREAM else idx.get(stream)
                    if i is None:
                        return r
                    ts = values[i]
                if ts > source.max_ts:
                    source.max_ts = ts
            except Exception:  # noqa: BLE001 - a timestamp that is not a number (counted, logged once)
                self.bad += 1
                if self.bad == 1:
                    log.warning("%s[task %d]: tuple %r has no numeric timestamp; it does not move the "
                                "watermark (counted in __bad-timestamp-count)", self.inst.component,
                                self.inst.task, values)
            return r
        return emit_timed

    def wake(self):
        self.send(self.current())

    def current(self):
        if self.ended:
            return POS_INF
        w = self.source.watermark if not self.et.manual_mode else self.sent
        return w if w > NEG_INF else None

    def emit_watermark(self, ts):
        """A spout's own watermark (``EventTime.manual()``); it never moves backwards."""
        if not _number(ts):
            raise ValueError(f"emit_watermark: a watermark is a number of seconds, got {ts!r}")
        if ts > self.sent:
            self.send(ts)

    def end(self):
        """The source has no more tuples: +inf, so every window downstream can fire."""
        if not self.ended:
            self.ended = True
            self.send(POS_INF)

    def poll(self, now):
        """Periodic: the watermark (again), or idle. Returns seconds until due again."""
        if now < self._next_send:
            return self._next_send - now
        self._next_send = now + self.interval
        count = self.inst.emitter.emit_count
        if count != self._last_count:
            self._last_count, self._quiet_since = count, now
        elif (self.idle_secs and not self.ended and not self.sent_idle
              and now - self._quiet_since >= self.idle_secs):
            self.send(None)
            return self.interval
        if not self.sent_idle:
            w = self.current()
            if w is not None:
                self.send(w)
        return self.interval

    def metrics(self):
        m = super().metrics()
        m["__watermark-lag"] = (time.time() - self.sent) if NEG_INF < self.sent < POS_INF else None
        m["__bad-timestamp-count"] = self.bad
        return m

    def save(self, state):
        state.system["source_max_ts"] = self.source.max_ts if self.source.max_ts > NEG_INF else None
        state.system["source_ended"] = self.ended
        if self.et.manual_mode:
            state.system["manual_wm"] = self.sent if self.sent > NEG_INF else None

    def load(self, state):
        st = state.system
        mx = st.get("source_max_ts")
        self.source.max_ts = NEG_INF if mx is None else mx
        self.ended = False  # a rewound source emits again (done() ends it again)
        self.sent, self.sent_idle = NEG_INF, False
        if self.et.manual_mode and st.get("manual_wm") is not None:
            self.sent = st["manual_wm"]


class TimerHandle:
    """``self.timers`` of a bolt: ``set(key, ts, kind="event")``, ``delete``, ``pending``,
    and ``watermark`` (the input watermark)."""

    def __init__(self, clock):
        self._clock = clock

    def set(self, key, ts, kind=EVENT):
        self._clock.check_timer(key, ts, kind)
        self._clock.timers.set(kind, key, ts)

    def delete(self, key, ts, kind=EVENT):
        self._clock.timers.delete(kind, key, ts)

    def pending(self, key=None):
        """This bolt's own timers as ``[(kind, key, ts)]`` in time order."""
        return [(k, key_, ts) for k, key_, ts, tag in self._clock.timers.pending(key) if tag is None]

    @property
    def watermark(self):
        w = self._clock.input.current
        return None if w == NEG_INF else w


class BoltClock(_Clock):
    def __init__(self, inst, extracts_timestamps=False, lag=0.0, carries=None):
        super().__init__(inst, carries)
        comp_tasks, carries = inst.plan.packing.component_tasks, self.carries
        inband, derived = set(), set()
        for i in inst.cdef.inputs:
            if i.component in carries:
                inband.update(comp_tasks[i.component])
            elif extracts_timestamps:
                derived.update(comp_tasks[i.component])
        self.input = InputWatermark(sorted(inband), sorted(derived - inband), lag, self.idle_secs)
        self.timers = TimerQueue()
        self.windows = None  # instance.windowing.WindowRuntime, for a windowed bolt
        self.batch_max = {}  # derived channel -> largest timestamp in the batch being processed
        self.counters = {"__late-count": 0, "__too-late-count": 0, "__bad-timestamp-count": 0,
                         "__windows-fired-count": 0, "__timers-fired-count": 0}
        self._owner = self._ownership(inst)

    # -- ownership of keys (timers set for a key this task does not own are refused)
    def _ownership(self, inst):
        inputs = inst.cdef.inputs
        if not inputs or any(i.grouping.kind != "fields" for i in inputs):
            return None
        tasks = sorted(inst.plan.packing.component_tasks[inst.component])
        me = tasks.index(inst.task)
        if inst.eo:
            return lambda key: inst.key_groups.task_for(key, tasks) == inst.task
        if inst.conf.get("topology.fields.grouping.hash", "crc32") != "crc32":
            return None
        return lambda key: stable_hash(key) % len(tasks) == me

    def check_timer(self, key, ts, kind):
        where = f"component {self.inst.component!r}"
        if kind not in KINDS:
            raise ValueError(f"{where}: timer kind must be 'event' or 'processing', got {kind!r}")
        if not _number(ts):
            raise ValueError(f"{where}: a timer's time is a number of seconds, got {ts!r}")
        if self._owner is not None and not self._owner(key):
            raise ValueError(f"{where}: timer for key {key!r}, which task {self.inst.task} does not own (its "
                             f"fields grouping sends that key to another task)")

    # -- input ---------------------------------------------------------------------------
    def on_watermark(self, src, w):
        if self.input.on_watermark(src, w):
            self.advance()
        elif w is None and self.input.all_idle and not self.sent_idle:
            self.send(None)

    def after_batch(self):
        """After a batch: what derived channels' timestamps say."""
        bm = self.batch_max
        if bm:
            now, advanced = time.monotonic(), False
            for src, ts in bm.items():
                advanced = self.input.on_timestamp(src, ts, now) or advanced
            bm.clear()
            if advanced:
                self.advance()

    def advance(self):
        """The input watermark moved: fire the event timers it passed (in time order),
        then send it downstream, after what they emitted."""
        wm = self.input.current
        self.fire(EVENT, wm)
        if wm > self.sent:
            self.send(wm)

    def fire(self, kind, now):
        pop = self.timers.pop_due
        while True:
            t = pop(kind, now)
            if t is None:
                return
            ts, key, tag = t
            if tag is None:
                self.counters["__timers-fired-count"] += 1
                try:
                    self.inst.obj.on_timer(key, ts, kind)
                except Exception as e:  # noqa: BLE001 - user code
                    self.inst.report_error("on_timer", e)
            elif self.windows is not None:
                self.windows.on_timer(key, tag)

    def poll(self, now):
        """Periodic: processing timers, idle derived channels, the watermark again."""
        inst = self.inst
        if not inst.started or (inst.eo and inst.epoch < 0):
            return self.interval
        self.fire(PROCESSING, time.time())
        if self.input.check_idle(now):
            self.advance()
        if now >= self._next_send:
            self._next_send = now + self.interval
            if self.input.all_idle:
                if not self.sent_idle:
                    self.send(None)
            elif self.sent > NEG_INF:
                self.send(self.sent)
        wait = self._next_send - now
        nxt = self.timers.next_due(PROCESSING)
        if nxt is not None:
            wait = min(wait, max(0.0, nxt - time.time()))
        return wait

    def metrics(self):
        m = super().metrics()
        w = self.input.current
        m["__input-watermark"] = w if w > NEG_INF else None
        m["__watermark-lag"] = (time.time() - w) if NEG_INF < w < POS_INF else None
        m.update(self.counters)
        if self.windows is not None:
            m["__open-windows"] = self.windows.op.open_windows()
        return m

    # -- checkpoints (EFFECTIVELY_ONCE) -----------------------------------------------------
    def save(self, state):
        state.system["input_watermark"] = self.input.current if self.input.current > NEG_INF else None
        sk = state.system_keyed
        sk._groups.clear()
        per_key = {}
        for key, entries in self.timers.by_key().items():
            per_key[key] = {"t": entries}
        if self.windows is not None:
            for key in self.windows.op.keys():
                doc = self.windows.snapshot_key(key)
                if doc is not None:
                    per_key.setdefault(key, {})["w"] = doc
        unkeyed = per_key.pop(None, None)
        state.system["unkeyed"] = unkeyed
        group_of = state.key_groups.group_of
        for key, doc in per_key.items():
            sk._groups.setdefault(group_of(key), {})[key] = doc

    def load(self, state):
        self.timers.clear()
        if self.windows is not None:
            self.windows.reset()
        stores = [state.system] + list(state.system_merged)
        wms = [s.get("input_watermark") for s in stores if "input_watermark" in s]
        self.input.restore(min((w for w in wms if w is not None), default=None)
                           if wms and None not in wms else None)
        self.sent, self.sent_idle = NEG_INF, False
        docs = [(key, doc) for d in state.system_keyed._groups.values() for key, doc in d.items()]
        docs += [(None, s["unkeyed"]) for s in stores if s.get("unkeyed")]
        for key, doc in docs:
            key = tuple(key) if isinstance(key, list) else key
            self.timers.load(key, doc.get("t", ()))
            if self.windows is not None and doc.get("w") is not None:
                self.windows.load_key(key, doc["w"])
