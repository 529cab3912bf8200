"""The instance side of heronpy components: Bittern spouts and bolts that host one.

:class:`HeronSpout` and :class:`HeronBolt` are ordinary Bittern components (as
``ShellBolt`` is for multilang). Their config names the user's heronpy class
(``heronpy.class``, written by :mod:`bittern.compat.heron`); in ``initialize`` they build
it as Heron's instance does, ``cls(delegate=self)``, and hand it the config and a
heronpy-shaped context. The adapter *is* the delegate heronpy's ``BaseSpout``/``BaseBolt``
call: its ``emit``/``ack``/``fail`` are the ones the instance binds (the fast paths, no
extra layer), ``logger`` is the task's logger, and ``log(message, level)`` takes
heronpy's level names. The runtime then calls the user's ``next_tuple``/``ack``/``fail``/
``activate``/``deactivate`` and ``process``/``process_tick`` directly: the adapter
points its own attributes at them.

Heron's semantics kept: a bolt acks and anchors only when it says so (no auto-ack, no
auto-anchor; a tuple whose ``process`` raised is failed); tick tuples come from
``__system``/``__tick`` and go to ``process_tick`` (``is_tick`` works); the config passed
to ``initialize`` is the task's live config, so a bolt that sets
``topology.tick.tuple.freq.secs`` there (heronpy's window bolts do) gets its ticks; a
stateful component's ``init_state``/``pre_save`` are forwarded with a heronpy-shaped
``State`` (``put``/``get``/``enumerate``/``clear``, and ``state[key]`` as heronpy's window
bolts use it).

heronpy's task hooks (``context.add_task_hook``, and ``topology.auto.task.hooks``) are
called at Heron's points (:mod:`bittern.compat.heron_hooks`); only a component that
added one pays for them: its ``emit``/``ack``/``fail``/``process`` are wrapped then.
heronpy's ``global_metrics`` (``safe_incr``), when the component's code imported it,
is reported as the task's ``__auto__`` metric, as Heron registers it.
"""
from __future__ import annotations

import logging
import sys
from collections import namedtuple

from ..api.component import Bolt, Spout
from ..api.topology import import_path
from ..config import ATLEAST_ONCE
from ..errors import TopologyError
from . import heron_hooks

CLASS_KEY = "heronpy.class"
LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL}
# Bittern grouping kinds -> heronpy.proto.topology_pb2.Grouping names (get_sources)
HERON_GROUPINGS = {"shuffle": "SHUFFLE", "local_or_shuffle": "SHUFFLE", "fields": "FIELDS",
                   "partial_key": "FIELDS", "all": "ALL", "global": "LOWEST", "none": "NONE",
                   "direct": "DIRECT", "custom": "CUSTOM"}

_MISSING = object()
# heronpy's get_sources keys: the shape of its protobuf StreamId
StreamId = namedtuple("StreamId", "id component_name")


class HeronContext:
    """heronpy's ``TopologyContext`` on top of Bittern's (which already has heronpy's
    ``get_task_id``/``get_component_id``/``get_topology_name``/``get_cluster_config``/
    ``get_component_tasks``/``register_metric``; anything else is looked up there)."""

    def __init__(self, ctx, host=None):
        self._ctx = ctx
        self._host = host

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def get_sources(self, component_id):
        """``{StreamId(stream, component): gtype}`` with heronpy's grouping constants."""
        try:
            from heronpy.proto.topology_pb2 import Grouping as G
            value = G.Value
        except ImportError:  # (heronpy is always there when a heronpy component runs)
            def value(name):
                return name
        return {StreamId(stream, comp): value(HERON_GROUPINGS.get(g.kind, "SHUFFLE"))
                for (comp, stream), g in self._ctx.get_sources(component_id).items()}

    def get_this_sources(self):
        return self.get_sources(self._ctx.component)

    def register_metric(self, name, metric, time_bucket_in_sec=None):
        return self._ctx.register_metric(name, metric, time_bucket_in_sec)

    def add_task_hook(self, task_hook):
        """Heron's: ``task_hook`` (an ``ITaskHook``) is called at this task's emits, acks,
        fails and executes from now on (its ``prepare`` after ``initialize``)."""
        if self._host is None:
            raise RuntimeError(f"component {self._ctx.component!r}: add_task_hook() outside a running task")
        self._host.add_task_hook(task_hook)

    def __repr__(self):
        return f"<heronpy context of {self._ctx!r}>"


class HeronState:
    """heronpy's ``State`` interface (``put``/``get``/``enumerate``/``clear``) on a
    Bittern ``State`` (checkpointed under EFFECTIVELY_ONCE)."""

    def __init__(self, state):
        self._state = state

    def put(self, key, value):
        self._state.put(key, value)

    def get(self, key):
        return self._state.get(key)

    def enumerate(self):
        return list(self._state.items())

    def clear(self):
        for key, _ in list(self._state.items()):
            self._state.delete(key)

    # heronpy's window bolts use the state as a dict
    def __getitem__(self, key):
        value = self._state.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key, value):
        self._state.put(key, value)

    def __contains__(self, key):
        return self._state.get(key, _MISSING) is not _MISSING

    def __getattr__(self, name):
        return getattr(self._state, name)

    def __str__(self):  # heronpy's HashMapState prints as its dict (Heron's examples log it)
        return str(dict(self._state.items()))


def user_class(config, kind):
    """The heronpy class named by the component's config."""
    path = config.get(CLASS_KEY)
    if not path:
        raise TopologyError(f"a heronpy {kind} adapter needs {CLASS_KEY!r} in its config "
                            "(it is set when a heronpy topology is translated)")
    return import_path(path)


class _HeronHost:
    """What HeronSpout and HeronBolt share: building the user's object, the delegate's
    ``log``, state and close forwarding."""

    heron = None
    hooks = None  # heron_hooks.TaskHooks once a hook is added
    _hooked = False  # the wrappers are in place
    _ready = False  # initialize returned

    def _start(self, config, context, kind):
        cls = user_class(config, kind)
        self.heron = obj = cls(delegate=self)
        if callable(getattr(obj, "init_state", None)):
            self.init_state = lambda state: obj.init_state(HeronState(state))
            if callable(getattr(obj, "pre_save", None)):
                self.pre_save = obj.pre_save
        self._task_context, self.heron_context = context, HeronContext(context, self)
        hctx = self.heron_context
        auto = config.get(heron_hooks.AUTO_HOOKS_KEY)
        if auto:  # as Heron's context does, before initialize
            for hook in heron_hooks.auto_hooks(auto, context.component, import_path):
                self.add_task_hook(hook)
        obj.initialize(config, hctx)
        gm = sys.modules.get("heronpy.api.global_metrics")
        if gm is not None:  # Heron registers it for every task (global_metrics.init)
            context.register_metric(gm.root_name, gm.metricsContainer)
        return obj

    def _ready_hooks(self):
        """After initialize: wrap what the hooks watch, then their ``prepare``."""
        self._ready = True
        if self.hooks:
            self._hook_up()
            self.hooks.prepare(self.heron_context.get_cluster_config(), self.heron_context)

    def add_task_hook(self, hook):
        if self.hooks is None:
            ctx = self._task_context
            self.hooks = heron_hooks.TaskHooks(ctx.get_task_id(), ctx.get_component_id())
        self.hooks.add(hook)
        if self._ready:  # added after initialize (never prepared, as in Heron)
            self._hook_up()

    def _hook_up(self):
        raise NotImplementedError

    def log(self, message, level=None):
        """heronpy's ``delegate.log``: levels trace (=debug), debug, info, warn, error."""
        lvl = level if isinstance(level, int) else LEVELS.get(str(level or "info").lower(), logging.INFO)
        self.logger.log(lvl, message)

    def close(self):
        if self.hooks:
            self.hooks.clean_up()
        hook = getattr(self.heron, "close", None) or getattr(self.heron, "cleanup", None)
        if callable(hook):
            hook()


class HeronSpout(_HeronHost, Spout):
    """Hosts a ``heronpy.api.spout.spout.Spout``; ``emit`` (bound by the instance) is
    heronpy's ``delegate.emit(tup, tup_id, stream, direct_task, need_task_ids)``."""

    outputs = []

    def initialize(self, config, context):
        obj = self._start(config, context, "spout")
        self.next_tuple = obj.next_tuple
        self.ack, self.fail = obj.ack, obj.fail
        self.activate, self.deactivate = obj.activate, obj.deactivate
        self._ready_hooks()

    def _hook_up(self):
        if self._hooked:
            return
        self._hooked = True
        h, obj = self.hooks, self.heron
        track = self.config.get("topology.reliability.mode") == ATLEAST_ONCE
        self.emit = heron_hooks.spout_emit(self.emit, h, track)
        self.ack = heron_hooks.spout_outcome(obj.ack, h.spout_ack)
        self.fail = heron_hooks.spout_outcome(obj.fail, h.spout_fail)


class HeronBolt(_HeronHost, Bolt):
    """Hosts a ``heronpy.api.bolt.bolt.Bolt``; ``emit``/``ack``/``fail`` (bound by the
    instance) are heronpy's ``delegate.emit(tup, stream, anchors, direct_task,
    need_task_ids)``, ``delegate.ack(tup)`` and ``delegate.fail(tup)``."""

    outputs = []
    auto_ack = False  # a heronpy bolt acks itself
    auto_anchor = False  # and anchors only to what it passes as anchors
    auto_fail = True  # a tuple whose process() raised is failed (Heron would restart the task)

    def initialize(self, config, context):
        obj = self._start(config, context, "bolt")
        self.process, self.process_tick = obj.process, obj.process_tick
        self._ready_hooks()

    def _hook_up(self):
        if self._hooked:
            return
        self._hooked = True
        heron_hooks.hook_bolt(self, self.heron.process)


__all__ = ["CLASS_KEY", "HeronBolt", "HeronContext", "HeronSpout", "HeronState", "StreamId"]
