"""heronpy's task hooks (``context.add_task_hook(hook)``) for heronpy components.

A hook (heronpy's ``ITaskHook``) is called where Heron's Python instance calls it, with
heronpy's info objects filled as Heron fills them:

* ``prepare(conf, context)``: once, after the component's ``initialize``;
* ``emit``: every ``emit`` of a spout or bolt (after the tuple is sent), with
  ``EmitInfo(values, stream_id, task_id, out_tasks=None)``;
* ``spout_ack`` / ``spout_fail``: after the spout's own ``ack(tup_id)`` / ``fail``, with
  ``SpoutAckInfo(message_id, spout_task_id, complete_latency_ms)`` / ``SpoutFailInfo``;
* ``bolt_execute``: after ``process(tup)`` returned (not for tick tuples), with
  ``BoltExecuteInfo(heron_tuple, executing_task_id, execute_latency_ms)``;
* ``bolt_ack`` / ``bolt_fail``: when the bolt acks / fails a tuple, with
  ``BoltAckInfo(heron_tuple, acking_task_id, process_latency_ms)`` / ``BoltFailInfo``;
* ``clean_up()``: on a clean shutdown, before the component's ``close``/``cleanup``.

Latencies are Heron's: measured in nanoseconds and given in milliseconds (``ns *
NS_TO_MS``): a spout's complete latency from its ``emit`` to the ack (0 when nothing is
tracked, at most once, as Heron's immediate acks), a bolt's execute latency is the
``process`` call, its process and fail latencies run from the moment the tuple was
handed to ``process``. Hooks named in ``topology.auto.task.hooks`` (``module.Class``,
built without arguments) are added before ``initialize``, as Heron adds them.

Nothing here runs unless a hook was added: the adapters (``heron_runtime``) put these
wrappers in front of the instance's ``emit``/``ack``/``fail`` and the component's
``process`` only then.
"""
from __future__ import annotations

import time
from collections import namedtuple

from ..api.stream import DEFAULT_STREAM

NS_TO_MS = 0.000001  # Heron's system_constants.NS_TO_MS
SEC_TO_NS = 1000000000
AUTO_HOOKS_KEY = "topology.auto.task.hooks"  # heronpy.api.api_constants.TOPOLOGY_AUTO_TASK_HOOKS
HELD_MAX = 10000  # receipt times kept for tuples a bolt holds past process() (then: latency 0)
HOOK_METHODS = ("prepare", "clean_up", "emit", "spout_ack", "spout_fail", "bolt_execute", "bolt_ack",
                "bolt_fail")


def _heronpy_types():
    """heronpy's ITaskHook and info namedtuples; the same shapes when heronpy is not
    importable (the unit tests run without it)."""
    try:
        from heronpy.api import task_hook as th
        return (th.ITaskHook, th.EmitInfo, th.SpoutAckInfo, th.SpoutFailInfo, th.BoltExecuteInfo,
                th.BoltAckInfo, th.BoltFailInfo)
    except ImportError:
        return (None, namedtuple("EmitInfo", "values stream_id task_id out_tasks"),
                namedtuple("SpoutAckInfo", "message_id spout_task_id complete_latency_ms"),
                namedtuple("SpoutFailInfo", "message_id spout_task_id fail_latency_ms"),
                namedtuple("BoltExecuteInfo", "heron_tuple executing_task_id execute_latency_ms"),
                namedtuple("BoltAckInfo", "heron_tuple acking_task_id process_latency_ms"),
                namedtuple("BoltFailInfo", "heron_tuple failing_task_id fail_latency_ms"))


class TaskHooks:
    """The hooks of one task, and the calls Heron's ``TopologyContextImpl.invoke_hook_*``
    make (latencies given in ns, passed on in ms)."""

    def __init__(self, task_id, component):
        self.task_id, self.component = task_id, component
        self.hooks = []
        (self._base, self._emit, self._spout_ack, self._spout_fail, self._bolt_execute, self._bolt_ack,
         self._bolt_fail) = _heronpy_types()

    def __bool__(self):
        return bool(self.hooks)

    def add(self, hook):
        ok = isinstance(hook, self._base) if self._base is not None else \
            all(callable(getattr(hook, m, None)) for m in HOOK_METHODS)
        if not ok:
            raise TypeError(f"component {self.component!r}: add_task_hook() takes an ITaskHook "
                            f"(heronpy.api.task_hook), got {type(hook).__name__}")
        self.hooks.append(hook)

    def prepare(self, conf, context):
        for h in self.hooks:
            h.prepare(conf, context)

    def clean_up(self):
        for h in self.hooks:
            h.clean_up()

    def emit(self, values, stream_id):
        info = self._emit(values=values, stream_id=stream_id, task_id=self.task_id, out_tasks=None)
        for h in self.hooks:
            h.emit(info)

    def spout_ack(self, message_id, latency_ns):
        info = self._spout_ack(message_id=message_id, spout_task_id=self.task_id,
                               complete_latency_ms=latency_ns * NS_TO_MS)
        for h in self.hooks:
            h.spout_ack(info)

    def spout_fail(self, message_id, latency_ns):
        info = self._spout_fail(message_id=message_id, spout_task_id=self.task_id,
                                fail_latency_ms=latency_ns * NS_TO_MS)
        for h in self.hooks:
            h.spout_fail(info)

    def bolt_execute(self, tup, latency_ns):
        info = self._bolt_execute(heron_tuple=tup, executing_task_id=self.task_id,
                                  execute_latency_ms=latency_ns * NS_TO_MS)
        for h in self.hooks:
            h.bolt_execute(info)

    def bolt_ack(self, tup, latency_ns):
        info = self._bolt_ack(heron_tuple=tup, acking_task_id=self.task_id,
                              process_latency_ms=latency_ns * NS_TO_MS)
        for h in self.hooks:
            h.bolt_ack(info)

    def bolt_fail(self, tup, latency_ns):
        info = self._bolt_fail(heron_tuple=tup, failing_task_id=self.task_id,
                               fail_latency_ms=latency_ns * NS_TO_MS)
        for h in self.hooks:
            h.bolt_fail(info)


def auto_hooks(value, component, resolve):
    """The hooks ``topology.auto.task.hooks`` names (a list of ``module.Class``, or one
    such string), built without arguments; ``resolve(path)`` imports ``module:Class``."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)):
        raise TypeError(f"component {component!r}: {AUTO_HOOKS_KEY} must be a list of class names "
                        f"(module.Class), got {type(value).__name__}")
    out = []
    for name in names:
        if isinstance(name, type):
            out.append(name())
            continue
        mod, _, cls = str(name).rpartition(".")
        if not mod:
            raise TypeError(f"component {component!r}: {AUTO_HOOKS_KEY}: {name!r} is not module.Class")
        out.append(resolve(f"{mod}:{cls}")())
    return out


# --------------------------------------------------------------------------------------
# The wrappers (installed only when a hook was added)
# --------------------------------------------------------------------------------------

class Sent:
    """A spout's tuple id as the instance carries it while hooks time it: the user's id
    and when it was emitted. The spout itself only ever sees its own id."""

    __slots__ = ("tup_id", "at")

    def __init__(self, tup_id, at):
        self.tup_id, self.at = tup_id, at

    def __repr__(self):
        return repr(self.tup_id)


def spout_emit(emit, hooks, track, clock=time.monotonic):
    """heronpy's ``delegate.emit`` for a spout with hooks: ``track`` (acking on) stamps
    the id with its emit time, for the complete latency."""
    def hooked_emit(tup, tup_id=None, stream=DEFAULT_STREAM, direct_task=None, need_task_ids=False):
        if track and tup_id is not None:
            tup_id = Sent(tup_id, clock())
        result = emit(tup, tup_id, stream, direct_task, need_task_ids)
        hooks.emit(tup, stream)
        return result
    return hooked_emit


def spout_outcome(user_fn, hook_fn, clock=time.monotonic):
    """The spout's ``ack``/``fail`` as the instance calls it: the user's first, with the
    user's id, then the hook with the latency since the emit (0 for an untracked id)."""
    def outcome(tup_id):
        if type(tup_id) is Sent:
            latency_ns, tup_id = (clock() - tup_id.at) * SEC_TO_NS, tup_id.tup_id
        else:
            latency_ns = 0.0
        user_fn(tup_id)
        hook_fn(tup_id, latency_ns)
    return outcome


class ReceiptTimes:
    """When each input was handed to ``process``, until the bolt acks or fails it: the
    current one, and up to ``limit`` held past ``process`` (the oldest forgotten first;
    a bolt that never acks, at most once, must not grow this)."""

    def __init__(self, limit=HELD_MAX):
        self.limit = limit
        self.current = None  # [tup, received] during process()
        self.held = {}  # id(tup) -> (tup, received)

    def begin(self, tup, now):
        self.current = cur = [tup, now]
        return cur

    def end(self, cur):
        """``process`` returned: a tuple it neither acked nor failed is held."""
        if self.current is cur:
            self.current = None
            held = self.held
            held[id(cur[0])] = (cur[0], cur[1])
            if len(held) > self.limit:
                del held[next(iter(held))]

    def drop(self, cur):
        """``process`` raised: the instance fails the tuple itself."""
        if self.current is cur:
            self.current = None

    def take(self, tup):
        """When ``tup`` was received, or None (not seen, or forgotten). (An entry holds
        its tuple, so no other object has its ``id`` meanwhile.)"""
        cur = self.current
        if cur is not None and cur[0] is tup:
            self.current = None
            return cur[1]
        h = self.held.pop(id(tup), None)
        return h[1] if h is not None else None


def bolt_process(process, hooks, times, clock=time.monotonic):
    """The user's ``process`` with ``bolt_execute`` after it (as Heron: not when it raised)."""
    def hooked_process(tup):
        t0 = clock()
        cur = times.begin(tup, t0)
        try:
            process(tup)
        except BaseException:
            times.drop(cur)
            raise
        times.end(cur)
        hooks.bolt_execute(tup, (clock() - t0) * SEC_TO_NS)
    return hooked_process


def bolt_outcome(engine_fn, hook_fn, times, clock=time.monotonic):
    """The bolt's ``ack``/``fail`` (the instance's), then the hook with the latency since
    the tuple was handed to ``process``."""
    def outcome(tup):
        engine_fn(tup)
        received = times.take(tup)
        hook_fn(tup, (clock() - received) * SEC_TO_NS if received is not None else 0.0)
    return outcome


def bolt_emit(emit, hooks):
    """heronpy's ``delegate.emit`` for a bolt with hooks."""
    def hooked_emit(tup, stream=DEFAULT_STREAM, anchors=None, direct_task=None, need_task_ids=False):
        result = emit(tup, stream, anchors, direct_task, need_task_ids)
        hooks.emit(tup, stream)
        return result
    return hooked_emit

def hook_bolt(bolt, process):
    """Wrap ``bolt``'s per-tuple path with the hooks' calls, once a hook is added: ``process``
    (heronpy's, or the window runtime's) becomes ``bolt.process``; its ``ack``, ``fail`` and
    ``emit`` are wrapped in place."""
    h, times = bolt.hooks, ReceiptTimes()
    bolt.process = bolt_process(process, h, times)
    bolt.ack = bolt_outcome(bolt.ack, h.bolt_ack, times)
    bolt.fail = bolt_outcome(bolt.fail, h.bolt_fail, times)
    bolt.emit = bolt_emit(bolt.emit, h)


__all__ = ["AUTO_HOOKS_KEY", "ReceiptTimes", "Sent", "TaskHooks", "auto_hooks", "bolt_emit", "bolt_outcome", "hook_bolt",
           "bolt_process", "spout_emit", "spout_outcome"]
