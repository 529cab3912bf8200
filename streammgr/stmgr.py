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
from bittern.wire import CTRL, ROUTED, Op

from .routing import LOCAL, PEER, OutQueues, RoutingTable

log = logging.getLogger("bittern.stmgr")

HEARTBEAT_SECS = 1.0
BURST = 256
SNDHWM = 1000


class StreamManager:
    def __init__(self, plan, container):
        self.plan = plan
        self.container = container
        self.table = RoutingTable(plan.packing.task_container, container)
        self.stopping = False
        self.started = False
        self.active = True
        self.registered = {}  # task -> registration message
        self.queues = OutQueues()
        self.counters = {"local": 0, "peer": 0, "dropped": 0, "from_peers": 0}
        self._parent = ParentWatch()
        ctx = self._zctx = zmq.Context()
        me = plan.stmgrs[container]
        self.local = ctx.socket(zmq.ROUTER)
        self.local.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.local.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.local.setsockopt(zmq.SNDHWM, SNDHWM)
        self.local.setsockopt(zmq.LINGER, 0)
        self.local.bind(me["ipc"])
        self.inbound = ctx.socket(zmq.ROUTER)
        self.inbound.setsockopt(zmq.LINGER, 0)
        self.inbound.bind(me["tcp"])
        self.peers = {}
        for c in self.table.peers:
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.IDENTITY, wire.stmgr_identity(container))
            s.setsockopt(zmq.SNDHWM, SNDHWM)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(plan.stmgrs[c]["tcp"])
            self.peers[c] = s
        self.tm = ctx.socket(zmq.DEALER)
        self.tm.setsockopt(zmq.IDENTITY, wire.stmgr_identity(container))
        self.tm.setsockopt(zmq.LINGER, 0)
        self.tm.connect(plan.tmaster)

    # -- sending ------------------------------------------------------------------------
    def _send_local(self, task, frames, size=0):
        """Send to a local instance; queue on a full pipe; drop if it is not connected."""
        key = ("i", task)
        if self.queues.has(key):
            self.queues.push(key, frames, size)
            return
        try:
            self.local.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self.queues.push(key, frames, size)
        except zmq.ZMQError as e:
            if e.errno != errno.EHOSTUNREACH:
                raise
            self.counters["dropped"] += 1

    def _send_peer(self, container, frames, size=0):
        key = ("p", container)
        if self.queues.has(key):
            self.queues.push(key, frames, size)
            return
        try:
            self.peers[container].send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self.queues.push(key, frames, size)

    def _retry_queues(self):
        for key in self.queues.keys():
            kind, dest = key
            sock = self.local if kind == "i" else self.peers[dest]
            while self.queues.has(key):
                try:
                    sock.send_multipart(self.queues.peek(key), zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                except zmq.ZMQError as e:
                    if e.errno != errno.EHOSTUNREACH:
                        raise
                    self.counters["dropped"] += self.queues.drop(key)
                    break
                self.queues.pop(key)

    def to_instance(self, task, op, **fields):
        self._send_local(task, [wire.instance_identity(task)] + wire.ctrl(op, **fields))

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
        if op == Op.REGISTER:
            msg["container"] = self.container
            if msg.get("ok"):
                self.registered[task] = msg
            self.to_tm(Op.REGISTER, **{k: v for k, v in msg.items() if k != "op"})
            if self.started and msg.get("ok"):
                self.to_instance(task, Op.START, active=self.active)
        elif op == Op.HEARTBEAT:
            if task not in self.registered:
                self.to_instance(task, Op.REREGISTER)
        elif op in (Op.METRICS, Op.ERROR):
            self.to_tm(op, **{k: v for k, v in msg.items() if k != "op"})
        else:
            log.warning("unknown control message from %r: %r", identity, msg)

    def on_tm_ctrl(self, msg):
        op = msg.get("op")
        if op == Op.START:
            self.started = True
            self.active = bool(msg.get("active", True))
            for task in self.registered:
                self.to_instance(task, Op.START, active=self.active)
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
        for s in (self.local, self.inbound, self.tm):
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
                    self.to_tm(Op.HEARTBEAT, counters=self.counters, queued=self.queues.total_bytes)
                    if self._parent.orphaned():
                        log.warning("parent process is gone; exiting")
                        break
                timeout = 1 if self.queues else max(1, int((next_hb - now) * 1000))
                events = dict(poller.poll(timeout))
                if local in events:
                    self._drain(local, self._on_local)
                if inbound in events:
                    self._drain(inbound, self._on_inbound)
                if tm in events:
                    self._drain(tm, self._on_tm)
                if self.queues:
                    self._retry_queues()
        finally:
            for s in [self.local, self.inbound, self.tm, *self.peers.values()]:
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
        elif kind == CTRL:
            self.on_instance_ctrl(frames[0].bytes, wire.decode_ctrl(frames[2].bytes))

    def _on_inbound(self, frames):
        kind = frames[1].bytes
        if kind in ROUTED:
            self.counters["from_peers"] += 1
            self.route(kind, frames[2].bytes, frames[3])
        else:
            log.warning("unexpected message from peer %r", frames[0].bytes)

    def _on_tm(self, frames):
        if frames[0].bytes == CTRL:
            self.on_tm_ctrl(wire.decode_ctrl(frames[1].bytes))
