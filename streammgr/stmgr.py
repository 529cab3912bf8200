"""The stream manager: one per container, the only door in and out of it.

It binds a ROUTER on ``ipc://`` for its local instances and a ROUTER on ``tcp://``
for peer stream managers, and connects a DEALER to each peer and one to the
topology master. Data batches are forwarded by destination task without being
decoded (see :mod:`streammgr.routing`); control messages are relayed between
instances and the topology master.
"""
from __future__ import annotations

import errno
import logging
import os
import time

import zmq

from bittern import wire
from bittern.proc import ParentWatch, SignalWaker
from bittern.procstats import ProcStats
from bittern.wire import CTRL, ROUTED, Op

from .backpressure import ANNOUNCE, SPOUTS, Backpressure
from .routing import LOCAL, PEER, OutQueues, RoutingTable

log = logging.getLogger("bittern.stmgr")

HEARTBEAT_SECS = 1.0
BURST = 256
SNDHWM = 100  # batches a socket holds per peer before the stream manager queues them itself
# Batches in flight toward one instance: it returns credit as it reads them. Beyond this,
# batches wait in the stream manager's queue, where backpressure can see them.
WINDOW = 32


class StreamManager:
    def __init__(self, plan, container):
        self.plan = plan
        self.container = container
        self.table = RoutingTable(plan.packing.task_container, container)
        self.stopping = False
        self.started = False
        self.active = True
        self.registered = {}  # task -> registration message
        self.told = set()  # registered tasks that were told to start
        self.queues = OutQueues()
        self.inflight = {}  # local task -> batches sent and not yet credited back
        self.procstats = ProcStats()
        self.counters = {"local": 0, "peer": 0, "dropped": 0, "from_peers": 0}
        conf = plan.config
        self.bp = Backpressure(conf["topology.backpressure.high.watermark.bytes"],
                               conf["topology.backpressure.low.watermark.bytes"],
                               expire_after=5 * HEARTBEAT_SECS)
        self._announced_off = 3
        self.spout_tasks = {t for t in self.table.local_tasks
                            if plan.topology.components[plan.packing.task_component[t]].kind == "spout"}
        self._parent = ParentWatch()
        ctx = self._zctx = zmq.Context()
        me = plan.stmgrs[container]
        self.local = ctx.socket(zmq.ROUTER)
        self.local.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.local.setsockopt(zmq.ROUTER_HANDOVER, 1)
        # No high-water mark toward instances: credits bound what is in flight (see
        # _send_local), so a failed send can only mean the instance is not connected.
        self.local.setsockopt(zmq.SNDHWM, 0)
        self.local.setsockopt(zmq.LINGER, 0)
        self.local.bind(me["ipc"])
        # control to and from local instances has its own socket: it never waits behind data
        self.ctl = ctx.socket(zmq.ROUTER)
        self.ctl.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.ctl.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.ctl.setsockopt(zmq.LINGER, 0)
        self.ctl.bind(me["ctl"])
        self.inbound = ctx.socket(zmq.ROUTER)
        self.inbound.setsockopt(zmq.LINGER, 0)
        self.inbound.bind(me["tcp"])
        self.peers, self.peer_ctrl = {}, {}
        for c in self.table.peers:
            for d, ident in ((self.peers, wire.stmgr_identity(container)),
                             (self.peer_ctrl, wire.stmgr_ctrl_identity(container))):
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.IDENTITY, ident)
                s.setsockopt(zmq.SNDHWM, SNDHWM)
                s.setsockopt(zmq.LINGER, 0)
                s.connect(plan.stmgrs[c]["tcp"])
                d[c] = s
        self.tm = ctx.socket(zmq.DEALER)
        self.tm.setsockopt(zmq.IDENTITY, wire.stmgr_identity(container))
        self.tm.setsockopt(zmq.LINGER, 0)
        self.tm.connect(plan.tmaster)

    # -- sending ------------------------------------------------------------------------
    def _queue(self, key, frames, size):
        self.queues.push(key, frames, size)
        if size:
            self.apply(self.bp.observe(key, self.queues.bytes(key), time.monotonic()))

    def _send_local(self, task, frames, size=0):
        """Send a batch to a local instance if it has credit, else queue it (the queue
        is what backpressure measures); drop it if the instance is not connected."""
        key = ("i", task)
        if self.queues.has(key) or self.inflight.get(task, 0) >= WINDOW:
            self._queue(key, frames, size)
        elif not self._deliver(task, frames):
            self._queue(key, frames, size)

    def _deliver(self, task, frames):
        """One batch to an instance's data socket: True if it is gone (sent or dropped)."""
        try:
            self.local.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return False
        except zmq.ZMQError as e:
            if e.errno != errno.EHOSTUNREACH:
                raise
            self.counters["dropped"] += 1
            return True
        self.inflight[task] = self.inflight.get(task, 0) + 1
        return True

    def on_credit(self, task, n):
        self.inflight[task] = max(0, self.inflight.get(task, 0) - n)
        key = ("i", task)
        if self.queues.has(key):
            self._flush_local(key)

    def _send_peer(self, container, frames, size=0):
        key = ("p", container)
        if self.queues.has(key):
            self._queue(key, frames, size)
            return
        try:
            self.peers[container].send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self._queue(key, frames, size)

    # -- backpressure -------------------------------------------------------------------
    def apply(self, actions):
        for what, on in actions:
            if what == ANNOUNCE:
                log.info("%s backpressure (queued: %s)", "starting" if on else "clearing",
                         {f"{k[0]}{k[1]}": self.queues.bytes(k) for k in self.queues.keys()})
                self.announce(on)
            elif what == SPOUTS:
                for task in self.spout_tasks & set(self.registered):
                    self.to_instance(task, Op.BACKPRESSURE, on=on)

    def announce(self, on):
        body = wire.ctrl(Op.BACKPRESSURE, container=self.container, on=on)
        for s in self.peer_ctrl.values():
            try:
                s.send_multipart(body, zmq.NOBLOCK)
            except zmq.Again:
                log.warning("a peer is not taking control messages; it will hear at the next heartbeat")

    def _flush_local(self, key):
        task = key[1]
        while self.queues.has(key) and self.inflight.get(task, 0) < WINDOW:
            if not self._deliver(task, self.queues.peek(key)):
                break
            self.queues.pop(key)
        if key in self.bp.local:
            self.apply(self.bp.observe(key, self.queues.bytes(key), time.monotonic()))

    def _retry_queues(self):
        for key in self.queues.keys():
            kind, dest = key
            if kind == "i":
                self._flush_local(key)
                continue
            sock = self.peers[dest]
            while self.queues.has(key):
                try:
                    sock.send_multipart(self.queues.peek(key), zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                self.queues.pop(key)
            if key in self.bp.local:
                self.apply(self.bp.observe(key, self.queues.bytes(key), time.monotonic()))

    def to_instance(self, task, op, **fields):
        try:
            self.ctl.send_multipart([wire.instance_identity(task)] + wire.ctrl(op, **fields), zmq.NOBLOCK)
            return True
        except zmq.ZMQError as e:  # not connected (it will register and be told), or swamped
            log.info("control %s for task %d not delivered: %s", op, task, e.strerror)
            return False

    def to_tm(self, op, **fields):
        fields.setdefault("container", self.container)
        try:
            self.tm.send_multipart(wire.ctrl(op, **fields), zmq.NOBLOCK)
        except zmq.Again:
            log.warning("topology master is not taking messages; dropped %s", op)

    # -- data ---------------------------------------------------------------------------
    def route(self, kind, dest_frame, payload):
        task = wire.task_of(dest_frame)
        where, arg = self.table.route(task)
        if where == LOCAL:
            self.counters["local"] += 1
            self._send_local(task, [arg, kind, payload], len(payload))
        elif where == PEER:
            self.counters["peer"] += 1
            self._send_peer(arg, [kind, dest_frame, payload], len(payload))
        else:
            self.counters["dropped"] += 1

    # -- control ------------------------------------------------------------------------
    def on_instance_ctrl(self, identity, msg):
        op = msg.get("op")
        task = msg.get("task")
        if op == Op.CREDIT:
            self.on_credit(task, msg.get("n", 0))
            return
        if op == Op.REGISTER:
            msg["container"] = self.container
            if msg.get("ok"):
                self.registered[task] = msg
                self.inflight[task] = 0  # a new incarnation: nothing of ours is in its pipe
            self.to_tm(Op.REGISTER, **{k: v for k, v in msg.items() if k != "op"})
            self.told.discard(task)
            if msg.get("ok"):
                self.tell_start(task)
        elif op == Op.HEARTBEAT:
            if task not in self.registered:
                self.to_instance(task, Op.REREGISTER)
            elif task not in self.told:
                self.tell_start(task)  # its control connection was not up at registration
        elif op in (Op.METRICS, Op.ERROR):
            self.to_tm(op, **{k: v for k, v in msg.items() if k != "op"})
        else:
            log.warning("unknown control message from %r: %r", identity, msg)

    def tell_start(self, task):
        """Tell a registered instance to start (once the topology has), and whether its
        spouts are paused by backpressure."""
        if not self.started:
            return
        if self.to_instance(task, Op.START, active=self.active):
            self.told.add(task)
            if task in self.spout_tasks and self.bp.paused:
                self.to_instance(task, Op.BACKPRESSURE, on=True)

    def on_tm_ctrl(self, msg):
        op = msg.get("op")
        if op == Op.START:
            self.started = True
            self.active = bool(msg.get("active", True))
            for task in self.registered:
                self.tell_start(task)
        elif op in (Op.ACTIVATE, Op.DEACTIVATE):
            self.active = op == Op.ACTIVATE
            for task in self.registered:
                self.to_instance(task, op)
        elif op == Op.REPORT:
            for task in self.registered:
                self.to_instance(task, Op.REPORT, seq=msg.get("seq", 0))
        elif op == Op.REREGISTER:
            self.register_with_tm()
        else:
            log.warning("unknown control message from the topology master: %r", msg)

    def register_with_tm(self):
        self.to_tm(Op.STMGR_REGISTER, pid=os.getpid(),
                   tasks={str(t): {k: v for k, v in m.items() if k != "op"}
                          for t, m in self.registered.items()})

    # -- the loop -----------------------------------------------------------------------
    def run(self):
        waker = SignalWaker(self._on_signal)
        poller = zmq.Poller()
        for s in (self.ctl, self.local, self.inbound, self.tm):
            poller.register(s, zmq.POLLIN)
        poller.register(waker.fd, zmq.POLLIN)
        self.register_with_tm()
        next_hb = time.monotonic() + HEARTBEAT_SECS
        log.info("stream manager of container %d up (pid %d), local tasks %s",
                 self.container, os.getpid(), self.table.local_tasks)
        local, inbound, tm = self.local, self.inbound, self.tm
        try:
            while not self.stopping:
                now = time.monotonic()
                if now >= next_hb:
                    next_hb = now + HEARTBEAT_SECS
                    self.to_tm(Op.HEARTBEAT, counters=self.counters, queued=self.queues.total_bytes,
                               proc=self.procstats.read(),
                               backpressure=self.bp.active,
                               backpressure_secs=self.bp.time_in_backpressure(now))
                    if self.bp.active or self._announced_off < 3:
                        # re-announce: "on" while it lasts, "off" a few times (one may be dropped)
                        self._announced_off = 0 if self.bp.active else self._announced_off + 1
                        self.announce(self.bp.active)
                    self.apply(self.bp.tick(now))
                    if self._parent.orphaned():
                        log.warning("parent process is gone; exiting")
                        break
                # Peer queues are retried every millisecond; queues toward local instances
                # move when credit comes back, which wakes the poll by itself.
                retry = any(k[0] == "p" for k in self.queues.keys()) if self.queues else False
                timeout = 1 if retry else max(1, int((next_hb - now) * 1000))
                events = dict(poller.poll(timeout))
                if self.ctl in events:
                    self._drain(self.ctl, self._on_ctl)
                if local in events:
                    self._drain(local, self._on_local)
                if inbound in events:
                    self._drain(inbound, self._on_inbound)
                if tm in events:
                    self._drain(tm, self._on_tm)
                if self.queues:
                    self._retry_queues()
        finally:
            for s in [self.ctl, self.local, self.inbound, self.tm, *self.peers.values(),
                      *self.peer_ctrl.values()]:
                s.close(linger=0)
            self._zctx.term()
            log.info("stream manager of container %d stopped", self.container)

    def _on_signal(self, signum):
        self.stopping = True

    @staticmethod
    def _drain(sock, handler):
        recv = sock.recv_multipart
        for _ in range(BURST):
            try:
                frames = recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            handler(frames)

    def _on_local(self, frames):
        kind = frames[1].bytes
        if kind in ROUTED:
            self.route(kind, frames[2].bytes, frames[3])
        elif kind == CTRL:  # registration comes this way (see Instance.register)
            self.on_instance_ctrl(frames[0].bytes, wire.decode_ctrl(frames[2].bytes))
        else:
            log.warning("unexpected %r message on the data socket from %r", kind, frames[0].bytes)

    def _on_ctl(self, frames):
        if frames[1].bytes == CTRL:
            self.on_instance_ctrl(frames[0].bytes, wire.decode_ctrl(frames[2].bytes))

    def _on_inbound(self, frames):
        kind = frames[1].bytes
        if kind in ROUTED:
            self.counters["from_peers"] += 1
            self.route(kind, frames[2].bytes, frames[3])
        elif kind == CTRL:
            msg = wire.decode_ctrl(frames[2].bytes)
            if msg.get("op") == Op.BACKPRESSURE:
                self.apply(self.bp.peer(msg.get("container"), bool(msg.get("on")), time.monotonic()))
            else:
                log.warning("unknown control message from a peer: %r", msg)
        else:
            log.warning("unexpected message from peer %r", frames[0].bytes)

    def _on_tm(self, frames):
        if frames[0].bytes == CTRL:
            self.on_tm_ctrl(wire.decode_ctrl(frames[1].bytes))
