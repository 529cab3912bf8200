"""The stream manager: one per container, the only door in and out of it.

It binds a ROUTER on ``ipc://`` for its local instances and a ROUTER on ``tcp://``
for peer stream managers, and connects a DEALER to each peer and one to the
topology master. Data batches are forwarded by destination task without being
decoded (see :mod:`streammgr.routing`); control messages are relayed between
instances and the topology master.

The tcp port is the one door other hosts can knock on, so it trusts nothing:

* When the plan carries CURVE keys (cluster mode), the tcp ROUTER is a CURVE
  server with this container's keypair, a :class:`bittern.curve.KeyAuthenticator`
  admits only the public keys of the plan's other containers, and every peer
  DEALER (data and control) is a CURVE client that knows its peer's public key.
  Without keys (local mode) nothing changes: plain tcp on 127.0.0.1.
* Every message read from it is checked before it is acted on: a known peer
  identity (data from ``s<C>``, control from ``c<C>``), the right number of frames,
  a known kind, a destination task of this container, a control payload that
  decodes to a backpressure announcement of the sender's own container. Anything
  else is dropped and counted (``malformed``), and logged at most once a second.
* Connections to the tcp port that end without a completed handshake (a CURVE key
  not in the plan, a client without CURVE or with the wrong server key, bytes that are
  not ZMTP) are seen through a socket monitor (streammgr/handshakes.py), counted
  (``denied``) and logged at most once a second.

Both counters travel with the others (``local``, ``peer``, ``dropped``,
``from_peers``) in the heartbeat to the topology master.

SIGHUP re-reads the plan from the path the process was started with (see
:meth:`streammgr.reload.PlanReload.reload`). In cluster mode a supervisor rewrites the plan of a
container that did not move when others did (new tcp endpoints for moved peers, a
new topology master endpoint if container 0 moved) and sends SIGHUP: the stream
manager reconnects to what moved and keeps everything else (its instances, their
pending tuples, its queues). What a live stream manager cannot take (another set of
containers, another packing, its own endpoints or keys) is refused and logged: such
a container has to be restarted.
"""
from __future__ import annotations

import errno
import logging
import os
import signal
import struct
import time

import zmq

from bittern import curve, wire
from bittern.checkpoint import checkpoint_settings
from bittern.ckptprobe import write_probe
from bittern.config import EFFECTIVELY_ONCE
from bittern.proc import ParentWatch, SignalWaker
from bittern.procstats import ProcStats
from bittern.wire import CTRL, ROUTED, Op

from .backpressure import ANNOUNCE, SPOUTS, Backpressure
from bittern.lograte import Throttle
from .fenceio import FencedStop
from .fencing import OLDER, Fence, PeerIds
from .handshakes import EVENTS as HANDSHAKE_EVENTS, HandshakeLedger
from .planfile import HANGUP, plan_keys
from .reload import PlanReload
from .routing import LOCAL, PEER, OutQueues, RoutingTable

log = logging.getLogger("bittern.stmgr")

HEARTBEAT_SECS = 1.0
TM_RECONNECT_SECS = 3.0  # the topology master took nothing this long: a new connection
BURST = 256
SNDHWM = 100  # batches a socket holds per peer before the stream manager queues them itself
# Batches in flight toward one instance: it returns credit as it reads them. Beyond this,
# batches wait in the stream manager's queue, where backpressure can see them.
WINDOW = 32


class StreamManager(PlanReload, FencedStop):
    def __init__(self, plan, container, plan_path=None):
        self.plan = plan
        self.container = container
        # SIGHUP re-reads this very path (the supervisor rewrites it in place)
        self.plan_path = os.path.abspath(plan_path) if plan_path else None
        self._poller = None
        self.table = RoutingTable(plan.packing.task_container, container)
        self.stopping = False
        self.started = False
        self.active = True
        self.registered = {}  # task -> registration message
        self.told = set()  # registered tasks that were told to start
        self.queues = OutQueues()
        self.inflight = {}  # local task -> batches sent and not yet credited back
        self.procstats = ProcStats()
        # malformed: messages dropped at the tcp port; denied: handshakes it refused
        # fenced: messages of an older copy of a moved peer container (streammgr/fencing.py)
        self.counters = {"local": 0, "peer": 0, "dropped": 0, "from_peers": 0, "malformed": 0, "denied": 0,
                         "fenced": 0}
        self._malformed_log, self._denied_log, self._fenced_log = Throttle(), Throttle(), Throttle()
        self._tm_stuck_since = None  # when sends to the topology master began to fail (to_tm)
        conf = plan.config
        self.bp = Backpressure(conf["topology.backpressure.high.watermark.bytes"],
                               conf["topology.backpressure.low.watermark.bytes"],
                               expire_after=5 * HEARTBEAT_SECS)
        self._announced_off = 3
        self.spout_tasks = {t for t in self.table.local_tasks
                            if plan.topology.components[plan.packing.task_component[t]].kind == "spout"}
        # Who may talk on the tcp port: the plan's other containers, each at the assignment
        # version known for it (fencing: an older copy of a moved container is refused).
        self.placed = plan.placed_at(container)
        self.fence = Fence(plan.placed, plan.packing.containers)
        self.peer_ids = PeerIds(self.fence, container)
        # What a peer may send data to: dest frame -> (local task, its identity); a lookup
        # of the 4-byte frame, nothing decoded.
        self._peer_dest = {wire.task_bytes(t): (t, wire.instance_identity(t)) for t in self.table.local_tasks}
        self._parent = ParentWatch()
        self.probe = None  # cluster mode, exactly once: this container's probe of the checkpoint store
        self.keys = plan_keys(plan)
        self.auth = self.monitor = None
        self.peers, self.peer_ctrl = {}, {}
        self.local = self.ctl = self.inbound = self.tm = None
        self._zctx = zmq.Context()
        try:
            self._open_sockets()
        except BaseException:
            self._close()
            raise

    def _open_sockets(self):
        plan, container, ctx = self.plan, self.container, self._zctx
        me = plan.stmgrs[container]
        mine = None
        if self.keys is not None:
            mine = self.keys.get(container) or {}
            if not mine.get("secret"):
                raise curve.CurveError(f"the plan has CURVE keys but no secret key for container {container}")
            missing = [c for c in self.table.peers if not (self.keys.get(c) or {}).get("public")]
            if missing:
                raise curve.CurveError(f"the plan has no CURVE public key for container(s) {missing}")
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
        # identities carry the copy's version (s<C>@<V>): a handover only ever passes one
        # from a dead connection of a copy to a new connection of the same copy
        self.inbound.setsockopt(zmq.ROUTER_HANDOVER, 1)
        if mine is not None:
            # the ZAP handler must be up before the bind, or the first handshakes go unchecked
            self.auth = curve.KeyAuthenticator(ctx, [k["public"] for c, k in self.keys.items()
                                                     if c != container and k.get("public")])
            self.auth.start()
            curve_log = logging.getLogger("bittern.curve")
            if not any(isinstance(f, Throttle) for f in curve_log.filters):
                curve_log.addFilter(Throttle())  # one line a second, however fast strangers knock
            curve.server_options(self.inbound, mine["secret"], mine["public"])
        # every connection that ends without a completed handshake is a refusal (handshakes.py)
        self.handshakes = HandshakeLedger(curve=mine is not None)
        self.monitor = self.inbound.get_monitor_socket(HANDSHAKE_EVENTS)
        self.inbound.bind(me["tcp"])
        for c in self.table.peers:
            self._connect_peer(c)
        self._connect_tm()

    def _connect_peer(self, c):
        """The data and control DEALERs toward peer ``c``, at the plan's endpoint (and,
        with CURVE, knowing its public key)."""
        mine = None if self.keys is None else self.keys[self.container]
        for d, ident in ((self.peers, wire.stmgr_identity(self.container, self.placed)),
                         (self.peer_ctrl, wire.stmgr_ctrl_identity(self.container, self.placed))):
            s = self._zctx.socket(zmq.DEALER)
            d[c] = s
            s.setsockopt(zmq.IDENTITY, ident)
            s.setsockopt(zmq.SNDHWM, SNDHWM)
            s.setsockopt(zmq.LINGER, 0)
            if mine is not None:
                curve.client_options(s, self.keys[c]["public"], mine["public"], mine["secret"])
            s.connect(self.plan.stmgrs[c]["tcp"])

    def _connect_tm(self):
        self.tm = self._zctx.socket(zmq.DEALER)
        self.tm.setsockopt(zmq.IDENTITY, wire.stmgr_identity(self.container, self.placed))
        self.tm.setsockopt(zmq.LINGER, 0)
        if self.keys is not None:  # cluster mode: the topology master is a CURVE server (container 0's key)
            mine = self.keys[self.container]
            curve.client_options(self.tm, self.keys[0]["public"], mine["public"], mine["secret"])
        self.tm.connect(self.plan.tmaster)

    def _close(self):
        """Close every socket, stop the authenticator, then end the context (in that
        order: a context does not terminate while a socket of it is open)."""
        if self.monitor is not None:
            try:
                self.inbound.disable_monitor()
            except zmq.ZMQError:
                pass
            self.monitor.close(linger=0)
        for s in [self.ctl, self.local, self.inbound, self.tm, *self.peers.values(),
                  *self.peer_ctrl.values()]:
            if s is not None:
                s.close(linger=0)
        if self.auth is not None:
            self.auth.stop()
        self._zctx.term()

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
    def by_task(self, now):
        """Per local instance, for the health manager: ``backpressure_secs_by_task``, the
        cumulative seconds its queue held this stream manager in backpressure (it
        initiated it; Heron's ``__time_spent_back_pressure_by_compid``), and
        ``queued_by_task``, the bytes queued toward it now. Keys are task ids as strings."""
        secs = self.bp.time_by_key(now)
        tasks = self.table.local_tasks
        return {"backpressure_secs_by_task": {str(t): round(secs.get(("i", t), 0.0), 3) for t in tasks},
                "queued_by_task": {str(t): self.queues.bytes(("i", t)) for t in tasks}}

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
            self._tm_stuck_since = None
        except zmq.Again:
            log.warning("topology master is not taking messages; dropped %s", op)
            # ZeroMQ does not retry a handshake the server refused (a topology master that did
            # not know this container's new key yet): after a while, connect anew
            now = time.monotonic()
            if self._tm_stuck_since is None:
                self._tm_stuck_since = now
            elif now - self._tm_stuck_since >= TM_RECONNECT_SECS:
                self._tm_stuck_since = now
                self.reconnect_tm(f"the topology master took nothing for {TM_RECONNECT_SECS:g}s: connecting anew")

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
            if self.instance_fenced(task, msg):
                return
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
        elif op in (Op.METRICS, Op.ERROR) or op in wire.CKPT_TO_TMASTER:
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
        elif op == Op.FENCED:
            self.on_fenced(msg)
        elif op == Op.RESTART_TASK:
            self.restart_task(msg.get("task"), msg.get("pid"), msg.get("reason"))
        elif op in wire.CKPT_TO_INSTANCES:  # exactly once: relayed, not interpreted
            fields = {k: v for k, v in msg.items() if k != "op"}
            for task in self.registered:
                self.to_instance(task, op, **fields)
        else:
            log.warning("unknown control message from the topology master: %r", msg)

    def restart_task(self, task, pid=None, reason=None):
        """The health manager restarts a slow instance: SIGTERM to it (it stops cleanly;
        its supervisor starts it again). This stream manager is on the instance's host,
        which the topology master may not be. ``pid``: the incarnation meant; a newer one
        is left alone."""
        reg = self.registered.get(task)
        have = (reg or {}).get("pid")
        if task not in self.table.local_tasks or not have:
            log.warning("restart of task %r asked for, but it is not a registered task of this container", task)
            return False
        if pid is not None and pid != have:
            log.info("restart of task %s (pid %s) asked for, but it already runs as pid %s; left alone",
                     task, pid, have)
            return False
        log.warning("restarting task %s (pid %s) for the health manager: %s", task, have, reason or "-")
        try:
            os.kill(have, signal.SIGTERM)
        except OSError as e:
            log.warning("cannot signal task %s (pid %s): %s", task, have, e)
            return False
        return True

    def register_with_tm(self):
        self.to_tm(Op.STMGR_REGISTER, pid=os.getpid(),
                   tasks={str(t): {k: v for k, v in m.items() if k != "op"}
                          for t, m in self.registered.items()},
                   **({"probe": self.probe} if self.probe is not None else {}))

    def write_store_probe(self):
        """Cluster mode, exactly once: prove this container writes the shared checkpoint store
        (bittern/checkpoint.py write_probe); the registration carries the probe, and the
        topology master reads it back before the topology runs."""
        plan = self.plan
        if plan.hosts is None or plan.config.get("topology.reliability.mode") != EFFECTIVELY_ONCE:
            return None
        by = f"container {self.container} on {plan.hosts.get(self.container)}, pid {os.getpid()}"
        try:
            root = checkpoint_settings(plan.config, home=plan.home).dir
        except Exception as e:  # noqa: BLE001 - reported to the topology master, which fails the start
            return {"path": None, "error": f"{type(e).__name__}: {e}"}
        probe = write_probe(root, plan.name, f"c{self.container}", by=by)
        if probe.get("error"):
            log.error("cannot write the checkpoint store: %s: %s", probe["path"], probe["error"])
        return probe

    # -- the loop -----------------------------------------------------------------------
    def run(self):
        waker = SignalWaker(self._on_signal)
        HANGUP.install()  # again (main() installs it first thing): other entry points
        self._poller = poller = zmq.Poller()
        for s in (self.ctl, self.local, self.inbound, self.tm, self.monitor):
            poller.register(s, zmq.POLLIN)
        poller.register(waker.fd, zmq.POLLIN)
        self.probe = self.write_store_probe()
        self.register_with_tm()
        next_hb = time.monotonic() + HEARTBEAT_SECS
        log.info("stream manager of container %d up (pid %d), local tasks %s, peers over tcp%s",
                 self.container, os.getpid(), self.table.local_tasks,
                 " with CURVE" if self.auth is not None else " (no CURVE)")
        local, inbound, monitor = self.local, self.inbound, self.monitor  # self.tm may be replaced
        try:
            while not self.stopping:
                if HANGUP.take() and self.reload():
                    next_hb = 0.0  # a new topology master: heartbeat it now
                now = time.monotonic()
                if now >= next_hb:
                    next_hb = now + HEARTBEAT_SECS
                    self.to_tm(Op.HEARTBEAT, counters=self.counters, queued=self.queues.total_bytes,
                               proc=self.procstats.read(),
                               backpressure=self.bp.active,
                               backpressure_secs=self.bp.time_in_backpressure(now),
                               **self.by_task(now))
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
                if waker.fd in events:
                    waker.clear()  # a SIGHUP: HANGUP.pending is set, read at the top of the loop
                if self.ctl in events:
                    self._drain(self.ctl, self._on_ctl)
                if local in events:
                    self._drain(local, self._on_local)
                if inbound in events:
                    self._drain(inbound, self._on_inbound)
                if self.tm in events:
                    self._drain(self.tm, self._on_tm)
                if monitor in events:
                    self._drain_monitor()
                if self.queues:
                    self._retry_queues()
        finally:
            self._close()
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
        """A message from the tcp port: forwarded only if it is well-formed and comes
        from a peer stream manager of this plan; anything else is dropped and counted."""
        peer = self.peer_ids.get(frames[0].bytes)
        if peer.__class__ is str:  # a verdict, not (container, is control)
            if peer == OLDER:
                return self._fenced_peer(frames[0].bytes)
            return self._malformed("from an unknown peer identity %r", frames[0].bytes[:24])
        kind = frames[1].bytes if len(frames) > 1 else None
        if kind in ROUTED and not peer[1]:
            if len(frames) != 4:
                return self._malformed("a %r message of %d frames from %r", kind, len(frames),
                                       frames[0].bytes)
            dest = self._peer_dest.get(frames[2].bytes)
            if dest is None:
                return self._malformed("a batch for task %r, which is not in this container, from %r",
                                       frames[2].bytes[:8], frames[0].bytes)
            self.counters["from_peers"] += 1
            self.counters["local"] += 1
            payload = frames[3]
            self._send_local(dest[0], [dest[1], kind, payload], len(payload))
        elif kind == CTRL and peer[1]:
            if len(frames) != 3:
                return self._malformed("a control message of %d frames from %r", len(frames),
                                       frames[0].bytes)
            try:
                msg = wire.decode_ctrl(frames[2].bytes)
            except Exception as e:  # noqa: BLE001 - whatever a stranger sends must not stop us
                return self._malformed("an undecodable control message from %r (%s: %s)",
                                       frames[0].bytes, type(e).__name__, e)
            if not isinstance(msg, dict) or msg.get("op") != Op.BACKPRESSURE:
                return self._malformed("an unknown control message from %r: %.80r", frames[0].bytes, msg)
            if msg.get("container") != peer[0]:
                return self._malformed("a backpressure announcement for container %.40r from %r",
                                       msg.get("container"), frames[0].bytes)
            self.apply(self.bp.peer(peer[0], bool(msg.get("on")), time.monotonic()))
        else:
            self._malformed("an unexpected %r message of %d frames from %r", kind and kind[:8],
                            len(frames), frames[0].bytes)

    def _malformed(self, why, *args):
        self.counters["malformed"] += 1
        t = self._malformed_log
        if t.ready():
            log.warning("tcp port: dropped " + why + " (%d more dropped since the last report, %d in all)",
                        *args, t.held, self.counters["malformed"])
            t.held = 0

    def _drain_monitor(self):
        """Handshakes refused on the tcp port (reported by its socket monitor)."""
        for _ in range(BURST):
            try:
                ev, ep = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except ValueError:  # not the two frames a monitor event has
                continue
            event, value = struct.unpack("=HI", ev[:6]) if len(ev) >= 6 else (0, 0)
            why = self.handshakes.event(event, value)  # (streammgr/handshakes.py)
            if why is None:
                continue
            self.counters["denied"] = self.handshakes.denied
            t = self._denied_log
            if t.ready():
                log.warning("tcp port %s: refused a connection: %s (%d more refused since the last "
                            "report, %d in all)", ep.decode(errors="replace"), why, t.held,
                            self.counters["denied"])
                t.held = 0

    def _on_tm(self, frames):
        if frames[0].bytes == CTRL:
            self.on_tm_ctrl(wire.decode_ctrl(frames[1].bytes))
