"""The topology master (Heron's tmanager): one per topology, in container 0.

It learns which tasks are up (through the stream managers), gates the start of
the topology until every task has initialized, records the outcome in the state
manager, relays activate/deactivate, and aggregates metrics. The CLI talks to it
over the same ROUTER socket (request/reply, identities starting with ``q``).
"""
from __future__ import annotations

import logging
import os
import time
from collections import deque

import zmq

from bittern import topostatus, wire
from bittern.checkpoint import CheckpointStore, checkpoint_settings, task_layout
from bittern.ckptprobe import probe_problem
from bittern.config import EFFECTIVELY_ONCE
from bittern.errors import ConfigError
from bittern.lograte import Throttle
from bittern.proc import EXIT_FENCED, ParentWatch, SignalWaker
from bittern.procstats import ProcStats
from bittern.state import LocalStateManager, open_state
from bittern.wire import CTRL, Op

from . import checkpoints as ck
from . import healthrunner
from .metrics import WINDOWS, MetricsStore
from .tmauth import TmAuth
from .tmfence import TmFencing
from .tmmetrics import TmMetrics, sample_period, series_points
from .tmschema import MAX_CTRL_BYTES, NAME_MAX, ControlSchema, clip, show

log = logging.getLogger("bittern.tmaster")

STARTING, RUNNING, FAILED = "STARTING", "RUNNING", "FAILED"
REPORT_TIMEOUT = 5.0
STMGR_TIMEOUT = 5.0
ERRORS_PER_COMPONENT = 20
# components of the error records the topology master makes itself (besides the plan's)
SYSTEM_ERROR_COMPONENTS = frozenset({topostatus.SYSTEM_COMPONENT, "checkpoint-store"})


def open_plan_state(plan):
    """The plan's state manager: ZooKeeper in cluster mode (digest auth from
    $BITTERN_ZK_AUTH, which the supervisor passes to this process alone; taken out of
    the environment here), else the local home."""
    if plan.state_url:
        return open_state(plan.state_url, auth=os.environ.pop("BITTERN_ZK_AUTH", None) or None)
    return LocalStateManager(plan.home)


class TopologyMaster(TmFencing, TmAuth, TmMetrics):
    def __init__(self, plan, state=None):
        self.plan = plan
        self.name = plan.name
        self.state = state or open_plan_state(plan)
        self.all_tasks = set(plan.packing.task_component)
        self.containers = set(plan.packing.containers)
        self.tasks = {}  # task -> registration
        self.stmgrs = {}  # container -> {"pid", "last", "counters", "queued"}
        self.phase = STARTING
        self.error = None
        self.resumed_epoch = None  # EFFECTIVELY_ONCE: the last epoch every task restored in
        rec = self.state.topology(self.name) or {}
        self.active = rec.get("state", "RUNNING") != "PAUSED"
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.metrics = MetricsStore(plan.packing.task_component, started=self.started)
        # throughput over 10 minutes (tmmetrics.py): the newest sample, the series' points so far
        self.sample_every = sample_period(plan.config.get("topology.metrics.interval.secs"))
        self.last_sample, self.throughput_points = None, deque(maxlen=series_points(self.sample_every) - 1)
        self.kinds = {c.name: c.kind for c in plan.topology.components.values()}
        self.procstats = ProcStats()
        self.errors = []  # recent errors, newest last (ERRORS_PER_COMPONENT per component at most)
        # every message is checked before it is acted on (streammgr/tmschema.py); malformed:
        # messages dropped, denied: senders refused (streammgr/tmauth.py)
        self.schema = ControlSchema(plan.packing)
        self.counters = {"malformed": 0, "denied": 0}
        self._malformed_log = Throttle()
        self.report_seq = 0
        self.waiting = []  # [(identity, req, seq, deadline, reply_fields)]
        self.stopping = False
        self._parent = ParentWatch()
        self._zctx = zmq.Context()
        self.stmgr_pids = {}  # container -> the pid of its stream manager, remembered
        self.ckpt = self.ckpt_store = None
        self.sinks = set()  # tasks of transactional sinks (they say so when they register)
        self.sink_commits = {}  # sink task -> the newest checkpoint it committed
        if plan.config["topology.reliability.mode"] == EFFECTIVELY_ONCE:
            self._init_checkpoints()
        self._init_fencing()
        self.sock = self._zctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.LINGER, 0)
        # stream manager identities carry their copy's version (streammgr/fencing.py): a
        # handover only passes one to a later connection of the same copy
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._init_auth()  # cluster mode: a CURVE server admitting its containers and nimbus (tmauth.py)
        self.sock.bind(plan.tmaster)
        self.health = healthrunner.attach(self)  # None unless topology.healthmgr.enabled
        self._init_status_rule()

    # -- checkpoints (EFFECTIVELY_ONCE): streammgr/checkpoints.py decides, this does -------
    def _init_checkpoints(self):
        conf = self.plan.config
        settings = checkpoint_settings(conf, home=self.plan.home)
        store = self.ckpt_store = CheckpointStore(settings.dir, self.state, self.name, settings.keep)
        self._epoch_path = f"{store.meta}/epoch"
        # Checkpoints belong to one submission: a restarted topology master (or the whole
        # topology restarted by its supervisor) resumes from them, a topology submitted
        # again under the same name (kill, then submit or run) starts from nothing.
        self._submitted_at = (self.state.topology(self.name) or {}).get("submitted_at")
        doc = self.state.get(self._epoch_path) or {}
        if self._submitted_at is not None and doc.get("submitted_at") != self._submitted_at:
            if doc or store.complete_ids() or store._dir_ids():
                log.info("exactly once: %s was submitted again; the checkpoints of its previous "
                         "submission are deleted", self.name)
            store.delete_all()
            doc = {}
        epoch = doc.get("epoch", 0)
        latest = store.latest_complete()
        seen = store.complete_ids() + store._dir_ids()
        timeout = conf["topology.stateful.checkpoint.timeout.secs"]
        if not timeout > 0:
            raise ConfigError(f"topology.stateful.checkpoint.timeout.secs must be > 0, got {timeout!r}")
        # every complete checkpoint records the layout it was taken with, and RESTORE carries
        # the layout of the checkpoint it names: after a rebalance the tasks of a component
        # whose parallelism changed find their old key groups through it
        self._layout = task_layout(self.plan.packing)
        self._restore_layouts = {}  # checkpoint id -> its layout (read once from the metadata)
        # RESTORE is re-sent every second while answers are missing: a restarted instance
        # registers on its data connection, and its control connection may come up later
        self.ckpt = ck.CheckpointCoordinator(self.all_tasks, settings.interval_secs, float(timeout),
                                             latest_complete=latest, next_id=max(seen, default=0) + 1,
                                             epoch=epoch, resend_every=1.0)
        log.info("exactly once: checkpoints every %gs in %s; last complete %s, last epoch %d",
                 settings.interval_secs, store.dir, latest, epoch)
        nonce = ((self.state.topology(self.name) or {}).get("store") or {}).get("probe")
        if self.plan.hosts is not None and nonce:  # cluster mode: nimbus's probe of the shared store
            self._store_probe("nimbus", "nimbus", {"nonce": nonce})

    def _store_probe(self, who, writer, probe):
        """Cluster mode: the probe of the shared checkpoint store that nimbus or a container
        (sent with its registration: streammgr/stmgr.py) wrote; a problem fails the start-up."""
        me = f"the topology master (container 0 on {self.plan.hosts.get(0)})"
        bad = probe_problem(self.ckpt_store.root, self.name, who, probe, writer, me)
        if bad and self.phase == STARTING:
            self._fail({"error": bad, "traceback": None})
        elif bad:  # a container restarted or moved while running: checkpoints cannot complete
            log.error("%s", bad)
            self._on_error({"task": None, "component": "checkpoint-store", "where": f"the probe of {writer}",
                            "error": bad, "traceback": None, "time": time.time()})

    def _checkpoint_actions(self, actions):
        for a in actions:
            if isinstance(a, ck.Start):
                self.broadcast(Op.CKPT_START, id=a.checkpoint_id, epoch=a.epoch)
            elif isinstance(a, ck.Complete):
                try:
                    if not self.fence_ok(time.monotonic(), force=True):
                        raise RuntimeError("this copy of the topology master cannot confirm it is current "
                                           "(the assignment is unreadable, or it was fenced)")
                    self.ckpt_store.mark_complete(a.checkpoint_id, a.tasks, layout=self._layout)
                except Exception as e:  # noqa: BLE001 - the disk or the state manager
                    self.ckpt.complete_failed(a.checkpoint_id)
                    self._checkpoint_failed(a.checkpoint_id, "checkpoint complete",
                                            f"every task saved it, but it cannot be recorded as complete: "
                                            f"{type(e).__name__}: {e}")
                    continue
                log.debug("checkpoint %d complete", a.checkpoint_id)
                self._checkpoint_completed()
                self.broadcast(Op.CKPT_COMMIT, id=a.checkpoint_id)
            elif isinstance(a, ck.Restore):
                self.state.put(self._epoch_path, {"epoch": a.epoch, "submitted_at": self._submitted_at})
                log.info("restore: every task rolls back to checkpoint %s (epoch %d)", a.checkpoint_id, a.epoch)
                self.broadcast(Op.RESTORE, id=a.checkpoint_id, epoch=a.epoch,
                               layout=self._layout_of(a.checkpoint_id))
            elif isinstance(a, ck.Resume):
                log.info("epoch %d: every task restored; resuming", a.epoch)
                self.broadcast(Op.RESUME, epoch=a.epoch)
                first, self.resumed_epoch = self.resumed_epoch is None, a.epoch
                if first:  # a rebalance waits for it (bittern/rebalance.py plan_started)
                    self.write_status()
            elif isinstance(a, ck.Abandon):
                if a.reason == ck.ROLLBACK_REASON:  # not a failure: a rollback subsumes it
                    log.warning("checkpoint %d abandoned: %s", a.checkpoint_id, a.reason)
                else:
                    self._checkpoint_failed(a.checkpoint_id, "checkpoint timeout", f"abandoned: {a.reason}")

    def _layout_of(self, checkpoint_id):
        """The task layout checkpoint ``checkpoint_id`` was taken with (instances have no
        state-manager session, so RESTORE carries it); None for no checkpoint, and for one
        recorded without a layout (taken as the current one)."""
        if checkpoint_id is None:
            return None
        if checkpoint_id not in self._restore_layouts:
            lay = self.ckpt_store.layout(checkpoint_id)
            if lay is None:
                log.warning("checkpoint %d has no task layout in its metadata: its tasks are assumed to "
                            "have had today's ids and indexes", checkpoint_id)
            elif lay != self._layout:
                now = self._layout["parallelism"]
                changed = {c: f"{n} -> {now.get(c, 0)}" for c, n in lay["parallelism"].items() if now.get(c) != n}
                log.info("checkpoint %d was taken with another task layout (parallelism changed: %s)",
                         checkpoint_id, changed or "none")
            self._restore_layouts = {checkpoint_id: lay}
        return self._restore_layouts[checkpoint_id]

    # -- health (bittern/topostatus.py decides): DEGRADED with a reason, or HEALTHY -------
    def _init_status_rule(self):
        conf, now = self.plan.config, time.monotonic()
        eo = self.ckpt is not None
        self.status_rule = topostatus.HealthRule(
            self.containers, self.all_tasks, now, register_secs=float(conf["bittern.startup.timeout.secs"]),
            checkpoints=eo, interval=self.ckpt.interval if eo else None,
            timeout=self.ckpt.timeout if eo else None)
        self.health_doc = topostatus.health_doc(topostatus.Verdict(topostatus.HEALTHY), now)
        self._health_key = (topostatus.HEALTHY, None)
        self._next_health_check = now
        self._ckpt_log_at = None  # when an open checkpoint error was last logged

    def _checkpoint_failed(self, checkpoint_id, where, text):
        """One error record per run of failures (its count grows), not a log line each time."""
        now = time.monotonic()
        self.status_rule.checkpoint_failed(f"checkpoint {checkpoint_id} {text}", now)
        rec, new = topostatus.merge_error(self.errors, {
            "task": None, "component": topostatus.SYSTEM_COMPONENT, "where": where, "error": text,
            "traceback": None, "time": time.time(), "checkpoint": checkpoint_id}, cap=ERRORS_PER_COMPONENT)
        if new or self._ckpt_log_at is None or now - self._ckpt_log_at >= 60.0:
            self._ckpt_log_at = now  # the first one, then one line a minute
            first = time.strftime("%H:%M:%S", time.localtime(rec["first_time"]))
            log.error("checkpoint %d: %s%s", checkpoint_id, text,
                      "" if new else f" ({rec['count']} times since {first})")
        else:
            log.debug("checkpoint %d: %s (%d times)", checkpoint_id, text, rec["count"])

    def _checkpoint_completed(self):
        self.status_rule.checkpoint_completed(time.monotonic())
        if any(e.get("open") for e in self.errors if e.get("component") == topostatus.SYSTEM_COMPONENT):
            log.info("a checkpoint completed again")
            topostatus.close_errors(self.errors, topostatus.SYSTEM_COMPONENT)
        # (_ckpt_log_at is kept: checkpoints that fail and complete by turns under load log a
        # line a minute, and a failure after the record was closed is logged as new anyway)

    def _check_health(self, now):
        """Publish the rule's verdict when it changes (a state-manager write only then)."""
        self._next_health_check = now + 0.5
        rule = self.status_rule
        rule.registered(self.stmgrs, self.tasks, now)
        for c in self.containers - set(self.stmgrs):
            rule.lost("container", c, now)
        v = rule.verdict(now)
        if (v.state, v.reason) == self._health_key:
            return
        self._health_key = (v.state, v.reason)
        self.health_doc = topostatus.health_doc(v, now)
        if v.state == topostatus.DEGRADED:
            log.warning("topology %s is DEGRADED: %s", self.name, v.reason)
        else:
            log.info("topology %s is healthy again", self.name)
        self.write_status()

    # -- status -------------------------------------------------------------------------
    def write_status(self):
        """Write the status document now, or as soon as this copy is known current
        (streammgr/tmfence.py)."""
        self._status_dirty = True
        self.flush_status(time.monotonic())

    def _put_status(self):
        self.state.put(f"status/{self.name}", {
            "phase": self.phase, "error": self.error, "active": self.active,
            "health": getattr(self, "health_doc", None),
            "resumed_epoch": self.resumed_epoch,
            "tmaster": self.plan.tmaster, "pid": os.getpid(), "updated": time.time(),
            "host": (self.plan.hosts or {}).get(0) or "localhost",
            "tasks_ready": len(self.tasks), "tasks_total": len(self.all_tasks)})

    def _fail(self, error):
        if self.phase == FAILED:
            return
        self.phase = FAILED
        self.error = error
        log.error("topology %s failed: %s", self.name, error.get("error"))
        self.write_status()

    # -- sending ------------------------------------------------------------------------
    def _send(self, identity, op, **fields):
        try:
            self.sock.send_multipart([identity] + wire.ctrl(op, **fields), zmq.NOBLOCK)
        except zmq.ZMQError as e:
            log.debug("cannot send %s to %r: %s", op, identity, e)

    def broadcast(self, op, **fields):
        for c in self.stmgrs:
            self._send(self.stmgr_ident(c), op, **fields)

    # -- stream managers ----------------------------------------------------------------
    def on_stmgr(self, identity, msg):
        op = msg.get("op")
        c = msg.get("container")
        if not self.admit(identity, msg):
            return
        if op == Op.STMGR_REGISTER:
            if self.ckpt is not None and self.plan.hosts is not None:
                self._store_probe(f"c{c}", f"container {c} (on {self.plan.hosts.get(c)})", msg.get("probe"))
            self.stmgrs[c] = {"pid": msg.get("pid"), "last": time.monotonic(), "identity": identity}
            old_pid, self.stmgr_pids[c] = self.stmgr_pids.get(c), msg.get("pid")
            if self.ckpt is not None and old_pid is not None and old_pid != msg.get("pid"):
                # a new stream manager: what its predecessor held is lost, so is exactly once
                # unless every task rolls back (its instances may keep their pids)
                self._checkpoint_actions(self.ckpt.tasks_registered(
                    self.plan.packing.containers[c], time.monotonic()))
            for t, reg in (msg.get("tasks") or {}).items():
                self._task_registered(int(t), reg)
            log.info("stream manager %s registered (pid %s)", c, msg.get("pid"))
            if self.phase == RUNNING:
                self._send(identity, Op.START, active=self.active)
            self._check_ready()
            return
        if c not in self.stmgrs:
            self._send(identity, Op.REREGISTER)
            return
        self.stmgrs[c]["last"] = time.monotonic()
        if op == Op.HEARTBEAT:
            for k in ("counters", "queued", "proc", "backpressure", "backpressure_secs",
                      "backpressure_secs_by_task", "queued_by_task"):
                self.stmgrs[c][k] = msg.get(k)
        elif op == Op.REGISTER:
            self._task_registered(msg["task"], msg)
            self._check_ready()
        elif op == Op.METRICS:
            self.metrics.update(msg["task"], msg.get("metrics") or {}, msg.get("seq", 0), msg.get("pid"),
                                now=time.monotonic())
            self._answer_reports()
        elif op == Op.ERROR:
            self._on_error(msg)
        elif op == Op.CKPT_SAVED:
            if self.ckpt is not None:
                self._checkpoint_actions(self.ckpt.on_saved(
                    msg.get("task"), msg.get("id"), msg.get("epoch"), time.monotonic(),
                    nbytes=msg.get("bytes", 0), align_ms=msg.get("align_ms", 0.0)))
        elif op == Op.CKPT_COMMITTED:
            n, task = msg.get("id"), msg.get("task")
            if self.ckpt is not None and type(n) is int and task in self.all_tasks:
                self.sink_commits[task] = max(n, self.sink_commits.get(task, 0))
        elif op == Op.RESTORED:
            if self.ckpt is not None:
                self._checkpoint_actions(self.ckpt.on_restored(msg.get("task"), msg.get("epoch"),
                                                               time.monotonic()))
        else:
            log.warning("unknown message from stream manager %s: %r", c, msg)

    def _task_registered(self, task, reg):
        if not reg.get("ok"):
            self._fail({"error": f"component {reg.get('component')!r} task {task} failed to start: "
                                 f"{reg.get('error')}", "traceback": reg.get("traceback")})
            return
        prev = self.tasks.get(task)
        self.tasks[task] = {"pid": reg.get("pid"), "container": reg.get("container"),
                            "component": reg.get("component")}
        if reg.get("sink"):
            self.sinks.add(task)
        if prev and prev.get("pid") != reg.get("pid"):
            log.info("task %d re-registered (pid %s -> %s)", task, prev.get("pid"), reg.get("pid"))
            if self.ckpt is not None:  # a new incarnation: every task rolls back
                self._checkpoint_actions(self.ckpt.task_registered(task, time.monotonic()))

    def _check_ready(self):
        if self.phase != STARTING:
            return
        if self.all_tasks <= set(self.tasks) and self.containers <= set(self.stmgrs):
            self.phase = RUNNING
            log.info("all %d tasks up: topology %s is running (active=%s)",
                     len(self.all_tasks), self.name, self.active)
            self.broadcast(Op.START, active=self.active)
            self.write_status()
            if self.ckpt is not None:
                self.status_rule.checkpoints_began(time.monotonic())
                self._checkpoint_actions(self.ckpt.start(time.monotonic()))

    def _on_error(self, msg):
        """Keep an error record: only of the plan's components and the topology master's
        own (SYSTEM_ERROR_COMPONENTS), texts cut to tmschema.TEXT_KEEP characters."""
        rec = {k: msg.get(k) for k in ("task", "component", "where", "error", "traceback", "time")}
        rec["error"], rec["traceback"] = clip(rec["error"]), clip(rec["traceback"])
        rec["where"] = clip(rec["where"], NAME_MAX)
        comp = rec["component"]
        if isinstance(comp, str) and (comp in self.kinds or comp in SYSTEM_ERROR_COMPONENTS):
            self._keep_error(rec)
        else:
            log.warning("error record of component %s, which is not in the plan, not kept: %s",
                        show(rec["component"]), show(rec["error"]))
        if msg.get("fatal"):
            self._fail({"error": f"component {msg.get('component')!r} task {msg.get('task')}: "
                                 f"{rec['error']}", "traceback": rec["traceback"]})

    def _keep_error(self, rec):
        self.errors.append(rec)
        # keep the last ERRORS_PER_COMPONENT of each component (Storm keeps the last few per component)
        mine = [e for e in self.errors if e["component"] == rec["component"]]
        for drop in mine[:max(0, len(mine) - ERRORS_PER_COMPONENT)]:
            self.errors.remove(drop)

    # -- requests from the CLI ----------------------------------------------------------
    def on_request(self, identity, msg):
        op, req = msg.get("op"), msg.get("req")
        if op == Op.STATUS:
            self._send(identity, "reply", req=req, **self.status())
        elif op in (Op.ACTIVATE, Op.DEACTIVATE):
            active = op == Op.ACTIVATE
            rec = self.state.topology(self.name)
            if rec is not None:  # (first: if it cannot be recorded, nothing changed and the caller is told)
                rec["state"] = "RUNNING" if active else "PAUSED"
                self.state.put(f"topologies/{self.name}", rec)
            self.active = active
            self.broadcast(op)
            self.write_status()
            self._start_report(identity, req, {"active": self.active})
        elif op == Op.REPORT:
            self._start_report(identity, req, {})
        elif op == Op.GET_METRICS:
            window = msg.get("window") or "1m"
            if window not in WINDOWS:
                self._send(identity, "reply", req=req,
                           error=f"unknown window {window!r} (windows: {', '.join(WINDOWS)})")
            else:
                self._send(identity, "reply", req=req, **self.metrics_doc(window))
        elif op == Op.ERRORS:
            errs = [e for e in reversed(self.errors)
                    if not msg.get("component") or e.get("component") == msg.get("component")]
            self._send(identity, "reply", req=req, errors=errs[: int(msg.get("limit") or 20)])
        else:
            self._send(identity, "reply", req=req, error=f"unknown request {op!r}")

    def status(self):
        return {"phase": self.phase, "active": self.active, "error": self.error, "health": self.health_doc,
                "tasks": {str(t): r for t, r in self.tasks.items()},
                "stmgrs": {str(c): {k: v for k, v in s.items() if k != "last"}
                           for c, s in self.stmgrs.items()}}

    def _start_report(self, identity, req, extra):
        """Ask every instance for its metrics now; answer when all have reported."""
        self.report_seq += 1
        self.broadcast(Op.REPORT, seq=self.report_seq)
        self.waiting.append((identity, req, self.report_seq, time.monotonic() + REPORT_TIMEOUT, extra))

    def _answer_reports(self, now=None):
        if not self.waiting:
            return
        now = now or time.monotonic()
        keep = []
        for identity, req, seq, deadline, extra in self.waiting:
            missing = self.metrics.missing(seq)
            if not missing or now >= deadline:
                self._send(identity, "reply", req=req, missing=sorted(missing), **extra,
                           **self.metrics_reply())
            else:
                keep.append((identity, req, seq, deadline, extra))
        self.waiting = keep

    # -- the loop -----------------------------------------------------------------------
    def run(self):
        waker = SignalWaker(self._on_signal)
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(waker.fd, zmq.POLLIN)
        self.write_status()
        next_sample = time.monotonic()
        log.info("topology master of %s up at %s (pid %d)", self.name, self.plan.tmaster, os.getpid())
        try:
            while not self.stopping:
                events = dict(poller.poll(200))
                self.flush_status(time.monotonic())  # (first: a copy that was frozen checks it is current)
                if self.fenced_by is not None:
                    break
                if self.sock in events:
                    for _ in range(256):
                        try:
                            frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        # cluster mode: the sender's CURVE key must own the identity it speaks as
                        if self.auth is None or self.caller_ok(frames[0].bytes, _user_id(frames)):
                            self._dispatch([f.bytes for f in frames])
                now = time.monotonic()
                if self.auth is not None:
                    self.drain_auth_monitor()
                    self.refresh_clients(now)
                self._answer_reports(now)
                if self.ckpt is not None and self.fence_ok(now):  # (no checkpoint by a copy not known current)
                    self._checkpoint_actions(self.ckpt.tick(now))
                if self.health is not None:
                    self.health.tick(now)
                if now >= self._next_health_check:
                    self._check_health(now)
                if now >= next_sample:
                    next_sample = now + self.sample_every
                    self.sample_throughput(now)
                for c, s in list(self.stmgrs.items()):
                    if now - s["last"] > STMGR_TIMEOUT:
                        log.warning("stream manager %s silent for %.0fs; forgetting it", c, now - s["last"])
                        del self.stmgrs[c]
                if self._parent.orphaned():
                    log.warning("parent process is gone; exiting")
                    break
        finally:
            self.close_auth()
            self.sock.close(linger=0)
            self._zctx.term()

    def _on_signal(self, signum):
        self.stopping = True

    def _dispatch(self, frames):
        """One message off the socket (``frames``: bytes, the identity first): checked
        (streammgr/tmschema.py), then acted on. A bad one is dropped and counted in
        ``counters["malformed"]`` (a request with a ``req`` is answered an error); nothing
        raises out of here."""
        identity = frames[0] if frames else b""
        if len(frames) != 3 or frames[1] != CTRL:
            return self._malformed(identity, f"a message of {len(frames)} frames, not [{CTRL!r}, map]")
        if len(frames[2]) > MAX_CTRL_BYTES:
            return self._malformed(identity, f"a control message of {len(frames[2])} bytes "
                                             f"(at most {MAX_CTRL_BYTES})")
        try:
            raw = wire.decode_ctrl(frames[2])
        except Exception as e:  # noqa: BLE001 - whatever the decoder makes of garbage
            return self._malformed(identity, f"undecodable ({type(e).__name__}: {show(str(e))})")
        request = identity.startswith(b"q")
        try:
            if request:
                msg, why = self.schema.request(raw)
                if why is not None:
                    return self._malformed(identity, why, reply_to=self.schema.reply_to(raw))
                self.on_request(identity, msg)
                return
            parsed = wire.parse_stmgr_identity(identity)
            if parsed is None or parsed[0] != b"s":
                return self._malformed(identity, "not a stream manager's identity nor a request's")
            msg, why = self.schema.stmgr(raw, parsed[1])
            if why is not None:
                return self._malformed(identity, why)
            self.on_stmgr(identity, msg)
        except Exception as e:  # noqa: BLE001 - the last resort: a message dropped, not a dead master
            op = raw.get("op") if isinstance(raw, dict) else None
            self.counters["malformed"] += 1
            if self._malformed_log.ready():
                log.exception("dropped a control message from %r (op %s): handling it raised (%d more dropped "
                              "since the last report, %d in all)", identity[:24], show(op),
                              self._malformed_log.held, self.counters["malformed"])
                self._malformed_log.held = 0
            req = self.schema.reply_to(raw) if request else None
            if req is not None:
                self._send(identity, "reply", req=req,
                           error=f"the topology master could not handle {show(op)}: {type(e).__name__}: "
                                 f"{clip(str(e), NAME_MAX)}")

    def _malformed(self, identity, why, reply_to=None):
        """Drop a message that failed its check: counted, logged at most once a second, a
        request with a ``req`` answered an error."""
        self.counters["malformed"] += 1
        t = self._malformed_log
        if t.ready():
            log.warning("dropped a control message from %r: %s (%d more dropped since the last report, %d in all)",
                        identity[:24], why, t.held, self.counters["malformed"])
            t.held = 0
        if reply_to is not None:
            self._send(identity, "reply", req=reply_to, error=f"malformed request: {why}")


def _user_id(frames):
    """The ZAP user id (the CURVE public key) the message arrived with, or None."""
    try:
        return frames[-1].get("User-Id")
    except (zmq.ZMQError, IndexError):
        return None


def main(argv=None):
    import argparse
    import sys

    from bittern import logs
    from bittern.runplan import RunPlan
    ap = argparse.ArgumentParser(prog="python -m streammgr.tmaster")
    ap.add_argument("--plan", required=True)
    a = ap.parse_args(argv)
    plan = RunPlan.load(a.plan)
    logs.setup(f"{plan.name} tmaster")
    tm = TopologyMaster(plan)
    try:
        tm.run()
    finally:
        tm.state.close()
    sys.exit(EXIT_FENCED if tm.fenced_by is not None else 0)


if __name__ == "__main__":
    main()
