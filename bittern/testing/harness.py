"""One component driven by the test, as Flink's operator test harnesses drive one
operator: :class:`BoltHarness` (feed tuples, move processing time and the input
watermark, fire ticks and timers, look at what was emitted, acked and failed, keyed
state and pending timers) and :class:`SpoutHarness` (call ``next_tuple``, ack or fail
its tuples, let messages time out).

The component runs in the engine's own instance (``BoltInstance``/``SpoutInstance``),
fed the frames its stream manager would hand it: batches as the upstream emitter
encodes them, watermarks, acks, control messages. Under at least once a bolt's input
is a tuple tree of its own, tracked by the engine's ``RootTracker``: the input counts
as acked when the bolt acked it (what it emitted anchored to it is taken as processed
downstream), failed when the bolt failed it.
"""
from __future__ import annotations

import shutil
import tempfile

from bittern import wire
from bittern.api.component import Bolt, Spout
from bittern.api.stream import DEFAULT_STREAM, Stream
from bittern.api.topology import Grouping, TopologyBuilder
from bittern.api.tuple import tick_tuple
from bittern.api.windows import EventTime
from bittern.config import ATLEAST_ONCE
from bittern.errors import TopologyError
from bittern.wire import ACK, BARRIER_STREAM, CTRL, DATA, WATERMARK_STREAM, Op

from .plan import Task, TopologyTestError, make_plan, merged_config, resolve, split_frames
from .sandbox import Sandbox, register_class, unregister_class


class _Source(Spout):
    """An upstream component of a harnessed bolt: declared, never run."""


class _Sink(Bolt):
    """The downstream component of a harnessed spout: declared, never run."""


class _Harness:
    def __init__(self, tdef, component, task_index=0, config=None, seed=0, start_time=0.0, errors="raise",
                 state=None, made=()):
        if errors not in ("raise", "collect"):
            raise ValueError(f"errors must be 'raise' or 'collect', got {errors!r}")
        cdef = tdef.components.get(component)
        if cdef is None:
            raise TopologyError(f"no component {component!r} in topology {tdef.name!r} "
                                f"(components: {', '.join(tdef.components)})")
        if cdef.kind != self.kind:
            raise TopologyError(f"component {component!r} is a {cdef.kind}, not a {self.kind}")
        self._made = list(made)
        self.sandbox = Sandbox(seed, start_time)
        self.home = tempfile.mkdtemp(prefix="bittern-harness-")
        self.errors_mode = errors
        self.emitted, self.errors, self.sent = [], [], []
        self._raised = 0
        try:
            if state is not None:
                self._made.append(_prefill_state(tdef, cdef, state))
            conf = merged_config(tdef, config)
            self.plan = make_plan(tdef, conf, self.home)
            tasks = self.plan.packing.component_tasks[component]
            if not 0 <= task_index < len(tasks):
                raise TopologyError(f"component {component!r} has {len(tasks)} tasks; task_index {task_index} "
                                    "is not one of them")
            self.component, self.task = component, tasks[task_index]
            with self.sandbox:
                self._task = Task(self.plan, self.task, self._route, self.errors.append, self.emitted)
                self.inst = self._task.inst
                self._task.setup()
                if self.inst.eo:  # as the topology master starts a topology: restore (nothing), resume
                    self.inst.handle(wire.ctrl(Op.RESTORE, id=None, epoch=0))
                    self.inst.handle(wire.ctrl(Op.RESUME, epoch=0))
                self._check()
        except BaseException:
            self._cleanup()
            raise

    # -- plumbing ------------------------------------------------------------------------
    def _route(self, src, frames):
        kind, dest, payload = split_frames(frames)
        if kind != CTRL:
            self.sent.append((kind, dest, payload))
            self._on_frame(kind, payload)

    def _on_frame(self, kind, payload):
        pass

    def _check(self):
        if self.errors_mode == "raise" and len(self.errors) > self._raised:
            rec = self.errors[self._raised]
            self._raised = len(self.errors)
            raise TopologyTestError(rec) from rec.error

    def _timers(self):
        wait = self.inst.timers(self.sandbox.now())
        self.inst.flush()
        self._check()
        return wait

    @property
    def obj(self):
        """The component object (the user's class)."""
        return self.inst.obj

    @property
    def config(self):
        return self.inst.conf

    @property
    def counters(self):
        """The engine's counters of the task (``__execute-count``, ``__ack-count``...)."""
        em = self.inst.emitter
        return dict(self.inst.counters, **{"__emit-count": em.emit_count, "__transfer-count": em.transfer_count})

    @property
    def processing_time(self):
        """``time.time()`` as the engine sees it."""
        return self.sandbox.clock.time()

    def tuples(self, stream=DEFAULT_STREAM):
        """The values emitted on ``stream``, in order."""
        return [e.values for e in self.emitted if e.stream == stream]

    def advance_processing_time(self, seconds):
        """Move the engine's clock ``seconds`` forward, running every timer that falls due
        on the way at its time (ticks, processing-time timers and windows, message
        timeouts, watermark intervals), as the instance's loop would."""
        clock = self.sandbox.clock
        with self.sandbox:
            target = clock.mono + float(seconds)
            while True:
                step = max(self._timers(), 1e-6)
                if clock.mono + step > target:
                    break
                clock.advance(step)
            clock.advance(target - clock.mono)
            self._timers()

    def checkpoint(self, checkpoint_id):
        """EFFECTIVELY_ONCE: take checkpoint ``checkpoint_id`` as the task would (a spout on
        the topology master's CKPT_START, a bolt once the barrier came on every input):
        ``pre_save``, the state written to the checkpoint store, the barrier sent on."""
        if not self.inst.eo:
            raise TopologyError(f"component {self.component!r}: checkpoint() needs "
                                "topology.reliability.mode = EFFECTIVELY_ONCE")
        with self.sandbox:
            self._checkpoint(checkpoint_id)
            self.inst.flush()
            self._check()

    def commit(self, checkpoint_id):
        """EFFECTIVELY_ONCE: checkpoint ``checkpoint_id`` is complete (a sink commits it)."""
        with self.sandbox:
            self.inst.handle(wire.ctrl(Op.CKPT_COMMIT, id=checkpoint_id))
            self._check()

    def close(self):
        """Stop the task as a process stops (``close()`` is called) and remove its files."""
        if getattr(self, "_task", None) is not None:
            task, self._task = self._task, None
            with self.sandbox:
                task.close()
            self._cleanup()
            self._check()

    def _cleanup(self):
        for path in self._made:
            unregister_class(path)
        self._made = []
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        else:
            try:
                self.close()
            except Exception:  # noqa: BLE001 - the test's own error comes first
                pass
        return False


def _prefill_state(tdef, cdef, state):
    """A subclass of the component's class whose ``init_state`` first puts ``state``
    (``{"keyed": {...}, "plain": {...}}``) into the State the engine made."""
    from bittern.loader import load_class
    bad = set(state) - {"keyed", "plain"}
    if bad:
        raise TopologyError(f"state: unknown part(s) {sorted(bad)}; give {{'keyed': {{key: value}}, "
                            f"'plain': {{key: value}}}}")
    cls = load_class(tdef, cdef.class_path)
    if not callable(getattr(cls, "init_state", None)):
        raise TopologyError(f"state: component {cdef.name!r} ({cls.__qualname__}) has no init_state")
    keyed, plain = dict(state.get("keyed") or {}), dict(state.get("plain") or {})

    def init_state(self, st):
        for k, v in plain.items():
            st.put(k, v)
        for k, v in keyed.items():
            st.keyed.put(k, v)
        return cls.init_state(self, st)
    sub = type(cls.__name__, (cls,), {"init_state": init_state})
    cdef.class_path = register_class(sub)
    return cdef.class_path


def _declare(fields, grouping):
    """An input declaration: ``["f", ...]``, ``[Stream(...), ...]``, or ``(either, grouping)``."""
    if isinstance(fields, tuple) and len(fields) == 2 and not isinstance(fields[0], str):
        fields, grouping = fields
    return list(fields), grouping


class BoltHarness(_Harness):
    """Drive one bolt task.

    ``BoltHarness(CountBolt, inputs={"split": ["word"]})`` runs ``CountBolt`` fed by a
    component ``split`` declaring the field ``word`` (``inputs`` also takes a list of
    fields for one input named ``source``, a list of ``Stream`` for named streams, and
    ``(fields, grouping)``; ``par``/``task_index``: the bolt's parallelism and which of
    its tasks this is; ``event_time``: the inputs carry watermarks, on by default for a
    windowed bolt or one with ``on_timer``). ``BoltHarness.of(topology, "count")``
    runs a component of a real topology instead, with its real inputs and outputs.
    Without ``topology.reliability.mode`` in ``config`` the harness runs at least once,
    so that ``acked`` and ``failed`` say what the bolt did with each input.
    """

    kind = "bolt"

    def __init__(self, bolt_cls, inputs=None, config=None, state=None, par=1, task_index=0, event_time=None,
                 seed=0, start_time=0.0, errors="raise", name="harness"):
        if not (isinstance(bolt_cls, type) and issubclass(bolt_cls, Bolt)):
            raise TopologyError(f"BoltHarness needs a Bolt subclass, got {bolt_cls!r}")
        if inputs is None:
            inputs = {"source": ["value"]}
        elif isinstance(inputs, (list, tuple)):
            inputs = {"source": inputs}
        if event_time is None:
            event_time = bool(getattr(bolt_cls, "window", None)) or callable(getattr(bolt_cls, "on_timer", None))
        made, builder, subs = [], TopologyBuilder(name), {}
        for comp, decl in inputs.items():
            fields, grouping = _declare(decl, Grouping.SHUFFLE)
            attrs = {"outputs": fields, "event_time": EventTime.manual() if event_time else None}
            src = type(f"{comp}_source", (_Source,), attrs)
            made.append(register_class(src))
            spec = builder.add_spout(comp, src)
            streams = [f.name for f in fields if isinstance(f, Stream)] or [DEFAULT_STREAM]
            for s in streams:
                subs[spec[s] if s != DEFAULT_STREAM else spec] = grouping
        builder.add_bolt(bolt_cls.__name__.lower() if name == "harness" else name, bolt_cls, par=par, inputs=subs)
        config = dict(config or {})
        config.setdefault("topology.reliability.mode", ATLEAST_ONCE)
        try:
            tdef = builder.build()
        except BaseException:
            for p in made:
                unregister_class(p)
            raise
        comp = [c for c in tdef.components.values() if c.kind == "bolt"][0].name
        self._init(tdef, comp, task_index, config, seed, start_time, errors, state, made)

    @classmethod
    def of(cls, topology, component, task_index=0, config=None, state=None, seed=0, start_time=0.0,
           errors="raise"):
        """Harness task ``task_index`` of ``component`` of a real topology (a class, a
        builder or a file): its context, inputs and output streams are the topology's."""
        self = cls.__new__(cls)
        self._init(resolve(topology), component, task_index, config, seed, start_time, errors, state, ())
        return self

    def _init(self, tdef, component, task_index, config, seed, start_time, errors, state, made):
        from instance.acking import RootTracker
        self.tracker = RootTracker()
        self.inputs, self._acked, self._failed = [], [], []
        _Harness.__init__(self, tdef, component, task_index, config, seed, start_time, errors, state, made)
        self._sources = {i.component for i in self.plan.topology.components[component].inputs}

    # -- feeding -------------------------------------------------------------------------
    def _source_task(self, component, task):
        if component is None:
            if len(self._sources) != 1:
                raise TopologyError(f"component {self.component!r} has inputs {sorted(self._sources)}: "
                                    f"say which with component=")
            component = next(iter(self._sources))
        if component not in self._sources:
            raise TopologyError(f"component {self.component!r} has no input {component!r} "
                                f"(inputs: {', '.join(sorted(self._sources))})")
        tasks = self.plan.packing.component_tasks[component]
        if task is None:
            return tasks[0]
        if task not in tasks:
            raise TopologyError(f"task {task} is not a task of {component!r} (tasks: {tasks})")
        return task

    def process(self, values, component=None, stream=DEFAULT_STREAM, task=None):
        """Hand the bolt one input tuple, as a batch of one from ``component`` (default:
        the only input) task ``task`` (default: its first) on ``stream``; returns the
        input's number (its index in ``inputs``)."""
        from instance.acking import new_edge, new_root
        src = self._source_task(component, task)
        comp = self.plan.packing.task_component[src]
        decl = self.plan.topology.components[comp].outputs.get(stream)
        if decl is None:
            raise TopologyError(f"input {comp!r} has no stream {stream!r} (streams: "
                                f"{', '.join(self.plan.topology.components[comp].outputs)})")
        if len(values) != len(decl["fields"]):
            raise TopologyError(f"input {comp!r} stream {stream!r}: {len(values)} values {list(values)!r} for "
                                f"fields {decl['fields']}")
        n = len(self.inputs)
        self.inputs.append(list(values))
        inst = self.inst
        with self.sandbox:
            if inst.eo:
                batch = [src, stream, [list(values)], None, inst.epoch]
            elif inst.acking:
                root, edge = new_root(src), new_edge()
                self.tracker.register(root, edge, n, stream, self.sandbox.now())
                batch = [src, stream, [list(values)], [0, [root, edge]]]
            else:
                batch = [src, stream, [list(values)], None]
            self._task.deliver(DATA, inst.serializer.dumps(batch))
            self._check()
        return n

    def process_many(self, rows, **kw):
        return [self.process(v, **kw) for v in rows]

    def watermark(self, w, component=None, task=None):
        """The watermark ``w`` (seconds; None: idle) arrives from every upstream task (or
        from ``component``/``task`` only): the input watermark is the minimum over them."""
        inst = self.inst
        inband = [] if inst.time is None else [c for c in inst.time.input.wm if c not in inst.time.input.derived]
        if not inband:
            raise TopologyError(f"component {self.component!r} has no input watermark: its inputs carry none "
                                "(give event_time=True, or harness a topology whose spout declares event_time)")
        if component is None and task is None:
            srcs = sorted(inband)
        elif task is not None:
            srcs = [self._source_task(component, task)]
        else:
            self._source_task(component, None)
            srcs = list(self.plan.packing.component_tasks[component])
        with self.sandbox:
            for src in srcs:
                batch = [src, WATERMARK_STREAM, w] + ([inst.epoch] if inst.eo else [])
                self._task.deliver(DATA, inst.serializer.dumps(batch))
                self._check()

    def tick(self):
        """A tick tuple now (``process_tick``), as the instance sends it every
        ``topology.tick.tuple.freq.secs``."""
        inst = self.inst
        with self.sandbox:
            if inst._tick_every:
                inst._next_tick = self.sandbox.now()
                self._timers()
            else:
                try:
                    inst.obj.process_tick(tick_tuple(0.0))
                except Exception as e:  # noqa: BLE001 - user code, as the instance handles it
                    inst.report_error("process_tick", e)
                inst.flush()
                self._check()

    def fire_timers(self):
        """Run what is due now (processing timers, windows on processing time, ticks)."""
        with self.sandbox:
            self._timers()

    def _checkpoint(self, checkpoint_id):
        inst = self.inst
        for src in sorted(inst.channels):
            batch = [src, BARRIER_STREAM, checkpoint_id, inst.epoch]
            inst.handle([DATA, inst.serializer.dumps(batch)])

    # -- what happened -----------------------------------------------------------------
    def _on_frame(self, kind, payload):
        if not self.inst.acking:
            return
        now = self.sandbox.now()
        out = []
        if kind == DATA:  # downstream takes every run emitted as processed: its edge is acked
            b = self.inst.serializer.loads(payload)
            if b[1] in (WATERMARK_STREAM, BARRIER_STREAM) or b[3] is None:
                return
            runs = b[3]
            for k in range(1, len(runs), 2):
                mid = runs[k]
                for i in range(0, len(mid or ()), 2):
                    done = self.tracker.ack(mid[i], mid[i + 1], now)
                    if done is not None:
                        out.append(done)
        elif kind == ACK:
            acks, fails = self.inst._loads(payload)
            self.tracker.ack_many(acks, now, out)
            for root in fails:
                done = self.tracker.fail(root)
                if done is not None:
                    out.append(done)
        for outcome, n, _stream, _started in out:
            (self._acked if outcome == "acked" else self._failed).append(n)

    @property
    def acked(self):
        """The inputs (values) the bolt acked, in the order it did."""
        return [self.inputs[n] for n in self._acked]

    @property
    def failed(self):
        """The inputs (values) the bolt failed."""
        return [self.inputs[n] for n in self._failed]

    @property
    def acked_ids(self):
        return list(self._acked)

    @property
    def failed_ids(self):
        return list(self._failed)

    @property
    def pending(self):
        """Inputs neither acked nor failed yet (held by a window, say)."""
        return len(self.tracker)

    @property
    def state(self):
        """The task's State (``init_state``'s), or None."""
        return self.inst.state

    @property
    def keyed_state(self):
        """``{key: value}`` of the task's keyed state."""
        st = self.inst.state
        return {} if st is None else dict(st.keyed.items())

    @property
    def input_watermark(self):
        t = self.inst.time
        w = None if t is None else t.input.current
        return None if w is None or w == float("-inf") else w

    def pending_timers(self, key=None):
        """The bolt's own timers, ``[(kind, key, ts)]`` in time order."""
        t = self.inst.time
        if t is None:
            return []
        return [(k, key_, ts) for k, key_, ts, tag in t.timers.pending(key) if tag is None]


class SpoutHarness(_Harness):
    """Drive one spout task: ``next_tuple(n)`` calls it n times (fewer if it may not
    emit: ``topology.max.spout.pending``, ``done()``), ``ack(tup_id)`` / ``fail(tup_id)``
    complete or fail a tree as the bolts downstream would, ``advance_processing_time``
    lets trees time out. Each output stream is subscribed by one bolt (shuffle; direct
    streams: direct), so reliable tuples stay pending until acked. Without
    ``topology.reliability.mode`` in ``config`` it runs at least once.
    ``SpoutHarness.of(topology, "name")`` harnesses a spout of a real topology."""

    kind = "spout"

    def __init__(self, spout_cls, config=None, state=None, par=1, task_index=0, seed=0, start_time=0.0,
                 errors="raise", name=None):
        if not (isinstance(spout_cls, type) and issubclass(spout_cls, Spout)):
            raise TopologyError(f"SpoutHarness needs a Spout subclass, got {spout_cls!r}")
        builder = TopologyBuilder("harness")
        comp = name or spout_cls.__name__.lower()
        spec = builder.add_spout(comp, spout_cls, par=par)
        streams = spout_cls.declared_streams() if hasattr(spout_cls, "declared_streams") else {}
        subs = {}
        for s, st in streams.items():
            subs[spec if s == DEFAULT_STREAM else spec[s]] = Grouping.DIRECT if st.direct else Grouping.SHUFFLE
        made = [register_class(type("downstream", (_Sink,), {}))]
        if subs:
            builder.add_bolt("downstream", _made_class(made[0]), inputs=subs)
        config = dict(config or {})
        config.setdefault("topology.reliability.mode", ATLEAST_ONCE)
        try:
            tdef = builder.build()
        except BaseException:
            unregister_class(made[0])
            raise
        self.acked, self.failed = [], []
        _Harness.__init__(self, tdef, comp, task_index, config, seed, start_time, errors, state, made)
        self._watch_outcomes()

    @classmethod
    def of(cls, topology, component, task_index=0, config=None, state=None, seed=0, start_time=0.0,
           errors="raise"):
        self = cls.__new__(cls)
        self.acked, self.failed = [], []
        _Harness.__init__(self, resolve(topology), component, task_index, config, seed, start_time, errors,
                          state, ())
        self._watch_outcomes()
        return self

    def _watch_outcomes(self):
        for what, out in (("ack", self.acked), ("fail", self.failed)):
            def called(tup_id, _fn=getattr(self.obj, what), _out=out):
                _out.append(tup_id)
                return _fn(tup_id)
            setattr(self.obj, what, called)

    def next_tuple(self, n=1):
        """Call ``next_tuple`` up to ``n`` times (the engine's way: only while it may emit);
        returns what those calls emitted."""
        import instance.spout as spout_mod
        inst, before = self.inst, len(self.emitted)
        with self.sandbox:
            burst, spout_mod.SPOUT_BURST = spout_mod.SPOUT_BURST, 1
            try:
                for _ in range(n):
                    if not inst.can_emit():
                        break
                    inst.call_next_tuple(inst.emitter)
                    inst.report_completed()
                    self._check()
            finally:
                spout_mod.SPOUT_BURST = burst
            inst.flush()
        return self.emitted[before:]

    def _root_of(self, tup_id):
        for root, e in self.inst.tracker.entries.items():
            if e[4] and e[1] == tup_id:
                return root, e[0]
        raise KeyError(f"no pending tuple with id {tup_id!r} (pending: {self.pending})")

    def ack(self, tup_id):
        """The tree of ``tup_id`` completes downstream: the spout's ``ack`` is called."""
        root, xor = self._root_of(tup_id)
        self._deliver_acks([[root, xor], []])

    def fail(self, tup_id):
        """A bolt downstream failed a tuple of the tree: the spout's ``fail`` is called."""
        root, _ = self._root_of(tup_id)
        self._deliver_acks([[], [root]])

    def _deliver_acks(self, doc):
        with self.sandbox:
            self._task.deliver(ACK, self.inst._ack_dumps(doc))
            self._check()

    def activate(self):
        with self.sandbox:
            self.inst.handle(wire.ctrl(Op.ACTIVATE))
            self._check()

    def deactivate(self):
        with self.sandbox:
            self.inst.handle(wire.ctrl(Op.DEACTIVATE))
            self._check()

    @property
    def pending(self):
        """Message ids of the trees in flight, oldest first."""
        return [e[1] for e in self.inst.tracker.entries.values() if e[4]]

    @property
    def done(self):
        """The spout said ``done()``."""
        return self.inst.exhausted

    @property
    def state(self):
        return self.inst.state

    def _checkpoint(self, checkpoint_id):
        self.inst.handle(wire.ctrl(Op.CKPT_START, id=checkpoint_id, epoch=self.inst.epoch))


def _made_class(path):
    from .sandbox import _made
    return _made[path.partition(":")[2]]


__all__ = ["BoltHarness", "SpoutHarness"]
