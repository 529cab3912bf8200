"""The Heron instance: one process running one spout or bolt task.

Thin I/O around the component: a DEALER socket to the container's stream
manager (``ipc://``), a single-threaded loop that reads data and control
messages, calls the user's code, and hands emitted batches back. Grouping,
batching and encoding happen in :mod:`instance.emitter`.
"""
from __future__ import annotations

import logging
import os
import time
import traceback

import zmq

from bittern import wire
from bittern.api.component import Bolt, Spout
from bittern.api.context import TopologyContext
from bittern.api.stream import DEFAULT_STREAM
from bittern.api.tuple import Tuple, register_schema, tick_tuple
from bittern.errors import SchemaError
from bittern.loader import load_class
from bittern.proc import ParentWatch, SignalWaker
from bittern.wire import CTRL, DATA, Op

from .emitter import Emitter, build_routers

log = logging.getLogger("bittern.instance")

HEARTBEAT_SECS = 1.0
RECV_BURST = 64  # batches read before the loop looks at timers again
SPOUT_BURST = 64  # next_tuple calls per loop turn
_new_tuple = tuple.__new__


class Instance:
    def __init__(self, plan, task):
        self.plan = plan
        self.task = task
        self.component = plan.packing.task_component[task]
        self.container = plan.packing.task_container[task]
        self.cdef = plan.topology.components[self.component]
        self.kind = self.cdef.kind
        self.conf = plan.component_config(self.component)
        self.task_component = dict(plan.packing.task_component)
        self.stopping = False
        self.started = False
        self.active = False
        self.initialized = False
        self.executed = 0
        self.acked = 0
        self.failed = 0
        self.errors = 0
        self.obj = None
        self.emitter = None
        self._parent = ParentWatch()
        self._zctx = zmq.Context()
        self.sock = self._zctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, wire.instance_identity(task))
        self.sock.setsockopt(zmq.SNDTIMEO, 200)
        self.sock.setsockopt(zmq.LINGER, 1000)
        self.serializer = wire.Serializer(self.conf["topology.serializer"])
        self._loads = self.serializer.loads

    # -- sending ------------------------------------------------------------------------
    def send(self, frames):
        """Blocking send (the stream manager pushes back by not reading) that still
        notices a stop request."""
        while True:
            try:
                self.sock.send_multipart(frames, copy=False)
                return True
            except zmq.Again:
                if self.stopping or self._parent.orphaned():
                    return False

    def send_ctrl(self, op, **fields):
        fields.setdefault("task", self.task)
        return self.send(wire.ctrl(op, **fields))

    def report_error(self, where, exc, fatal=False):
        self.errors += 1
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        log.error("%s[task %d] raised in %s: %s", self.component, self.task, where, tb)
        self.send_ctrl(Op.ERROR, component=self.component, where=where,
                       error=f"{type(exc).__name__}: {exc}", traceback=tb, fatal=fatal,
                       time=time.time())

    # -- setup --------------------------------------------------------------------------
    def _setup(self):
        """Import the class, build the context and emitter, bind the runtime methods,
        call ``initialize``. Raises on user errors (reported by ``run``)."""
        plan = self.plan
        for comp, cdef in plan.topology.components.items():
            for stream, decl in cdef.outputs.items():
                register_schema(comp, stream, decl["fields"])
        cls = load_class(plan.topology, self.cdef.class_path)
        self.obj = obj = cls()
        ctx = TopologyContext(plan.name, self.task, self.component,
                              plan.packing.task_index[self.task], self.container, self.conf,
                              plan.packing.component_tasks, self.task_component, plan.topology)
        self.context = ctx
        routers = build_routers(plan, self.component, ctx)
        self.emitter = Emitter(self.task, self.component, routers, self.serializer, self.send,
                               self.conf["topology.producer.batch.size"])
        obj.context, obj.config = ctx, self.conf
        obj.logger = logging.getLogger(f"{self.component}[{self.task}]")
        if isinstance(obj, Spout):
            obj.emit = self._spout_emit_fn()
        elif isinstance(obj, Bolt):
            obj.emit = self.emitter.emit
            obj.ack = self._bolt_ack
            obj.fail = self._bolt_fail
        obj.initialize(self.conf, ctx)
        self.initialized = True

    def _spout_emit_fn(self):
        emit = self.emitter.emit

        def spout_emit(values, tup_id=None, stream=DEFAULT_STREAM, direct_task=None, need_task_ids=False):
            return emit(values, stream, None, direct_task, need_task_ids)
        return spout_emit

    def _bolt_ack(self, tup):
        self.acked += 1

    def _bolt_fail(self, tup):
        self.failed += 1

    # -- control ------------------------------------------------------------------------
    def _on_ctrl(self, msg):
        op = msg.get("op")
        if op == Op.START:
            self.started = True
            self._set_active(msg.get("active", True))
        elif op == Op.ACTIVATE:
            self._set_active(True)
        elif op == Op.DEACTIVATE:
            self._set_active(False)
        elif op == Op.REPORT:
            self.send_metrics(msg.get("seq", 0))
        elif op == Op.REREGISTER:
            self._register()
        else:
            log.warning("unknown control message %r", msg)

    def _set_active(self, active):
        if active == self.active:
            return
        self.active = active
        if self.kind != "spout":
            return
        try:
            (self.obj.activate if active else self.obj.deactivate)()
        except Exception as e:  # noqa: BLE001 - user code
            self.report_error("activate" if active else "deactivate", e)
        if not active:
            self.emitter.flush()

    def _register(self):
        self.send_ctrl(Op.REGISTER, component=self.component, pid=os.getpid(), ok=True,
                       container=self.container)

    def metrics(self):
        em = self.emitter
        return {"__emit-count": em.emit_count if em else 0,
                "__transfer-count": em.transfer_count if em else 0,
                "__execute-count": self.executed, "__ack-count": self.acked,
                "__fail-count": self.failed, "__error-count": self.errors}

    def send_metrics(self, seq=0):
        self.send_ctrl(Op.METRICS, seq=seq, component=self.component, metrics=self.metrics())

    def _handle(self, frames):
        kind = frames[0]
        if kind == DATA:
            self._on_data(frames[1])
        elif kind == CTRL:
            self._on_ctrl(wire.decode_ctrl(frames[1]))

    def _drain(self, limit=RECV_BURST):
        """Handle up to ``limit`` waiting messages; True if the socket was emptied."""
        recv = self.sock.recv_multipart
        for _ in range(limit):
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return True
            self._handle(frames)
        return False

    # -- data ---------------------------------------------------------------------------
    def _on_data(self, payload):
        if self.kind != "bolt":
            return
        batch = self._loads(payload)
        comp_of = self.task_component
        process = self.obj.process
        for t in batch:
            try:
                process(_new_tuple(Tuple, (None, comp_of[t[0]], t[1], t[0], t[2])))
            except SchemaError as e:
                self.report_error("process", e, fatal=True)
            except Exception as e:  # noqa: BLE001 - user code: log, count, keep serving
                self.failed += 1
                self.report_error("process", e)
        self.executed += len(batch)

    # -- the loop -----------------------------------------------------------------------
    def run(self, endpoint):
        self._waker = SignalWaker(self._on_signal)
        self._poller = zmq.Poller()
        self._poller.register(self.sock, zmq.POLLIN)
        self._poller.register(self._waker.fd, zmq.POLLIN)
        self.sock.connect(endpoint)
        try:
            self._setup()
        except BaseException as e:  # noqa: BLE001 - user code failed to start: report and exit
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            log.error("%s[task %d] failed to start:\n%s", self.component, self.task, tb)
            self.send_ctrl(Op.REGISTER, component=self.component, pid=os.getpid(), ok=False,
                           container=self.container, error=f"{type(e).__name__}: {e}", traceback=tb)
            self.close_socket()
            return 3
        self._register()
        log.info("%s[task %d] initialized (pid %d)", self.component, self.task, os.getpid())
        try:
            if self.kind == "spout":
                self._spout_loop()
            else:
                self._bolt_loop()
        finally:
            self._shutdown()
        return 0

    def _on_signal(self, signum):
        self.stopping = True

    def _poll(self, timeout_ms):
        """Wait for a message (True) or a timeout / stop signal (False)."""
        for sock, _ in self._poller.poll(timeout_ms):
            if sock is self.sock:
                return True
        return False

    def _timers(self, now):
        """Periodic work; returns seconds until the next timer is due."""
        if now >= self._next_hb:
            self._next_hb = now + HEARTBEAT_SECS
            self.send_ctrl(Op.HEARTBEAT)
            if self._parent.orphaned():
                log.warning("parent process is gone; exiting")
                self.stopping = True
        if now >= self._next_metrics:
            self._next_metrics = now + self._metrics_every
            self.send_metrics()
        nxt = min(self._next_hb, self._next_metrics)
        if self._tick_every and self.started:
            if now >= self._next_tick:
                self._next_tick = now + self._tick_every
                try:
                    self.obj.process_tick(tick_tuple(self._tick_every))
                except Exception as e:  # noqa: BLE001 - user code
                    self.report_error("process_tick", e)
            nxt = min(nxt, self._next_tick)
        return max(0.0, nxt - now)

    def _init_timers(self):
        now = time.monotonic()
        self._next_hb = now + HEARTBEAT_SECS
        self._metrics_every = float(self.conf["topology.metrics.interval.secs"]) or 2.0
        self._next_metrics = now + self._metrics_every
        self._tick_every = float(self.conf["topology.tick.tuple.freq.secs"]) if self.kind == "bolt" else 0.0
        self._next_tick = now + self._tick_every
        self._flush_every = self.conf["topology.batch.flush.interval.millis"] / 1000.0

    def _bolt_loop(self):
        self._init_timers()
        poll = self._poll
        em = self.emitter
        while not self.stopping:
            now = time.monotonic()
            wait = self._timers(now)
            if em.buffers:
                wait = min(wait, max(0.0, em.oldest + self._flush_every - now))
            if poll(int(wait * 1000) + (0 if wait == 0 else 1)):
                emptied = self._drain()
                if emptied or em.due(time.monotonic(), self._flush_every):
                    em.flush()
            elif em.buffers:
                em.flush()

    def _spout_loop(self):
        self._init_timers()
        em = self.emitter
        poll = self._poll
        sleep_max = self.conf["topology.sleep.spout.wait.strategy.time.ms"] / 1000.0
        idle = 0.0
        events = self.sock.getsockopt
        while not self.stopping:
            if events(zmq.EVENTS) & zmq.POLLIN:
                self._drain()
            now = time.monotonic()
            wait = self._timers(now)
            if self.started and self.active:
                emitted = self._call_next_tuple(em)
                if emitted:
                    idle = 0.0
                    if em.due(now, self._flush_every):
                        em.flush()
                    continue
                em.flush()
                idle = min(max(idle * 2, 0.0005), sleep_max)
                wait = min(wait, idle)
            else:
                em.flush()
            if poll(max(1, int(wait * 1000))):
                self._drain()

    def _call_next_tuple(self, em):
        next_tuple = self.obj.next_tuple
        start = em.emit_count
        for _ in range(SPOUT_BURST):
            before = em.emit_count
            try:
                next_tuple()
            except SchemaError as e:
                self.report_error("next_tuple", e, fatal=True)
                return em.emit_count - start
            except Exception as e:  # noqa: BLE001 - user code
                self.report_error("next_tuple", e)
                return em.emit_count - start
            if em.emit_count == before:
                break
        return em.emit_count - start

    def _shutdown(self):
        if self.obj is not None and self.initialized:
            try:
                self.obj.close()
            except Exception as e:  # noqa: BLE001 - user code
                self.report_error("close", e)
        self.stopping = False  # allow the final sends
        try:
            if self.emitter:
                self.emitter.flush()
            self.send_metrics(-1)
        finally:
            self.close_socket()
        log.info("%s[task %d] stopped", self.component, self.task)

    def close_socket(self):
        self.sock.close(linger=1000)
        self._zctx.term()
