"""The Heron instance: one process running one spout or bolt task.

Thin I/O around the component: a DEALER socket to the container's stream
manager (``ipc://``) and a single-threaded loop that reads data, acks and
control messages, calls the user's code and hands emitted batches back.
:class:`Instance` holds what spouts and bolts share; :mod:`instance.spout` and
:mod:`instance.bolt` hold their loops. Grouping and batching live in
:mod:`instance.emitter`, tuple-tree tracking in :mod:`instance.acking`.
"""
from __future__ import annotations

import gc
import logging
import os
import time
import traceback

import zmq

from bittern import wire
from bittern.api.context import TopologyContext
from bittern.api.diskstate import keyed_factory
from bittern.api.metrics import read_metric
from bittern.api.state import KeyGroups, State, is_stateful
from bittern.api.topology import unpickle_config
from bittern.api.tuple import register_schema
from bittern.checkpoint import CheckpointStore, checkpoint_settings, task_layout
from bittern.config import ATLEAST_ONCE, EFFECTIVELY_ONCE
from bittern.loader import load_class
from bittern.proc import EXIT_FENCED, ParentWatch, SignalWaker
from bittern.procstats import ProcStats
from bittern.wire import ACK, CTRL, DATA, Op

from .ckptwriter import Checkpointing
from .emitter import Emitter, EpochEmitter, build_routers, downstream_tasks
from .rescale import recover_old_sinks, restore_state

log = logging.getLogger("bittern.instance")

HEARTBEAT_SECS = 1.0
RECV_BURST = 64  # messages read before the loop looks at timers again
FINAL_SEND_SECS = 2.0  # how long a stopping instance tries to hand over its last batches
DRAIN_BUDGET_SECS = 0.05  # a slow bolt still looks at control and timers this often
# Batches read between two credit messages. Credit is returned only in these steps,
# never "the rest before going idle": a spout reading one small ack batch at a time
# would answer each with a message. That is safe because the stream manager's window
# (streammgr WINDOW, 32) is larger: at most CREDIT_EVERY - 1 batches stay uncredited,
# so it always has room to send the next one.
CREDIT_EVERY = 8
COMMIT_RETRY_SECS = 1.0  # a sink whose commit failed tries again this often


def tune_gc(conf):
    """CPython's cyclic GC is tuned for programs that allocate few containers: at its
    default threshold (700) an instance decoding thousands of tuples a millisecond
    runs a collection every few hundred tuples, and the older generations scan every
    live container (a spout's pending trees, a bolt's state). So the objects alive
    after ``initialize`` are frozen out of collections, and the young generation waits
    for ``bittern.instance.gc.threshold`` allocations (0 keeps Python's defaults).
    Cycles are still collected, just less often."""
    n = int(conf["bittern.instance.gc.threshold"])
    if n > 0:
        gc.freeze()
        _, g1, g2 = gc.get_threshold()
        gc.set_threshold(n, g1, g2)


def logged_emit(emit, logger):
    """``topology.debug`` (Storm's): one log line per emitted tuple. Bound only when the
    key is set, so the emit path is untouched otherwise."""
    def emit_and_log(values, *args, **kwargs):
        extra = "".join(f" {a!r}" for a in args) + "".join(f" {k}={v!r}" for k, v in kwargs.items())
        logger.info("emitting: %r%s", values, extra)
        return emit(values, *args, **kwargs)
    return emit_and_log


class Crash(BaseException):
    """Raised to end the process on purpose (the supervisor restarts it). A BaseException,
    so that the handlers that catch a component's errors (``except Exception``) let it
    through: a multilang component raises it from ``process``/``next_tuple`` when its
    subprocess dies."""


class _NoMetadata:
    """The state manager an instance gives its ``CheckpointStore``. Instances only save
    and load state files; which checkpoints are complete is the topology master's
    business (it names the checkpoint to load in RESTORE), so no instance opens a
    state-manager session (a ZooKeeper session per task in cluster mode)."""

    def get(self, path):
        return None

    def children(self, path):
        return []


class Instance:
    kind = None

    def __init__(self, plan, task):
        self.plan = plan
        self.task = task
        self.component = plan.packing.task_component[task]
        self.container = plan.packing.task_container[task]
        self.cdef = plan.topology.components[self.component]
        self.conf = plan.component_config(self.component)
        self.acking = self.conf["topology.reliability.mode"] == ATLEAST_ONCE
        # EFFECTIVELY_ONCE: nothing is processed or emitted before the first RESTORE, which
        # sets the epoch (-1: none yet); a spout emits only after RESUME (``started``).
        self.eo = self.conf["topology.reliability.mode"] == EFFECTIVELY_ONCE
        self.epoch = -1
        self.resumed = not self.eo
        self.state = None
        self.new_keyed = None  # the disk backend's keyed stores (bittern/api/diskstate.py); None: memory
        self.work_dir = os.path.join(plan.home, "run", plan.name)  # (python -m instance: the plan's dir)
        self.store = None
        self.ckpt = None  # instance/ckptwriter.py: taking checkpoints (EFFECTIVELY_ONCE)
        self.sink = None
        self.task_component = dict(plan.packing.task_component)
        self.stopping = False
        self.fenced = False  # told a newer copy of this container runs elsewhere (exit EXIT_FENCED)
        self.started = False
        self.active = False
        self.initialized = False
        self.counters = {"__execute-count": 0, "__ack-count": 0, "__fail-count": 0, "__error-count": 0}
        self.obj = None
        self.emitter = None
        self.time = None  # instance.timekeeping: watermarks and timers, when the task has them
        self._parent = ParentWatch()
        self._zctx = zmq.Context()
        # Two connections to the stream manager: data and acks on ``sock``, control on
        # ``ctl``, so a control message never waits behind a backlog of data.
        self.sock, self.ctl = self._zctx.socket(zmq.DEALER), self._zctx.socket(zmq.DEALER)
        for s in (self.sock, self.ctl):
            s.setsockopt(zmq.IDENTITY, wire.instance_identity(task))
            s.setsockopt(zmq.SNDTIMEO, 200)
            s.setsockopt(zmq.LINGER, 1000)
        # bounded in and out queues: a slow peer makes this process wait, not grow
        self.sock.setsockopt(zmq.SNDHWM, 100)
        self.sock.setsockopt(zmq.RCVHWM, 100)
        self.serializer = wire.Serializer(self.conf["topology.serializer"])
        self._loads = self.serializer.loads
        self._ack_dumps = wire.Serializer("msgpack").dumps
        self.procstats = ProcStats()
        self._final_deadline = None
        self._credit = 0  # batches read and not yet credited to the stream manager
        # Hooks for components that own more than Python code (instance/shell.py, a
        # multilang subprocess): file descriptors the loop also waits on, and timers.
        self._commit_due = None  # a sink's checkpoint to commit (again: the last try failed)
        self._commit_failures = 0
        self._watched = {}  # fd -> callback()
        self._timer_hooks = []  # fn(now) -> seconds until it wants to run again

    # -- sending ------------------------------------------------------------------------
    def send(self, frames, sock=None):
        """Blocking send (the stream manager pushes back by not reading) that still
        notices a stop request."""
        sock = sock or self.sock
        while True:
            try:
                sock.send_multipart(frames, copy=False)
                return True
            except zmq.Again:
                if self.stopping or self._parent.orphaned() or \
                        (self._final_deadline and time.monotonic() > self._final_deadline):
                    return False

    def send_ctrl(self, op, **fields):
        fields.setdefault("task", self.task)
        return self.send(wire.ctrl(op, **fields), self.ctl)

    def report_error(self, where, exc, fatal=False):
        self.counters["__error-count"] += 1
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        log.error("%s[task %d] raised in %s: %s", self.component, self.task, where, tb)
        self.send_ctrl(Op.ERROR, component=self.component, where=where,
                       error=f"{type(exc).__name__}: {exc}", traceback=tb, fatal=fatal,
                       time=time.time())

    # -- setup --------------------------------------------------------------------------
    def setup(self):
        """Import the class, build context and emitter, bind the runtime's methods,
        call ``initialize``. Raises on user errors (reported by ``run``)."""
        plan = self.plan
        for comp, cdef in plan.topology.components.items():
            for stream, decl in cdef.outputs.items():
                register_schema(comp, stream, decl["fields"])
        cls = load_class(plan.topology, self.cdef.class_path)
        # config values the definition carries pickled (functions, instances, ...): unpickled
        # here only, once the topology's code is imported (bittern/api/topology.py)
        self.conf = unpickle_config(self.conf, plan.topology, self.component)
        self.obj = obj = cls()
        ctx = TopologyContext(plan.name, self.task, self.component,
                              plan.packing.task_index[self.task], self.container, self.conf,
                              plan.packing.component_tasks, self.task_component, plan.topology)
        self.context = ctx
        key_groups = None
        if self.eo:
            settings = checkpoint_settings(self.conf, home=plan.home)
            key_groups = self.key_groups = KeyGroups(settings.key_groups)
            self.store = CheckpointStore(settings.dir, _NoMetadata(), plan.name, settings.keep)
            self.new_keyed = keyed_factory(self.conf, key_groups, plan.name, self.task, self.work_dir)
            self.ckpt = Checkpointing(self, self.store, settings, key_groups)
            self.add_timer(self.ckpt.poll)
            self.barrier_max = settings.barrier_buffer_max_tuples
            self.downstream = downstream_tasks(plan, self.component)
        routers = build_routers(plan, self.component, ctx, key_groups)
        self.emitter = (EpochEmitter if self.eo else Emitter)(
            self.task, self.component, routers, self.serializer, self.send,
            self.conf["topology.producer.batch.size"])
        obj.context, obj.config = ctx, self.conf
        obj.logger = logging.getLogger(f"{self.component}[{self.task}]")
        self.bind(obj)
        self.time = self.make_clock(obj)
        if self.time is not None:
            self.add_timer(self.time.poll)
        attach = getattr(obj, "_runtime_attach", None)  # multilang components (instance/shell.py)
        if attach is not None:
            attach(self)  # (a multilang host logs its child's emits itself under topology.debug)
        elif self.conf.get("topology.debug"):
            obj.emit = logged_emit(obj.emit, obj.logger)
        obj.initialize(self.conf, ctx)
        self.initialized = True
        if self.eo:
            from bittern.sinks.base import TransactionalSink
            sink = getattr(obj, "sink", None)
            self.sink = sink if isinstance(sink, TransactionalSink) else None
            if self.sink is not None:
                self.add_timer(self.retry_commit)
        elif is_stateful(obj):
            # other modes: a State all the same, never checkpointed (it starts empty)
            groups = KeyGroups(self.conf["bittern.state.key.groups"])
            self.new_keyed = keyed_factory(self.conf, groups, plan.name, self.task, self.work_dir,
                                           change_log=False)
            self.state = State.for_task(ctx.task_index, len(plan.packing.component_tasks[self.component]),
                                        groups, change_log=False, keyed=self.new_keyed)
            obj.init_state(self.state)

    def bind(self, obj):
        """Give the component its runtime methods (emit, ack, fail)."""
        raise NotImplementedError

    def make_clock(self, obj):
        """The task's event-time machinery (instance/timekeeping.py), or None."""
        return None

    # -- control ------------------------------------------------------------------------
    def on_ctrl(self, msg):
        op = msg.get("op")
        if op == Op.START:
            self.started = self.resumed  # EFFECTIVELY_ONCE: RESUME starts it
            self.set_active(msg.get("active", True))
        elif op == Op.ACTIVATE:
            self.set_active(True)
        elif op == Op.DEACTIVATE:
            self.set_active(False)
        elif op == Op.REPORT:
            self.send_metrics(msg.get("seq", 0))
        elif op == Op.REREGISTER:
            self.register()
        elif op == Op.FENCED:  # a newer copy of this container runs elsewhere: emit nothing more
            log.error("%s[task %d]: fenced (container %s placed at version %s, a newer copy at %s); "
                      "stopping", self.component, self.task, self.container, msg.get("placed"), msg.get("newer"))
            self.fenced = self.stopping = True
        elif op in (Op.RESTORE, Op.RESUME, Op.CKPT_START, Op.CKPT_COMMIT):
            if self.eo:
                self.on_checkpoint_ctrl(op, msg)
        else:
            log.warning("unknown control message %r", msg)

    # -- exactly once -------------------------------------------------------------------
    def on_checkpoint_ctrl(self, op, msg):
        epoch = msg.get("epoch")
        if op == Op.RESTORE:
            if epoch is None or epoch < self.epoch:
                return  # from before a later rollback
            if epoch == self.epoch:  # sent again (to late registrants): answer again
                self.send_ctrl(Op.RESTORED, epoch=epoch)
                return
            self.restore(msg.get("id"), epoch, msg.get("layout"))
        elif op == Op.RESUME:
            if epoch == self.epoch:
                self.resumed = self.started = True
        elif op == Op.CKPT_START:
            if epoch == self.epoch and self.epoch >= 0:
                # only sent once every task restored in this epoch: it stands for a lost RESUME
                self.resumed = self.started = True
                self.on_checkpoint_start(msg["id"])
        elif op == Op.CKPT_COMMIT:
            if self.epoch >= 0:  # (before its first restore a sink has nothing to commit)
                self.on_checkpoint_commit(msg["id"])

    def restore(self, checkpoint_id, epoch, layout=None):
        """RESTORE(checkpoint_id, epoch, layout): drop what was emitted and not sent,
        load the state of ``checkpoint_id`` (empty if None), ``init_state`` again,
        resolve the sink, then answer RESTORED. Nothing is emitted until RESUME. A
        failure here is fatal: the task cannot take part in the epoch.

        ``layout`` is the task layout the checkpoint was taken with (the topology master
        reads it from the checkpoint's metadata; None: the current packing's). The task
        finds its old state by component and index, merging key groups from several old
        tasks when its component's parallelism changed (:mod:`instance.rescale`)."""
        self.resumed = self.started = False
        self.epoch = -1  # until restored: input is dropped
        self.emitter.drop()
        self.reset_inputs()
        self.ckpt.discard()  # checkpoint files of the old epoch still being written: dropped
        try:
            pk = self.plan.packing
            index, n = pk.task_index[self.task], len(pk.component_tasks[self.component])
            lay = layout or task_layout(pk)
            if self.state is not None and self.state.on_disk:
                self.ckpt.retire(self.state.keyed)  # (its database: scratch, replaced)
                self.state = None
            state, how = restore_state(self.store, checkpoint_id, lay, self.component,
                                       index, n, self.key_groups, self.kind,
                                       getattr(self.obj, "rescale_state", None), self.new_keyed)
            self.state = state
            self.ckpt.restored(checkpoint_id, lay, self.component, index, n)
            if is_stateful(self.obj):
                self.obj.init_state(state)
            if self.time is not None:
                self.time.load(state)
            if self.sink is not None:
                self._commit_due = None  # recover commits what the restore point holds
                self.sink.recover([] if checkpoint_id is None else [checkpoint_id], checkpoint_id)
                if checkpoint_id is not None and layout is not None:
                    self.recover_old_sinks(checkpoint_id, layout, index, n)
        except Exception as e:  # noqa: BLE001 - user code or a damaged checkpoint
            self.report_error("restore", e, fatal=True)
            return
        self.epoch = self.emitter.epoch = epoch
        log.info("%s[task %d] restored checkpoint %s (%s), epoch %d", self.component, self.task,
                 checkpoint_id, how, epoch)
        self.send_ctrl(Op.RESTORED, epoch=epoch)
        if self.sink is not None and checkpoint_id is not None:
            self.send_ctrl(Op.CKPT_COMMITTED, id=checkpoint_id, epoch=epoch)

    def recover_old_sinks(self, checkpoint_id, layout, index, n):
        """After a rebalance: resolve what sink tasks of this component left under task ids
        it no longer has (:func:`instance.rescale.recover_old_sinks`)."""
        recover_old_sinks(self, checkpoint_id, layout, index, n)

    def reset_inputs(self):
        """A rollback: forget what the input side holds (bolts: the aligner)."""

    def on_checkpoint_start(self, checkpoint_id):
        """CKPT_START: only spouts act on it."""

    def on_checkpoint_commit(self, checkpoint_id):
        """CKPT_COMMIT: a sink makes the checkpoint's output visible and tells the topology
        master (a bounded run waits for every sink). A commit that fails is reported and
        tried again every second (``retry_commit``) until it works or the task is rolled
        back; the checkpoint stays complete meanwhile, so nothing is lost. Every task
        also learns here that it may write deltas on this checkpoint."""
        self.ckpt.complete(checkpoint_id)
        sink = self.sink
        if sink is None:
            return
        if checkpoint_id >= sink.current_checkpoint:
            log.warning("%s[task %d]: commit of checkpoint %d, which this task has not pre-committed "
                        "(restore point or last pre-commit: %d); ignored", self.component, self.task,
                        checkpoint_id, sink.current_checkpoint - 1)
            return
        self._commit_due = max(checkpoint_id, self._commit_due or 0)
        self.retry_commit()

    def retry_commit(self, now=None):
        """Commit what CKPT_COMMIT asked for; as a timer hook, seconds until it runs again."""
        n = self._commit_due
        if n is None or self.sink is None:
            return COMMIT_RETRY_SECS
        try:
            self.sink.commit(n)
        except Exception as e:  # noqa: BLE001 - the sink's storage: reported, tried again
            self._commit_failures += 1
            self.report_error(f"sink commit of checkpoint {n} (attempt {self._commit_failures}; "
                              f"retried every {COMMIT_RETRY_SECS:g} s)", e)
            return COMMIT_RETRY_SECS
        if self._commit_failures:
            log.info("%s[task %d]: checkpoint %d committed after %d failed attempts", self.component,
                     self.task, n, self._commit_failures)
        self._commit_due, self._commit_failures = None, 0
        self.send_ctrl(Op.CKPT_COMMITTED, id=n, epoch=self.epoch)
        return COMMIT_RETRY_SECS

    def take_checkpoint(self, checkpoint_id, align_ms=0.0):
        """Barrier ``checkpoint_id`` passed this task (a spout's CKPT_START, a bolt's
        aligned barriers): ``pre_save``, detach and encode the state's changes, a sink's
        ``pre_commit``, queue the write; then flush and forward the barrier. CKPT_SAVED
        is reported once the write finished (instance/ckptwriter.py: off the loop). The
        barrier goes on even after a failure, so downstream tasks stop aligning; the
        topology master times the checkpoint out."""
        ok = False
        try:
            pre_save = getattr(self.obj, "pre_save", None)
            if pre_save is not None:
                pre_save(checkpoint_id)
            if self.time is not None:
                self.time.save(self.state)
            job = self.ckpt.prepare(checkpoint_id, self.state, self.epoch, align_ms)
            if self.sink is not None:
                self.sink.pre_commit(checkpoint_id)
            self.ckpt.submit(job)
            ok = True
        except Exception as e:  # noqa: BLE001 - user code, the sink, an unencodable value
            self.report_error(f"checkpoint {checkpoint_id}", e)
        self.emitter.send_barrier(checkpoint_id, self.downstream)
        self.ckpt.poll()  # (a write done already, e.g. before the loop runs: CKPT_SAVED now)
        return ok

    def set_active(self, active):
        self.active = active

    def register(self):
        """Registration travels on the *data* connection: when the stream manager reads
        it, that connection is up, so batches sent to this task from then on arrive."""
        self.send(wire.ctrl(Op.REGISTER, task=self.task, component=self.component, pid=os.getpid(),
                            ok=True, container=self.container, sink=self.sink is not None,
                            placed=self.plan.placed_at(self.container)))

    def metrics(self):
        em = self.emitter
        m = dict(self.counters)
        m["__emit-count"] = em.emit_count if em else 0
        m["__transfer-count"] = em.transfer_count if em else 0
        in_flight = getattr(self.obj, "_runtime_in_flight", None)
        if in_flight is not None:  # inputs a component took and has not finished (a multilang child's)
            m["__in-flight"] = in_flight()
        m.update(self.procstats.read())
        if self.time is not None:
            m.update(self.time.metrics())
        if self.ckpt is not None:
            m.update(self.ckpt.metrics())
        user = getattr(self.context, "user_metrics", None) if hasattr(self, "context") else None
        if user:
            vals = {}
            for name, metric in user.items():
                try:
                    vals[name] = read_metric(metric)
                except Exception as e:  # noqa: BLE001 - user code
                    self.report_error(f"metric {name!r}", e)
            m["user"] = vals
        return m

    def send_metrics(self, seq=0):
        self.send_ctrl(Op.METRICS, seq=seq, component=self.component, pid=os.getpid(),
                       metrics=self.metrics())

    def handle(self, frames):
        kind = frames[0]
        if kind == DATA:
            self._credit += 1
            self.on_data(frames[1])
        elif kind == ACK:
            self._credit += 1
            self.on_ack(frames[1])
        elif kind == CTRL:
            self.on_ctrl(wire.decode_ctrl(frames[1]))

    def on_data(self, payload):
        log.warning("%s task %d received a data batch it cannot process", self.kind, self.task)

    def on_ack(self, payload):
        log.warning("%s task %d received acks it does not track", self.kind, self.task)

    def drain_ctl(self):
        recv = self.ctl.recv_multipart
        while True:
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.handle(frames)

    def drain(self, limit=RECV_BURST, budget=DRAIN_BUDGET_SECS):
        """Handle the waiting control messages, then up to ``limit`` data messages or
        ``budget`` seconds of them; True if the data socket was emptied."""
        self.drain_ctl()
        recv = self.sock.recv_multipart
        deadline = time.monotonic() + budget
        emptied = False
        for _ in range(limit):
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                emptied = True
                break
            self.handle(frames)
            if self._credit >= CREDIT_EVERY:
                self.return_credit()
            if time.monotonic() > deadline:
                break
        return emptied

    def return_credit(self):
        """Tell the stream manager how many batches were read (it sends no more than a
        window ahead)."""
        n, self._credit = self._credit, 0
        self.send_ctrl(Op.CREDIT, n=n)

    def input_waiting(self):
        return bool((self.sock.getsockopt(zmq.EVENTS) | self.ctl.getsockopt(zmq.EVENTS)) & zmq.POLLIN)

    def poll(self, timeout_ms):
        """Wait for a message (True) or a timeout / stop signal (False). A watched file
        descriptor that is readable has its callback run here."""
        hit = False
        for sock, _ in self._poller.poll(timeout_ms):
            if sock is self.sock or sock is self.ctl:
                hit = True
            elif self._watched:
                cb = self._watched.get(sock)
                if cb is not None:
                    cb()
        return hit

    def watch(self, fd, callback):
        """Also wait on ``fd`` (readable) in the loop, calling ``callback()`` then."""
        self._poller.register(fd, zmq.POLLIN)
        self._watched[fd] = callback

    def unwatch(self, fd):
        if self._watched.pop(fd, None) is not None:
            self._poller.unregister(fd)

    def add_timer(self, fn):
        """``fn(now)`` runs with the periodic work and returns seconds until it is due again."""
        self._timer_hooks.append(fn)

    def flush(self):
        self.emitter.flush()

    def send_acks(self, ackbuf):
        dumps = self._ack_dumps
        for task, payload in ackbuf.drain().items():
            self.send([ACK, wire.task_bytes(task), dumps(payload)])

    # -- the loop -----------------------------------------------------------------------
    def run(self, endpoints):
        """``endpoints``: the stream manager's ``{"ipc": data, "ctl": control}``."""
        self._waker = SignalWaker(self._on_signal)
        self._poller = zmq.Poller()
        self._poller.register(self.ctl, zmq.POLLIN)
        self._poller.register(self.sock, zmq.POLLIN)
        self._poller.register(self._waker.fd, zmq.POLLIN)
        self.ctl.connect(endpoints["ctl"])
        self.sock.connect(endpoints["ipc"])
        try:
            self.setup()
        except BaseException as e:  # noqa: BLE001 - user code failed to start: report and exit
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            log.error("%s[task %d] failed to start:\n%s", self.component, self.task, tb)
            self.send_ctrl(Op.REGISTER, component=self.component, pid=os.getpid(), ok=False,
                           container=self.container, error=f"{type(e).__name__}: {e}", traceback=tb)
            self.close_socket()
            return 3
        self.register()
        if self.ckpt is not None:
            self.ckpt.start()  # checkpoint files are written off the loop from now on
        log.info("%s[task %d] initialized (pid %d, %s)", self.component, self.task, os.getpid(),
                 self.conf["topology.reliability.mode"])
        self.init_timers()
        tune_gc(self.conf)
        code = 0
        try:
            self.loop()
        except Crash as e:
            log.error("%s[task %d] exits on purpose: %s", self.component, self.task, e)
            code = 1
        finally:
            code = EXIT_FENCED if self.fenced else code
            self.shutdown(clean=code == 0)
        return code

    def loop(self):
        raise NotImplementedError

    def _on_signal(self, signum):
        self.stopping = True

    def init_timers(self):
        now = time.monotonic()
        self._next_hb = now + HEARTBEAT_SECS
        # 0 turns periodic metrics off (they are still sent when asked for, e.g. by run)
        self._metrics_every = float(self.conf["topology.metrics.interval.secs"])
        self._next_metrics = now + self._metrics_every if self._metrics_every else float("inf")
        self._flush_every = self.conf["topology.batch.flush.interval.millis"] / 1000.0

    def timers(self, now):
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
        wait = max(0.0, min(self._next_hb, self._next_metrics) - now)
        for fn in self._timer_hooks:
            wait = min(wait, max(0.0, fn(now)))
        return wait

    def shutdown(self, clean=True):
        if self.obj is not None and self.initialized and clean:
            try:
                self.obj.close()
            except Exception as e:  # noqa: BLE001 - user code
                self.report_error("close", e)
        if self.ckpt is not None:
            self.ckpt.close()
        if self.state is not None and self.state.on_disk and (self.ckpt is None or not self.ckpt.busy):
            self.state.keyed.close()  # (scratch; a writer still streaming from it keeps it, the process ends)
        # allow the final sends, but never wait long for a stream manager that is not reading
        self.stopping = False
        self._final_deadline = time.monotonic() + FINAL_SEND_SECS
        try:
            if self.emitter and not self.fenced:
                self.flush()
            self.send_metrics(-1)
        finally:
            self.close_socket()
        log.info("%s[task %d] stopped", self.component, self.task)

    def close_socket(self):
        self.sock.close(linger=1000)
        self.ctl.close(linger=1000)
        self._zctx.term()
