"""``complete_topology``: a whole topology run to completion in one process, as
Storm's ``Testing.completeTopology`` does, with named spouts replaced by given tuples.

Every task is the engine's own instance (instance/spout.py, instance/bolt.py): the
same emitter and groupings choose destination tasks, the same acker code tracks
tuple trees, the same clocks move watermarks and fire windows and timers. What a
stream manager does, moving each batch to its destination task in order, is done
here by one FIFO queue. The run is deterministic: one thread, a fixed order, a
seeded generator for edge ids and shuffle starts, and a virtual clock that moves
only when nothing else can happen (to the next timer: a tick, a watermark interval,
a message timeout).
"""
from __future__ import annotations

import shutil
import tempfile
from collections import deque
from dataclasses import dataclass, field

from bittern.api.component import Spout
from bittern.api.stream import DEFAULT_STREAM
from bittern.config import EFFECTIVELY_ONCE
from bittern.errors import TopologyError
from bittern.loader import load_class
from bittern.wire import CTRL

from .plan import ErrorRecord, Task, TopologyTestError, make_plan, merged_config, resolve, split_frames
from .sandbox import Sandbox, register_class, unregister_class

DEFAULT_MAX_TIME = 3600.0  # seconds of virtual time a run may take
MAX_STEPS = 10_000_000


@dataclass(frozen=True)
class Emit:
    """A mocked source item on a stream other than the default: ``Emit([v, ...], stream="s")``."""
    values: list
    stream: str = DEFAULT_STREAM


class MockedSpout(Spout):
    """Stands in for a spout named in ``sources``: emits its items in order (task *i* of
    *n* takes items *i*, *i + n*, ...), each with its index in the list as message id,
    then says ``done()``. It keeps the original's output streams and event time."""

    items = ()

    def initialize(self, config, context):
        par = len(context.get_component_tasks(context.component))
        self._mine = list(enumerate(self.items))[context.task_index::par]
        self._next = 0

    def next_tuple(self):
        if self._next >= len(self._mine):
            self.done()
            return
        idx, item = self._mine[self._next]
        self._next += 1
        if isinstance(item, Emit):
            self.emit(list(item.values), tup_id=idx, stream=item.stream)
        else:
            self.emit(list(item), tup_id=idx)


@dataclass
class Result:
    """What a run did. ``emitted``: every emit of every task in the order they happened
    (:class:`Emitted`: component, task, stream, values); ``acked`` / ``failed``: per
    spout, the message ids whose trees completed or failed (for a mocked spout, the
    index of the item); ``errors``: what user code raised; ``counters``: per component,
    the engine's counters summed over its tasks; ``time``: seconds of virtual time."""
    emitted: list
    acked: dict
    failed: dict
    errors: list
    counters: dict
    tasks: dict
    time: float = 0.0
    dropped: int = 0
    config: dict = field(default_factory=dict, repr=False)

    def tuples(self, component, stream=DEFAULT_STREAM):
        """The values ``component`` emitted on ``stream``, every task's, in order."""
        self._check(component)
        return [e.values for e in self.emitted if e.component == component and e.stream == stream]

    def by_task(self, component, stream=DEFAULT_STREAM):
        """``{task id: [values, ...]}`` of ``component`` on ``stream``."""
        self._check(component)
        out = {t: [] for t in self.tasks[component]}
        for e in self.emitted:
            if e.component == component and e.stream == stream:
                out[e.task].append(e.values)
        return out

    def streams(self, component):
        self._check(component)
        return sorted({e.stream for e in self.emitted if e.component == component})

    def _check(self, component):
        if component not in self.tasks:
            raise KeyError(f"no component {component!r} in the topology (components: {', '.join(sorted(self.tasks))})")


def mock_spouts(tdef, sources):
    """Point each spout named in ``sources`` at a :class:`MockedSpout` holding its items;
    returns the class paths made (to unregister)."""
    made = []
    for name, items in (sources or {}).items():
        cdef = tdef.components.get(name)
        if cdef is None or cdef.kind != "spout":
            spouts = ", ".join(c.name for c in tdef.spouts)
            raise TopologyError(f"sources: {name!r} is not a spout of topology {tdef.name!r} (spouts: {spouts})")
        items = list(items)
        for i, item in enumerate(items):
            values = item.values if isinstance(item, Emit) else item
            stream = item.stream if isinstance(item, Emit) else DEFAULT_STREAM
            if stream not in cdef.outputs:
                raise TopologyError(f"sources[{name!r}] item {i}: spout {name!r} has no stream {stream!r} "
                                    f"(streams: {', '.join(cdef.outputs)})")
            fields = cdef.outputs[stream]["fields"]
            if not isinstance(values, (list, tuple)) or len(values) != len(fields):
                raise TopologyError(f"sources[{name!r}] item {i}: expected a list of {len(fields)} values for "
                                    f"fields {fields} of stream {stream!r}, got {values!r}")
        orig = load_class(tdef, cdef.class_path)
        attrs = {"items": items, "outputs": getattr(orig, "outputs", None),
                 "event_time": getattr(orig, "event_time", None)}
        cls = type(f"Mocked{orig.__name__}", (MockedSpout,), attrs)
        cdef.class_path = register_class(cls)
        made.append(cdef.class_path)
    return made


class LocalRun:
    """The tasks of one topology in this process, and the queue between them."""

    def __init__(self, tdef, conf, home, sandbox, errors="raise"):
        if errors not in ("raise", "collect"):
            raise ValueError(f"errors must be 'raise' or 'collect', got {errors!r}")
        self.tdef, self.conf, self.sandbox, self.errors_mode = tdef, conf, sandbox, errors
        self.plan = make_plan(tdef, conf, home)
        self.queue = deque()
        self.emitted, self.outcomes, self.errors = [], [], []
        self.dropped = 0
        self._raised = 0
        with sandbox:
            self.tasks = {}
            for t in sorted(self.plan.packing.task_component):
                self.tasks[t] = Task(self.plan, t, self.route, self.errors.append, self.emitted, self.outcomes)
            for task in self.tasks.values():
                try:
                    task.setup()
                except TopologyError:
                    raise
                except Exception as e:  # noqa: BLE001 - user code in initialize
                    rec = ErrorRecord(task.component, task.task, "initialize", e)
                    raise TopologyTestError(rec) from e
        self.spouts = [t for t in self.tasks.values() if t.kind == "spout"]

    def route(self, src, frames):
        kind, dest, payload = split_frames(frames)
        if kind == CTRL:
            return  # errors are recorded where they are reported; the rest is for a topology master
        if dest not in self.tasks:
            self.dropped += 1
            return
        self.queue.append((dest, kind, payload))

    def check_errors(self):
        if self.errors_mode == "raise" and len(self.errors) > self._raised:
            rec = self.errors[self._raised]
            self._raised = len(self.errors)
            raise TopologyTestError(rec) from rec.error

    def pending_trees(self):
        return {t.task: len(t.inst.tracker) for t in self.spouts if len(t.inst.tracker)}

    def finished(self):
        return not self.queue and all(t.inst.exhausted for t in self.spouts) and not self.pending_trees()

    def step(self):
        """One round: every frame in flight, every spout that may emit, every task's
        timers at the current virtual time. Returns the seconds until a timer is due
        (0: something happened)."""
        progressed = False
        queue, tasks = self.queue, self.tasks
        while queue:
            dest, kind, payload = queue.popleft()
            tasks[dest].deliver(kind, payload)
            self.check_errors()
            progressed = True
        for t in self.spouts:
            inst = t.inst
            if inst.can_emit():
                n = inst.call_next_tuple(inst.emitter)
                inst.report_completed()
                inst.flush()
                self.check_errors()
                progressed = progressed or n > 0
        now = self.sandbox.now()
        wait = float("inf")
        for t in tasks.values():
            wait = min(wait, t.inst.timers(now))
            t.inst.flush()
            self.check_errors()
        return 0.0 if progressed or queue else wait

    def run(self, max_time=DEFAULT_MAX_TIME):
        clock = self.sandbox.clock
        with self.sandbox:
            for _ in range(MAX_STEPS):
                wait = self.step()
                if wait == 0.0:
                    continue
                if self.finished():
                    return
                if clock.mono + wait > max_time:
                    raise TopologyError(self.stuck(max_time))
                clock.advance(max(wait, 0.001))
        raise TopologyError(f"topology {self.tdef.name!r} did not complete in {MAX_STEPS} rounds")

    def stuck(self, max_time):
        why = []
        busy = [f"{t.component}[{t.task}]" for t in self.spouts if not t.inst.exhausted]
        if busy:
            why.append(f"spout tasks not done: {', '.join(busy)} (a spout not given in sources= must call "
                       "self.done() at the end of its input)")
        trees = self.pending_trees()
        if trees:
            why.append("tuple trees still pending: " + ", ".join(
                f"{self.tasks[t].component}[{t}]: {n}" for t, n in trees.items()))
        return (f"topology {self.tdef.name!r} did not complete within {max_time:g} s of virtual time: "
                + "; ".join(why or ["no progress"]))

    def close(self, check=True):
        """Every task stops as in a process (spouts first): ``close()`` is called."""
        with self.sandbox:
            for t in sorted(self.tasks.values(), key=lambda t: (t.kind != "spout", t.task)):
                t.close()
        if check:
            self.check_errors()

    def result(self):
        acked = {c.name: [] for c in self.tdef.spouts}
        failed = {c.name: [] for c in self.tdef.spouts}
        for comp, what, tup_id in self.outcomes:
            (acked if what == "acked" else failed)[comp].append(tup_id)
        counters = {}
        for t in self.tasks.values():
            inst = t.inst
            c = counters.setdefault(t.component, {})
            m = dict(inst.counters, **{"__emit-count": inst.emitter.emit_count,
                                       "__transfer-count": inst.emitter.transfer_count})
            for k, v in m.items():
                c[k] = c.get(k, 0) + v
        return Result(list(self.emitted), acked, failed, list(self.errors), counters,
                      dict(self.plan.packing.component_tasks), self.sandbox.clock.mono, self.dropped, self.conf)


def complete_topology(topology, sources=None, config=None, seed=0, name=None, errors="raise",
                      max_time=DEFAULT_MAX_TIME, start_time=0.0):
    """Run ``topology`` in this process until every spout task is done (mocked spouts
    are done after their last item) and, under at least once, every tuple tree is
    complete; then stop every task (``close()``) and return a :class:`Result`.

    ``topology``: a ``Topology`` subclass, a ``TopologyBuilder``, a ``TopologyDef`` or a
    topology file's path. ``sources``: ``{spout name: [values, ...]}`` (or
    :class:`Emit` items for other streams) replacing those spouts. ``config``: as
    ``--config``, over the topology's. ``seed``: edge ids and shuffle groupings' starts
    (same seed, same input: same run). ``errors="raise"`` raises
    :class:`TopologyTestError` (component, task, tuple) at the first exception in user
    code; ``"collect"`` lets the engine handle it as in a process (logged, the tuple
    failed) and lists it in ``Result.errors``. ``max_time``: seconds of virtual time
    before the run is declared stuck. ``start_time``: ``time.time()`` of the engine at
    the start (processing-time windows and timers).
    """
    tdef = resolve(topology, name)
    made = mock_spouts(tdef, sources)
    home = tempfile.mkdtemp(prefix="bittern-testing-")
    run = None
    try:
        conf = merged_config(tdef, config)
        if conf["topology.reliability.mode"] == EFFECTIVELY_ONCE or any(
                c.config.get("topology.reliability.mode") == EFFECTIVELY_ONCE for c in tdef.components.values()):
            raise TopologyError(f"topology {tdef.name!r}: complete_topology runs ATMOST_ONCE and ATLEAST_ONCE "
                                "topologies; EFFECTIVELY_ONCE needs the topology master's checkpoints: test it in "
                                "real processes (the bittern_run fixture of bittern.testing.pytest_plugin), and "
                                "its bolts with BoltHarness")
        run = LocalRun(tdef, conf, home, Sandbox(seed, start_time), errors)
        try:
            run.run(max_time)
        except BaseException:
            run.close(check=False)
            raise
        run.close()
        return run.result()
    finally:
        for path in made:
            unregister_class(path)
        shutil.rmtree(home, ignore_errors=True)
