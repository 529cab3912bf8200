"""Spout and Bolt base classes, and the ``spec`` that places them in a topology.

The method names and signatures are heronpy's (and streamparse's where the two
agree). The runtime (the instance process) binds ``emit``/``ack``/``fail`` to its
own fast implementations before ``initialize`` is called; calling them outside
a running topology raises a clear error.
"""
from __future__ import annotations

import logging

from ..errors import TopologyError
from .stream import DEFAULT_STREAM, Stream


def _not_running(*_a, **_k):
    raise RuntimeError("emit/ack/fail can only be called inside a running topology")


class StreamRef:
    """``spec["stream"]``: one named output stream of a component spec."""

    def __init__(self, spec, stream):
        self.spec = spec
        self.stream = stream

    def __repr__(self):
        return f"StreamRef({self.spec.name or self.spec.cls.__name__!r}, {self.stream!r})"


class ComponentSpec:
    """A component placed in a topology: class, parallelism, inputs, config."""

    def __init__(self, cls, kind, name=None, par=1, inputs=None, config=None):
        self.cls = cls
        self.kind = kind
        self.name = name
        self.par = par
        self.inputs = inputs
        self.config = dict(config or {})

    def __getitem__(self, stream):
        if not isinstance(stream, str):
            raise TypeError("spec[...] takes a stream name")
        return StreamRef(self, stream)

    def __repr__(self):
        return f"<{self.kind} spec {self.name or '?'}: {self.cls.__qualname__} par={self.par}>"


class Component:
    """Common ground of spouts and bolts."""

    #: Output streams: a list of field names (the ``default`` stream) or of ``Stream``.
    outputs: list = []

    def __init__(self, *args, **kwargs):
        self.logger = logging.getLogger(f"bittern.component.{type(self).__name__}")
        self.emit = _not_running
        self.context = None
        self.config = None

    # -- lifecycle hooks (override) -------------------------------------------------
    def initialize(self, config, context):
        """Called once in the instance process before any tuple."""

    def close(self):
        """Called once when the instance shuts down cleanly."""

    cleanup = close  # Storm's name for the bolt hook

    # -- helpers ---------------------------------------------------------------------
    def log(self, message, level="info"):
        lvl = level if isinstance(level, int) else logging.getLevelName(str(level).upper())
        self.logger.log(lvl if isinstance(lvl, int) else logging.INFO, message)

    @classmethod
    def declared_streams(cls):
        """The component's output streams as ``{name: Stream}``."""
        return declared_streams(cls)


def declared_streams(cls):
    outs = getattr(cls, "outputs", None) or []
    if isinstance(outs, (str, Stream)):
        outs = [outs]
    streams = {}
    plain = []
    for o in outs:
        if isinstance(o, Stream):
            if o.name in streams:
                raise TopologyError(f"component class {cls.__qualname__}: stream {o.name!r} declared twice")
            streams[o.name] = o
        elif isinstance(o, str):
            plain.append(o)
        else:
            raise TopologyError(f"component class {cls.__qualname__}: outputs entries must be field names "
                                f"or Stream objects, got {o!r}")
    if plain:
        if DEFAULT_STREAM in streams:
            raise TopologyError(f"component class {cls.__qualname__}: the default stream is declared twice")
        streams[DEFAULT_STREAM] = Stream(fields=plain)
    return streams


class Spout(Component):
    """A source of tuples. Override ``next_tuple``; call ``self.emit(values, tup_id=...)``."""

    def next_tuple(self):
        """Emit zero or more tuples. Not called while deactivated or backpressured."""

    def ack(self, tup_id):
        """The tuple tree rooted at ``tup_id`` was fully processed."""

    def fail(self, tup_id):
        """The tuple tree rooted at ``tup_id`` failed or timed out; replay is yours."""

    def activate(self):
        """The topology was activated: ``next_tuple`` will be called."""

    def deactivate(self):
        """The topology was deactivated: ``next_tuple`` will not be called."""

    def done(self):
        """Say that this task has emitted everything it ever will (a bounded source).
        ``next_tuple`` is no longer called; acks and fails still arrive, so a
        replaying spout should call this only when nothing is pending. When every
        spout task is done and every tree is complete, ``bittern run --until-done``
        stops the topology."""
        hook = getattr(self, "_runtime_done", None)
        if hook is None:
            raise RuntimeError("done() can only be called inside a running topology")
        hook()

    def emit_watermark(self, ts):
        """Promise that no tuple stamped below ``ts`` (seconds) follows from this task
        (a spout declaring ``event_time = EventTime.manual()``). A watermark never moves
        backwards: a lower one than already sent is ignored."""
        hook = getattr(self, "_runtime_emit_watermark", None)
        if hook is None:
            raise RuntimeError(f"{type(self).__qualname__}.emit_watermark: declare event_time = EventTime.manual() "
                               f"(bittern.EventTime) on the spout, inside a running topology")
        hook(ts)

    @classmethod
    def spec(cls, name=None, par=1, config=None):
        """Place this spout in a class-style topology."""
        return ComponentSpec(cls, "spout", name=name, par=par, config=config)


class Bolt(Component):
    """Processes tuples. Override ``process``; emit with ``self.emit(values, anchors=...)``.

    ``auto_ack``/``auto_anchor``/``auto_fail`` (streamparse's defaults): the input
    tuple is acked when ``process`` returns, failed when it raises, and emits made
    during ``process`` are anchored to it, unless the bolt did so itself.
    """

    auto_ack = True
    auto_anchor = True
    auto_fail = True

    def process(self, tup):
        raise NotImplementedError(f"{type(self).__qualname__}.process(tup) is not implemented")

    def process_tick(self, tup):
        """Called with a tick tuple every ``topology.tick.tuple.freq.secs``."""

    def ack(self, tup):
        """Ack an input tuple (bound by the runtime)."""

    def fail(self, tup):
        """Fail an input tuple (bound by the runtime)."""

    @classmethod
    def spec(cls, name=None, inputs=None, par=1, config=None):
        """Place this bolt in a class-style topology; ``inputs`` maps specs (or
        ``spec["stream"]``) to groupings, or lists specs for shuffle grouping."""
        return ComponentSpec(cls, "bolt", name=name, par=par, inputs=inputs, config=config)
