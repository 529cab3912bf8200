"""The bolt side of an instance: decodes batches, calls ``process`` per tuple,
acks / fails / anchors (automatically unless the bolt does it), sends ticks."""
from __future__ import annotations

import logging
import time

from bittern.api.stream import DEFAULT_STREAM
from bittern.api.tuple import Tuple, tick_tuple
from bittern.errors import SchemaError
from bittern.time.watermarks import watermark_components
from bittern.wire import WATERMARK_STREAM

from .acking import AckBuffer
from .alignment import BUFFER, DELIVER, Abandoned, Aligned, BarrierAligner, Ignored
from .emitter import upstream_tasks
from .runtime import Crash, Instance
from .stats import LatencyStat
from .timekeeping import BoltClock, TimerHandle
from .windowing import WindowRuntime

log = logging.getLogger("bittern.instance")

_new_tuple = tuple.__new__
ACK_FLUSH_ENTRIES = 2048


class BoltInstance(Instance):
    kind = "bolt"

    def __init__(self, plan, task):
        super().__init__(plan, task)
        self.ackbuf = AckBuffer()
        self.crash_on_error = bool(self.conf["bittern.bolt.crash.on.exception"])
        self.execute_latency = LatencyStat()
        self.process_latency = LatencyStat()
        # The input being processed, until the bolt acks or fails it; the XOR of the
        # edges emitted anchored to it is kept by the emitter (anchor_acc).
        self._cur = None
        # The run the current input belongs to, as [id, tuples not yet acked]: the run's
        # edges are acked with the last of its tuples (see Emitter).
        self._cur_run = None
        self._held = {}  # id(tuple) -> [tuple, acc, received, run]: tuples kept past process()
        # Set while a windowed bolt's window fires: what its emits are anchored to.
        self.window_anchors = None
        if self.eo:
            self.on_data = self.on_data_eo
            self.channels = upstream_tasks(plan, self.component)
            self.aligner = None  # made in setup, when the buffer bound is known
            self._align_start = 0.0
            self.counters["__dropped-tuples"] = 0  # from before a rollback
            self.counters["__checkpoints-abandoned"] = 0

    def setup(self):
        super().setup()
        if self.eo:
            self.aligner = BarrierAligner(self.channels, self.barrier_max)
        else:
            hook = getattr(self.obj, "_runtime_flush", None)  # a SinkBolt committing and acking in groups
            if callable(hook):
                self.add_timer(hook)

    # -- binding ------------------------------------------------------------------------
    def bind(self, obj):
        self.auto_ack = getattr(obj, "auto_ack", True)
        self.auto_fail = getattr(obj, "auto_fail", True)
        self.auto_anchor = getattr(obj, "auto_anchor", True)
        if self.acking:
            self.emitter.general_emit = self.emit_anchored
            obj.emit, obj.ack, obj.fail = self.emitter.emit_auto, self.ack, self.fail
        else:
            obj.emit, obj.ack, obj.fail = self.emitter.emit, self.ack_untracked, self.fail_untracked

    def make_clock(self, obj):
        t = self.cdef.time
        carries = watermark_components(self.plan.topology)
        windowed = bool(t.get("window"))
        if not (windowed or t.get("timers") or any(i.component in carries for i in self.cdef.inputs)):
            return None
        clock = BoltClock(self, extracts_timestamps=windowed and t["event_time"], lag=t.get("lag", 0.0),
                          carries=carries)
        obj.timers = TimerHandle(clock)
        if windowed:
            clock.windows = WindowRuntime(self, clock, obj)
        if not self.eo:
            self.on_data = self.on_data_timed
        return clock

    def ack_untracked(self, tup):
        self.counters["__ack-count"] += 1

    def fail_untracked(self, tup):
        self.counters["__fail-count"] += 1

    def emit_anchored(self, values, stream=DEFAULT_STREAM, anchors=None, direct_task=None,
                      need_task_ids=False):
        """Every reliable emit the emitter's fast path (``Emitter.emit_auto``) leaves:
        explicit anchors, several trees, other streams, direct or need_task_ids."""
        em = self.emitter
        if anchors is None:
            cur = self._cur
            if cur is not None and self.auto_anchor:
                mid = cur.id
                if mid is not None and len(mid) == 2:  # one tree: the emitter's rooted path
                    tasks, xor = em.emit_rooted(values, stream, mid[0], direct_task, need_task_ids)
                    em.anchor_acc ^= xor
                    return tasks if need_task_ids else None
            anchors = (cur,) if self.auto_anchor and cur is not None else (self.window_anchors or ())
        elif isinstance(anchors, Tuple):
            anchors = (anchors,)
        tracked = [a for a in anchors if a.id]
        if not tracked:
            return self.emitter.emit(values, stream, None, direct_task, need_task_ids)
        roots = [a.id[0::2] for a in tracked]
        tasks, xors = self.emitter.emit_tracked(values, stream, roots, direct_task, need_task_ids)
        for a, xor in zip(tracked, xors):
            if a is self._cur:
                self.emitter.anchor_acc ^= xor
            else:
                h = self._held.get(id(a))
                if h is None:
                    self._held[id(a)] = h = [a, 0, time.monotonic(), None]
                h[1] ^= xor
        return tasks if need_task_ids else None

    def _take_acc(self, tup):
        """The XOR of the edges emitted anchored to ``tup``, when it was received if it
        was held past ``process``, and its run. Acking or failing the current input ends
        its anchoring: later emits of that ``process`` call are not anchored to it."""
        if tup is self._cur:
            em = self.emitter
            acc, em.anchor_root, em.anchor_acc, self._cur = em.anchor_acc, None, 0, None
            return acc, None, self._cur_run
        h = self._held.pop(id(tup), None)
        return (h[1], h[2], h[3]) if h is not None else (0, None, None)

    def ack(self, tup):
        """Ack ``tup``: the edges it created (its children's) now, its run's edges with
        the run's last tuple. A second ack of a tuple finds no run and acks nothing."""
        self.counters["__ack-count"] += 1
        acc, received, run = self._take_acc(tup)
        if received is not None:
            self.process_latency.add(time.monotonic() - received)
        msgid = tup.id
        if msgid:
            ab = self.ackbuf
            if acc:
                for i in range(0, len(msgid), 2):
                    ab.ack(msgid[i], acc)
            if run is not None:
                run[1] -= 1
                if run[1] == 0:
                    for i in range(0, len(msgid), 2):
                        ab.ack(msgid[i], msgid[i + 1])

    def fail(self, tup):
        """Fail every tree of ``tup``. Its run never completes, so the run's edges are
        never acked: the trees are failed already."""
        self.counters["__fail-count"] += 1
        self._take_acc(tup)
        msgid = tup.id
        if msgid:
            for i in range(0, len(msgid), 2):
                self.ackbuf.fail(msgid[i])

    # -- data ---------------------------------------------------------------------------
    def on_data(self, payload):
        self.on_batch(*self._loads(payload))

    def on_data_timed(self, payload):
        """``on_data`` of a bolt with a clock: watermarks come in band."""
        b = self._loads(payload)
        if len(b) == 3:
            self.time.on_watermark(b[0], b[2])
            return
        self.on_batch(*b)
        self.time.after_batch()

    def on_batch(self, src, stream, vals, runs):
        comp = self.task_component[src]
        process = self.obj.process
        t0 = time.monotonic()
        if runs is None and not self.acking:
            self._process_plain(vals, comp, stream, src, process)
        else:
            self._process_tracked(vals, runs, comp, stream, src, process, t0)
        n = len(vals)
        dt = (time.monotonic() - t0) / n
        self.execute_latency.add(dt, n)
        self.counters["__execute-count"] += n
        if self.ackbuf.count >= ACK_FLUSH_ENTRIES:
            self.send_acks(self.ackbuf)

    # -- exactly once -------------------------------------------------------------------
    def on_data_eo(self, payload):
        """A batch ``[src, stream, values, msgids, epoch]`` or a barrier ``[src,
        "__barrier", id, epoch]``. Anything of another epoch is from before a rollback
        (or reaches a task that has not restored yet) and is dropped. Data goes through
        the aligner: held while its channel already delivered the barrier being aligned."""
        b = self._loads(payload)
        if b[-1] != self.epoch:
            if len(b) == 5:
                self.counters["__dropped-tuples"] += len(b[2])
            return
        src = b[0]
        al = self.aligner
        if len(b) == 4 and b[1] != WATERMARK_STREAM:
            if al.aligning is None:
                self._align_start = time.monotonic()
            self.on_barrier(al.on_barrier(src, b[2]))
            return
        r = al.on_data(src, len(b[2]) if len(b) == 5 else 0, b)
        if r is DELIVER:
            self.process_batch(b)
        elif r is not BUFFER:  # Overflow: the checkpoint is given up, the data flows
            log.warning("%s[task %d]: checkpoint %d abandoned: more than %d tuples held while aligning",
                        self.component, self.task, r.checkpoint_id, al.max_buffered)
            self.counters["__checkpoints-abandoned"] += 1
            self.process_released()

    def on_barrier(self, r):
        if r is None:
            return  # waiting for other inputs
        if isinstance(r, Aligned):
            self.take_checkpoint(r.checkpoint_id, (time.monotonic() - self._align_start) * 1000.0)
            self.process_released()
        elif isinstance(r, Abandoned):
            log.info("%s[task %d]: checkpoint %d abandoned: barrier %d arrived first", self.component,
                     self.task, r.checkpoint_id, r.by)
            self.counters["__checkpoints-abandoned"] += 1
            self._align_start = time.monotonic()
            self.process_released()
        elif isinstance(r, Ignored):
            log.debug("%s[task %d]: %s", self.component, self.task, r.reason)

    def process_released(self):
        for _, b in self.aligner.release():
            self.process_batch(b)

    def process_batch(self, b):
        src, stream, vals = b[0], b[1], b[2]
        if len(b) == 4:  # a watermark (barriers never reach here)
            self.time.on_watermark(src, vals)
            return
        t0 = time.monotonic()
        self._process_plain(vals, self.task_component[src], stream, src, self.obj.process)
        n = len(vals)
        if n:
            self.execute_latency.add((time.monotonic() - t0) / n, n)
            self.counters["__execute-count"] += n
        if self.time is not None:
            self.time.after_batch()

    def _process_plain(self, vals, comp, stream, src, process):
        """Tuples with nothing to ack (at most once, and exactly once's batches)."""
        for v in vals:
            tup = _new_tuple(Tuple, (None, comp, stream, src, v))
            try:
                process(tup)
            except Exception as e:  # noqa: BLE001 - user code: log, count, keep serving
                self._process_error(tup, e)

    def reset_inputs(self):
        self.aligner = BarrierAligner(self.channels, self.barrier_max)

    def _process_tracked(self, vals, runs, comp, stream, src, process, t0):
        """The reliable loop, run by run (see Emitter). The common case, auto-acked
        inputs of one tree, is folded here straight into the ack buffer's ``{root: xor}``:
        each input's children's edges as it is acked, the run's edge once every tuple of
        the run was. A run of one such tuple (what a spout sends) takes the shortest
        path, and its whole ack (its edge and its children's) rides on the last run it
        emitted into, while that run's batch is unsent, instead of going to the spout:
        the receiver acks it with that run (see ``instance/acking.py``). The emitter's
        ``anchor_acc`` is 0 whenever an input starts: whoever takes it resets it. A bolt
        without output streams (a sink) never touches the anchoring state. (Nothing
        drains the ack buffer during ``process``, except a crash.)"""
        if runs is None:
            runs = (0, None)
        em = self.emitter
        auto_ack = self.auto_ack
        anchors = self.auto_anchor and bool(em.routers)
        sink = auto_ack and not em.routers
        held = self._held
        folded = self.ackbuf.acks
        fget = folded.get
        acked = rode = 0
        n = len(vals)
        end_k = len(runs) - 2
        for k in range(0, end_k + 2, 2):
            mid = runs[k + 1]
            start = runs[k]
            end = runs[k + 2] if k < end_k else n
            single = mid is not None and len(mid) == 2
            if single and auto_ack and end - start == 1:
                root = mid[0]
                tup = _new_tuple(Tuple, (mid, comp, stream, src, vals[start]))
                self._cur = tup
                self._cur_run = [mid, 1]
                if anchors:
                    em.anchor_root = root
                try:
                    process(tup)
                except Exception as e:  # noqa: BLE001 - user code
                    self._process_error(tup, e)
                if self._cur is tup:
                    acc = em.anchor_acc
                    if acc:
                        em.anchor_acc = 0
                    acked += 1
                    last = em.last_run
                    if last is not None and last[0] == root:
                        last[1] ^= mid[1] ^ acc  # the whole ack rides on a child run
                        rode += 1
                    else:
                        folded[root] = fget(root, 0) ^ mid[1] ^ acc
                continue
            chunk = vals[start:end] if end - start != n else vals
            run = self._cur_run = [mid, end - start] if mid is not None else None
            root = mid[0] if single else None
            auto = 0
            if sink and (single or mid is None):
                for v in chunk:
                    tup = _new_tuple(Tuple, (mid, comp, stream, src, v))
                    self._cur = tup
                    try:
                        process(tup)
                    except Exception as e:  # noqa: BLE001 - user code
                        self._process_error(tup, e)
                    if self._cur is tup:
                        auto += 1
            else:
                for v in chunk:
                    tup = _new_tuple(Tuple, (mid, comp, stream, src, v))
                    self._cur = tup
                    if anchors:
                        em.anchor_root = root
                    try:
                        process(tup)
                    except Exception as e:  # noqa: BLE001 - user code
                        self._process_error(tup, e)
                    if self._cur is tup:  # neither acked nor failed by the bolt
                        if auto_ack and (single or mid is None):
                            acc = em.anchor_acc
                            if acc:
                                em.anchor_acc = 0
                                folded[root] = fget(root, 0) ^ acc
                            auto += 1
                        elif auto_ack:
                            self.ack(tup)
                        else:
                            held[id(tup)] = [tup, em.anchor_acc, t0, run]
                            em.anchor_acc = 0
            acked += auto
            if run is not None and auto:
                run[1] -= auto
                if run[1] == 0:
                    folded[root] = fget(root, 0) ^ mid[1]
        self._cur = self._cur_run = None
        em.anchor_root = None
        if acked:
            self.ackbuf.count += acked - rode
            self.counters["__ack-count"] += acked

    def _process_error(self, tup, e):
        fatal = isinstance(e, SchemaError)
        self.report_error("process", e, fatal=fatal)
        if self.auto_fail and (not self.acking or self._cur is tup):
            (self.fail if self.acking else self.fail_untracked)(tup)
        if self.crash_on_error:
            self.flush()
            raise Crash(f"process raised {type(e).__name__} and bittern.bolt.crash.on.exception is set")

    def flush(self):
        self.emitter.flush()
        if self.ackbuf:
            self.send_acks(self.ackbuf)

    def metrics(self):
        m = super().metrics()
        m.update(self.execute_latency.metrics("__execute-latency"))
        lat = self.process_latency if self.process_latency.count else self.execute_latency
        m.update(lat.metrics("__process-latency"))
        return m

    # -- the loop -----------------------------------------------------------------------
    def init_timers(self):
        super().init_timers()
        self._tick_every = float(self.conf["topology.tick.tuple.freq.secs"])
        self._next_tick = time.monotonic() + self._tick_every

    def timers(self, now):
        wait = super().timers(now)
        if self._tick_every and self.started:
            if now >= self._next_tick:
                self._next_tick = now + self._tick_every
                try:
                    self.obj.process_tick(tick_tuple(self._tick_every))
                except Exception as e:  # noqa: BLE001 - user code
                    self.report_error("process_tick", e)
            wait = min(wait, max(0.0, self._next_tick - now))
        return wait

    def loop(self):
        poll = self.poll
        em = self.emitter
        ackbuf = self.ackbuf
        while not self.stopping:
            now = time.monotonic()
            wait = self.timers(now)
            if em.buffers:
                wait = min(wait, max(0.0, em.oldest + self._flush_every - now))
            elif ackbuf:
                wait = 0.0
            if poll(int(wait * 1000) + (0 if wait == 0 else 1)):
                emptied = self.drain()
                if emptied or em.due(time.monotonic(), self._flush_every):
                    self.flush()
            elif em.buffers or ackbuf:
                self.flush()
