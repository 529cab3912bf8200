"""The spout side of an instance: calls ``next_tuple`` while active, not paused and
under ``topology.max.spout.pending``; tracks the trees of reliable tuples.

Under EFFECTIVELY_ONCE nothing is tracked: there is no acker, ``emit``'s ``tup_id`` is
ignored and the spout's ``ack``/``fail`` are never called (a tuple's fate is its
checkpoint's: a rollback rewinds the spout to the offset it kept in its state). The
spout emits only between RESUME and the next RESTORE; on CKPT_START it saves its
state and sends the barrier downstream (``Instance.take_checkpoint``)."""
from __future__ import annotations

import logging
import time

from bittern.api.stream import DEFAULT_STREAM
from bittern.errors import SchemaError
from bittern.wire import Op

from .acking import ACKED, RootTracker, new_root
from .runtime import Instance
from .timekeeping import SpoutClock
from .stats import LatencyStat

log = logging.getLogger("bittern.instance")

SPOUT_BURST = 64  # next_tuple calls per loop turn
# ... and at most this long: a next_tuple that sleeps (heronpy's ArrayLooper(sleep=1)) must not
# hold its tuples, metrics and control messages for SPOUT_BURST of its sleeps
SPOUT_BURST_SECS = 0.02
STALE_ACK_CHECK_SECS = 10.0
STALE_ACK_SECS = 60.0


class SpoutInstance(Instance):
    kind = "spout"

    def __init__(self, plan, task):
        super().__init__(plan, task)
        self.tracker = RootTracker()
        self.completed = []  # outcomes to report to the spout after next_tuple returns
        self.complete_latency = LatencyStat()
        self.counters["__timeout-count"] = 0
        self.max_pending = int(self.conf["topology.max.spout.pending"])
        self.timeout = float(self.conf["topology.message.timeout.secs"])
        self.timeouts_on = bool(self.conf["topology.enable.message.timeouts"]) and self.timeout > 0
        self.exhausted = False  # the spout called done()
        self.done_after = None  # exactly once: the first checkpoint it saved after done()
        self.backpressure = False
        self._bp_since = None
        self.bp_secs = 0.0

    def bind(self, obj):
        em = self.emitter
        emit_plain = em.emit
        completed = self.completed
        if self.eo:
            def emit(values, tup_id=None, stream=DEFAULT_STREAM, direct_task=None, need_task_ids=False):
                return emit_plain(values, stream, None, direct_task, need_task_ids)
        elif not self.acking:
            def emit(values, tup_id=None, stream=DEFAULT_STREAM, direct_task=None, need_task_ids=False):
                tasks = emit_plain(values, stream, None, direct_task, need_task_ids)
                if tup_id is not None:  # at most once: acked at once, as in Heron
                    completed.append((ACKED, tup_id, stream, None))
                return tasks
        else:
            rooted, register, task = em.emit_rooted, self.tracker.register, self.task
            monotonic = time.monotonic

            def emit(values, tup_id=None, stream=DEFAULT_STREAM, direct_task=None, need_task_ids=False):
                if tup_id is None:
                    return emit_plain(values, stream, None, direct_task, need_task_ids)
                root = new_root(task)
                tasks, xor = rooted(values, stream, root, direct_task, need_task_ids)
                done = register(root, xor, tup_id, stream, monotonic())
                if done is not None:
                    completed.append(done)
                return tasks if need_task_ids else None
        obj.emit = emit
        obj._runtime_done = self.on_done

    def make_clock(self, obj):
        et = getattr(obj, "event_time", None)
        if not self.cdef.time.get("watermarks") or et is None:
            return None
        clock = SpoutClock(self, et)
        obj.emit = clock.wrap(obj.emit)
        obj._runtime_emit_watermark = clock.emit_watermark
        obj._runtime_source_ended = clock.end
        return clock

    def on_checkpoint_start(self, checkpoint_id):
        if self.take_checkpoint(checkpoint_id) and self.exhausted and self.done_after is None:
            # the first checkpoint after the last emit: once its output is committed at every
            # sink, this task is done (bittern run --until-done waits for that)
            self.done_after = checkpoint_id
            log.info("%s[task %d]: done once checkpoint %d is committed", self.component, self.task,
                     checkpoint_id)

    def restore(self, checkpoint_id, epoch, layout=None):
        self.exhausted = False  # a bounded spout rewound may have more to emit
        self.done_after = None
        super().restore(checkpoint_id, epoch, layout)

    def on_done(self):
        if self.time is not None:
            self.time.end()
        if not self.exhausted:
            self.exhausted = True
            log.info("%s[task %d] is done: it emitted %d tuples and will emit no more",
                     self.component, self.task, self.emitter.emit_count)

    def set_active(self, active):
        if active == self.active:
            return
        self.active = active
        try:
            (self.obj.activate if active else self.obj.deactivate)()
        except Exception as e:  # noqa: BLE001 - user code
            self.report_error("activate" if active else "deactivate", e)
        if not active:
            self.flush()

    # -- acks -----------------------------------------------------------------------------
    def on_ack(self, payload):
        acks, fails = self._loads(payload)
        fail, out = self.tracker.fail, self.completed
        if acks:
            self.tracker.ack_many(acks, time.monotonic(), out)
        for root in fails:
            done = fail(root)
            if done is not None:
                out.append(done)
        self.report_completed()

    def report_completed(self):
        """Call the spout's ack/fail for finished trees (never from inside next_tuple)."""
        if not self.completed:
            return
        done = self.completed[:]
        self.completed.clear()  # the emit closure holds this very list
        obj_ack, obj_fail, now = self.obj.ack, self.obj.fail, time.monotonic()
        latencies = []
        acked = 0
        for outcome, tup_id, stream, started in done:
            try:
                if outcome == ACKED:
                    acked += 1
                    if started is not None:
                        latencies.append(now - started)
                    obj_ack(tup_id)
                else:
                    self.counters["__fail-count"] += 1
                    obj_fail(tup_id)
            except Exception as e:  # noqa: BLE001 - user code
                self.report_error(outcome == ACKED and "ack" or "fail", e)
        self.counters["__ack-count"] += acked
        if latencies:
            self.complete_latency.add_many(latencies)

    def check_timeouts(self, now):
        expired = self.tracker.expire(now - self.timeout)
        if expired:
            self.counters["__timeout-count"] += len(expired)
            self.completed.extend(expired)
            self.report_completed()

    def metrics(self):
        m = super().metrics()
        m["__pending"] = len(self.tracker)
        m["__exhausted"] = int(self.exhausted)
        if self.eo:
            m["__done-after"] = self.done_after
        m["__time-in-backpressure-ms"] = int(1000 * self.time_in_backpressure())
        m.update(self.complete_latency.metrics("__complete-latency"))
        return m

    # -- the loop -------------------------------------------------------------------------
    def init_timers(self):
        super().init_timers()
        self._timeout_every = max(0.05, self.timeout / 3) if self.timeouts_on else 0.0
        self._next_timeout = time.monotonic() + self._timeout_every

    def timers(self, now):
        wait = super().timers(now)
        if self.acking:
            every = self._timeout_every or STALE_ACK_CHECK_SECS
            if now >= self._next_timeout:
                self._next_timeout = now + every
                if self._timeout_every:
                    self.check_timeouts(now)
                else:  # no timeouts: still forget late acks of failed trees
                    self.tracker.drop_unregistered(now - STALE_ACK_SECS)
            wait = min(wait, max(0.0, self._next_timeout - now))
        return wait

    def can_emit(self):
        return (self.started and self.active and not self.backpressure and not self.exhausted
                and (not self.max_pending or self.tracker.inflight < self.max_pending))

    def on_ctrl(self, msg):
        if msg.get("op") == Op.BACKPRESSURE:
            on = bool(msg.get("on"))
            if on and not self.backpressure:
                self._bp_since = time.monotonic()
                self.flush()
            elif not on and self.backpressure:
                self.bp_secs += time.monotonic() - self._bp_since
            self.backpressure = on
        else:
            super().on_ctrl(msg)

    def time_in_backpressure(self):
        return self.bp_secs + (time.monotonic() - self._bp_since if self.backpressure else 0.0)

    def loop(self):
        em = self.emitter
        poll = self.poll
        sleep_max = self.conf["topology.sleep.spout.wait.strategy.time.ms"] / 1000.0
        idle = 0.0
        waiting = self.input_waiting
        while not self.stopping:
            if waiting():
                self.drain()
            now = time.monotonic()
            wait = self.timers(now)
            if self.can_emit():
                emitted = self.call_next_tuple(em)
                self.report_completed()
                if emitted:
                    idle = 0.0
                    if em.due(time.monotonic(), self._flush_every):
                        self.flush()
                    continue
                self.flush()
                idle = min(max(idle * 2, 0.0005), sleep_max)
                wait = min(wait, idle)
            else:
                self.flush()
            if poll(max(1, int(wait * 1000))):
                self.drain()

    def call_next_tuple(self, em):
        next_tuple = self.obj.next_tuple
        start = em.emit_count
        clock = time.monotonic
        deadline = clock() + SPOUT_BURST_SECS
        for _ in range(SPOUT_BURST):
            before = em.emit_count
            try:
                next_tuple()
            except SchemaError as e:
                self.report_error("next_tuple", e, fatal=True)
                break
            except Exception as e:  # noqa: BLE001 - user code
                self.report_error("next_tuple", e)
                break
            if em.emit_count == before or not self.can_emit() or clock() >= deadline:
                break
        return em.emit_count - start
