"""Time in the user API: how a spout's tuples are timed, windows, windowed bolts, timers.

Timestamps are seconds (int or float; epoch seconds when windows must line up with
the calendar: windows are aligned to 0, as Flink's). A *watermark* ``w`` is a promise
that no tuple with a timestamp below ``w`` will arrive any more; a tuple below the
watermark is *late*. The semantics are in README.md, "Time and windows".

Spouts declare how their tuples are timed::

    class Clicks(Spout):
        outputs = ["user", "ts"]
        event_time = EventTime("ts", lag=5.0)      # bounded out-of-orderness of 5 s
        # EventTime(fn=lambda values: values[1] / 1000, lag=5.0)
        # EventTime.manual(): the spout calls self.emit_watermark(ts) itself

A spout that declares nothing is on processing time and sends no watermarks.

Windowed bolts (Storm's names where Storm has them)::

    class Counts(AggregatingWindowBolt):
        outputs = ["word", "start", "end", "count"]
        window = Window.tumbling(Duration(60))     # or Window.sliding(10, 1), Window.session(30),
        timestamp_field = "ts"                     # Window.tumbling(Count(100)); None: processing time
        allowed_lateness = 10.0
        late_stream = "late"
        def create(self): return 0
        def add(self, acc, tup): return acc + 1
        def merge(self, a, b): return a + b
        def result(self, acc): return acc
"""
from __future__ import annotations

import math
import numbers

from ..errors import TopologyError
from .component import Bolt
from .stream import Stream

#: Fields of a windowed bolt's late stream (Storm's "late_tuple", plus why).
LATE_FIELDS = ("late_tuple", "timestamp", "reason")


def _is_positive(value):
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value) and value > 0


class Duration:
    """A window length or interval in seconds of (event or processing) time. Checked
    when the topology is built (the error names the component)."""

    kind = "duration"
    __slots__ = ("secs",)

    def __init__(self, secs):
        self.secs = secs

    @classmethod
    def seconds(cls, n):
        return cls(n)

    @classmethod
    def minutes(cls, n):
        return cls(n * 60 if _is_positive(n) else n)

    @classmethod
    def milliseconds(cls, n):
        return cls(n / 1000.0 if _is_positive(n) else n)

    def problem(self):
        return None if _is_positive(self.secs) else f"a Duration must be a positive number of seconds, got {self.secs!r}"

    def to_dict(self):
        return {"kind": "duration", "value": self.secs}

    def __eq__(self, other):
        return isinstance(other, Duration) and other.secs == self.secs

    def __repr__(self):
        return f"Duration({self.secs!r})"


class Count:
    """A window length or interval in tuples (per key, in arrival order)."""

    kind = "count"
    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n

    @classmethod
    def of(cls, n):
        return cls(n)

    def problem(self):
        ok = not isinstance(self.n, bool) and isinstance(self.n, int) and self.n >= 1
        return None if ok else f"a Count must be a whole number >= 1, got {self.n!r}"

    def to_dict(self):
        return {"kind": "count", "value": self.n}

    def __eq__(self, other):
        return isinstance(other, Count) and other.n == self.n

    def __repr__(self):
        return f"Count({self.n!r})"


def _length(x, what):
    if isinstance(x, (Duration, Count)):
        p = x.problem()
        if p:
            raise TopologyError(f"{what}: {p}")
        return x
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        if not _is_positive(x):
            raise TopologyError(f"{what} must be positive, got {x!r}")
        return Duration(x)
    raise TopologyError(f"{what} must be a Duration, a Count or a number of seconds, got {x!r}")


class Window:
    """A window specification: ``Window.tumbling(length)``, ``Window.sliding(length,
    every)``, ``Window.session(gap)``. Lengths are :class:`Duration`, :class:`Count` or
    a number of seconds. A bad one is reported when the topology is built, naming the
    component (``error``)."""

    KINDS = ("tumbling", "sliding", "session")
    __slots__ = ("kind", "length", "every", "error")

    def __init__(self, kind, length, every=None):
        self.kind, self.length, self.every, self.error = kind, length, every, None
        try:
            self._validate()
        except TopologyError as e:
            self.error = str(e)

    def _validate(self):
        kind = self.kind
        if kind not in self.KINDS:
            raise TopologyError(f"unknown window kind {kind!r} (kinds: {', '.join(self.KINDS)})")
        self.length = _length(self.length, f"the {kind} window's {'gap' if kind == 'session' else 'length'}")
        if kind == "tumbling":
            self.every = self.length
        elif kind == "session":
            if not isinstance(self.length, Duration):
                raise TopologyError(f"a session window's gap must be a Duration, got {self.length!r}")
            self.every = None
        else:
            every = _length(self.every, "the sliding window's interval")
            if type(every) is not type(self.length):
                raise TopologyError(f"a sliding window's length and interval must both be durations or both "
                                    f"counts, got {self.length!r} every {every!r}")
            if _size(every) > _size(self.length):
                raise TopologyError(f"a sliding window's interval ({_size(every)}) is longer than the "
                                    f"window ({_size(self.length)})")
            self.every = every

    @classmethod
    def tumbling(cls, length):
        return cls("tumbling", length)

    @classmethod
    def sliding(cls, length, every):
        return cls("sliding", length, every)

    @classmethod
    def session(cls, gap):
        return cls("session", gap)

    @property
    def by_count(self):
        return isinstance(self.length, Count)

    @property
    def size(self):
        return _size(self.length)

    @property
    def slide(self):
        return _size(self.every) if self.every is not None else None

    def to_dict(self):
        return {"kind": self.kind, "length": self.length.to_dict(),
                "every": self.every.to_dict() if self.every is not None else None}

    @staticmethod
    def from_dict(d):
        def dec(x):
            return None if x is None else (Count(x["value"]) if x["kind"] == "count" else Duration(x["value"]))
        w = Window.__new__(Window)
        w.kind, w.length, w.every, w.error = d["kind"], dec(d["length"]), dec(d["every"]), None
        return w

    def __repr__(self):
        extra = f", every={self.every!r}" if self.kind == "sliding" else ""
        return f"Window.{self.kind}({self.length!r}{extra})"


def _size(x):
    return x.secs if isinstance(x, Duration) else x.n


class EventTime:
    """How a spout's tuples are timed: a timestamp ``field`` of the output (or ``fn``
    of the values) and ``lag``, the most a tuple may come after a later-stamped one
    (bounded out-of-orderness, seconds). The spout's watermark is the largest
    timestamp it emitted minus ``lag``. ``EventTime.manual()``: the spout emits its
    own watermarks with ``self.emit_watermark(ts)`` (MillWheel's injectors)."""

    __slots__ = ("field", "fn", "lag", "manual_mode")

    def __init__(self, field=None, lag=0.0, fn=None):
        if (field is None) == (fn is None):
            raise TopologyError("EventTime needs a timestamp field or a function of the values (one of them)")
        if field is not None and (not isinstance(field, str) or not field):
            raise TopologyError(f"EventTime: the timestamp field must be a field name, got {field!r}")
        if fn is not None and not callable(fn):
            raise TopologyError(f"EventTime: fn must be callable, got {fn!r}")
        if isinstance(lag, bool) or not isinstance(lag, numbers.Real) or not math.isfinite(lag) or lag < 0:
            raise TopologyError(f"EventTime: lag must be a number of seconds >= 0, got {lag!r}")
        self.field, self.fn, self.lag, self.manual_mode = field, fn, float(lag), False

    @classmethod
    def manual(cls):
        et = cls.__new__(cls)
        et.field, et.fn, et.lag, et.manual_mode = None, None, 0.0, True
        return et

    def __repr__(self):
        if self.manual_mode:
            return "EventTime.manual()"
        return f"EventTime({self.field or self.fn!r}, lag={self.lag})"


class TupleWindow:
    """What ``WindowedBolt.process_window`` gets (Storm's ``TupleWindow``): ``tuples``
    (everything in the window, in arrival order; after session windows merged, one
    session's after the other's), ``new`` (arrived since this window
    last fired), ``expired`` (were in the previous window of this key and left),
    ``start``/``end`` (times: ``[start, end)``; for count windows the numbers of the key's
    tuples, ``(start, end]``),
    ``key`` (the fields-grouping key, None for a bolt that is not keyed) and
    ``late`` (True when a late tuple made an already fired window fire again)."""

    __slots__ = ("tuples", "new", "expired", "start", "end", "key", "late")

    def __init__(self, tuples, new, expired, start, end, key=None, late=False):
        self.tuples, self.new, self.expired = tuples, new, expired
        self.start, self.end, self.key, self.late = start, end, key, late

    # Storm's TupleWindow methods
    def get(self):
        return self.tuples

    def getNew(self):  # noqa: N802 - Storm's name
        return self.new

    def getExpired(self):  # noqa: N802
        return self.expired

    def getStartTimestamp(self):  # noqa: N802
        return self.start

    def getEndTimestamp(self):  # noqa: N802
        return self.end

    get_new, get_expired = getNew, getExpired

    def __len__(self):
        return len(self.tuples)

    def __iter__(self):
        return iter(self.tuples)

    def __repr__(self):
        return f"<TupleWindow key={self.key!r} [{self.start}, {self.end}) {len(self.tuples)} tuples>"


class WindowSpan:
    """The window an aggregate belongs to: ``start``, ``end`` and ``key``."""

    __slots__ = ("start", "end", "key", "late")

    def __init__(self, start, end, key=None, late=False):
        self.start, self.end, self.key, self.late = start, end, key, late

    def __repr__(self):
        return f"<window key={self.key!r} [{self.start}, {self.end})>"


class _WindowedBase(Bolt):
    """What both windowed bolts declare. The runtime (``instance/windowing.py``) feeds
    tuples to the window operator and fires windows from timers; ``process`` is not
    to be overridden."""

    #: ``Window.tumbling(...)``, ``Window.sliding(...)`` or ``Window.session(...)``
    window = None
    #: the input field holding a tuple's event time (seconds); None: processing time
    timestamp_field = None
    #: or a function of the tuple's values giving its event time (instead of the field)
    timestamp_fn = None
    #: Storm's lag: for inputs whose upstream sends no watermarks, the watermark of each
    #: upstream task is the largest timestamp it sent minus this (seconds)
    lag = 0.0
    #: how long after its end a window still takes late tuples (and fires again), seconds
    allowed_lateness = 0.0
    #: the stream tuples later than that go to (fields LATE_FIELDS); None: counted only
    late_stream = None
    auto_ack = False  # tuples are acked when they leave their last window ...
    auto_anchor = False  # ... and what a window emits is anchored to its tuples

    @classmethod
    def event_time(cls):
        return cls.timestamp_field is not None or cls.timestamp_fn is not None

    @classmethod
    def window_spec(cls, where):
        """Validate the class's window settings; returns the Window."""
        w = cls.window
        if not isinstance(w, Window):
            raise TopologyError(f"{where}: a windowed bolt needs window = Window.tumbling/sliding/session(...), "
                                f"got {w!r}")
        if w.error:
            raise TopologyError(f"{where}: {w.error}")
        if cls.timestamp_field is not None and cls.timestamp_fn is not None:
            raise TopologyError(f"{where}: set timestamp_field or timestamp_fn, not both")
        if cls.timestamp_field is not None and (not isinstance(cls.timestamp_field, str) or not cls.timestamp_field):
            raise TopologyError(f"{where}: timestamp_field must be a field name, got {cls.timestamp_field!r}")
        for name in ("lag", "allowed_lateness"):
            v = getattr(cls, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
                raise TopologyError(f"{where}: {name} must be a number of seconds >= 0, got {v!r}")
        if cls.late_stream is not None and (not isinstance(cls.late_stream, str) or not cls.late_stream):
            raise TopologyError(f"{where}: late_stream must be a stream name, got {cls.late_stream!r}")
        return w

    @classmethod
    def late_stream_decl(cls):
        return Stream(fields=LATE_FIELDS, name=cls.late_stream) if cls.late_stream else None

    def process(self, tup):  # replaced by the runtime
        raise RuntimeError("a windowed bolt's process() is bound by the runtime")

    def on_timer(self, key, ts, kind):
        """A timer this bolt set with ``self.timers.set`` fired."""


class WindowedBolt(_WindowedBase):
    """Storm's ``BaseWindowedBolt``: the window's tuples are kept and handed to
    ``process_window(window)`` (a :class:`TupleWindow`) when it fires. Emits made
    there are anchored to the window's tuples (at least once), which are acked when
    they leave their last window."""

    def process_window(self, window):
        raise NotImplementedError(f"{type(self).__qualname__}.process_window(window) is not implemented")

    execute = None  # (Storm's name is process_window here; a bolt defining execute is told so)


class AggregatingWindowBolt(_WindowedBase):
    """Incremental aggregation (Flink's ``aggregate``): one accumulator per (key,
    window) instead of the tuples. ``create()`` a new accumulator, ``add(acc, tup)``
    returns the updated one, ``merge(a, b)`` (session windows merging, and a rescale of a
    bolt that is not keyed under exactly once), ``result(acc)``.
    ``emit_window(key, window, result)`` emits ``[key, start, end, result]`` unless
    overridden (a key of several fields is a tuple, emitted as its values).
    Accumulators under EFFECTIVELY_ONCE are checkpointed, so they must be state
    values (numbers, strings, lists, dicts, tuples)."""

    def create(self):
        return None

    def add(self, acc, tup):
        raise NotImplementedError(f"{type(self).__qualname__}.add(acc, tup) is not implemented")

    def merge(self, a, b):
        raise NotImplementedError(f"{type(self).__qualname__}.merge(a, b) is not implemented (session "
                                  f"windows merge their accumulators, and so does a rescale of a bolt "
                                  f"that is not keyed)")

    def result(self, acc):
        return acc

    def emit_window(self, key, window, result):
        if isinstance(key, tuple):
            self.emit([*key, window.start, window.end, result])
        else:
            self.emit([key, window.start, window.end, result])


class CountWindowBolt(AggregatingWindowBolt):
    """Counts tuples per key and window: a ready-made aggregate."""

    def create(self):
        return 0

    def add(self, acc, tup):
        return acc + 1

    def merge(self, a, b):
        return a + b


def is_windowed(cls):
    return isinstance(cls, type) and issubclass(cls, _WindowedBase)


def is_aggregating(cls):
    return isinstance(cls, type) and issubclass(cls, AggregatingWindowBolt)
