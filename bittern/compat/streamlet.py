"""heronpy's Streamlet API (``heronpy.streamlet``, 0.20.5) under Bittern.

A file that builds a ``Builder()`` and calls ``Runner().run(name, config, builder)``
runs unchanged: heronpy's ``Runner.run`` builds a ``TopologyBuilder`` from the
streamlets (``builder.build(topology_builder)``) and ends with
``topology_builder.build_and_submit()``, which :mod:`bittern.compat.heron` already
intercepts (at module level and in the ``__main__`` block). The TopologyBuilder then
holds heronpy's own streamlet spouts and bolts (``heronpy.streamlet.impl.*``), which
the heronpy translation runs like any heronpy component. This module is what that
translation asks about them:

* :func:`component_class`: the Bittern component that hosts a streamlet component.
  Most are heronpy's own classes, run by ``HeronSpout``/``HeronBolt`` as in Heron. The
  windowed ones (``reduce_by_window``, ``reduce_by_key_and_window``, the joins:
  heronpy's ``SlidingWindowBolt`` subclasses) run on Bittern's time layer: a
  processing-time ``Window.sliding(duration, slide)`` (``Window.tumbling`` when they are
  equal) whose firing hands the window's tuples to heronpy's own ``processWindow``.
  Three of heronpy's classes are replaced by subclasses that fix what breaks in them
  (see :data:`FIXED`).
* :func:`grouping`: heronpy's key groupings (``ReduceGrouping``, ``JoinGrouping``) hash
  the key with Python's salted ``hash()``, so two emitting processes send one key to
  different tasks; here they hash it with Bittern's stable hash. ``reduce_by_window``'s
  grouping is a copy of the keyed one (it refuses anything but pairs); here every
  element goes to one task (global), so each window has one result. A ``repartition``
  function is called as heronpy's ``RepartitionCustomGrouping`` calls it (with the
  number of partitions; an index or a list of them, each taken modulo the number of
  target tasks, sorted); ``repartition(n)`` without a function (and ``clone``) is a
  shuffle.
* :func:`install`: fixes what heronpy 0.20.5 refuses while a streamlet file runs
  (``repartition`` asks ``inspect.getargspec``, gone in Python 3.11, and could never
  pass its own arity check; ``outer_join`` is refused by ``JoinStreamlet``'s own type
  check; ``consume`` passes its function to a ``ConsumeStreamlet`` that takes none, and
  its bolt would not get it), and names the streamlet when the graph cannot be built.

Bounded sources (a Bittern addition; Heron has no end of input): a ``Generator`` whose
``get()`` or a supplier function that raises ``StopIteration`` ends its spout task
(``done()``), so ``bittern run --until-done`` can stop.

heronpy is imported only on demand (:func:`__getattr__`), so the pure pieces (groupings,
the window hosts' classes) import without it.
"""
from __future__ import annotations

import base64
import contextlib
import io
import pickle
import re
import zlib
from collections import namedtuple
from collections.abc import Iterable

from ..api.stream import Grouping, GroupingSpec
from ..api.topology import import_path
from ..api.windows import Window, WindowedBolt
from ..errors import TopologyError
from ..hashing import stable_hash
from . import heron_hooks
from .heron_runtime import HeronContext, _HeronHost, user_class

PREFIX = "heronpy.streamlet."
IMPL = "heronpy.streamlet.impl."
# heronpy's windowed streamlet bolts (SlidingWindowBolt subclasses): on Bittern's windows
WINDOWED = {IMPL + "reducebywindowbolt.ReduceByWindowBolt", IMPL + "reducebykeyandwindowbolt.ReduceByKeyAndWindowBolt",
            IMPL + "joinbolt.JoinBolt"}
DURATION_KEY = "slidingwindowbolt_duration_secs"  # SlidingWindowBolt.WINDOW_DURATION_SECS
SLIDE_KEY = "slidingwindowbolt_slideinterval_secs"  # SlidingWindowBolt.WINDOW_SLIDEINTERVAL_SECS
# heronpy classes replaced by a subclass of this module (the fix it carries)
FIXED = {
    IMPL + "transformbolt.TransformBolt": "TransformBolt",  # process() calls self.transform_operator: AttributeError
    IMPL + "generatorspout.GeneratorSpout": "GeneratorSpout",  # + StopIteration from get() ends the source
    IMPL + "supplierspout.SupplierSpout": "SupplierSpout",  # + StopIteration from the supplier ends the source
}
# heronpy's key groupings (by class path): the key is userdata[0] of a (key, value) element
KEY_GROUPINGS = {IMPL + "reducebykeyandwindowbolt.ReduceGrouping", IMPL + "joinbolt.JoinGrouping"}
# reduce_by_window's (a copy of the keyed one: it takes only pairs and splits a window's
# reduce over the tasks by key): every element to one task, one result per window
GLOBAL_GROUPINGS = {IMPL + "reducebywindowbolt.ReduceGrouping"}
REPARTITION_GROUPING = IMPL + "repartitionbolt.RepartitionCustomGrouping"
# what heronpy's window bolts hand processWindow (heronpy.api.bolt.window_bolt.WindowContext)
WindowContext = namedtuple("WindowContext", ("start", "end"))


def is_streamlet_class(python_class_path):
    return str(python_class_path).startswith(PREFIX)


# --------------------------------------------------------------------------------------
# Components
# --------------------------------------------------------------------------------------

def component_class(python_class_path, conf, cname):
    """``(host, class_path)`` for a streamlet component: the Bittern component class
    that hosts it (None: the plain heronpy host) and the heronpy class it builds."""
    path = str(python_class_path)
    if path in WINDOWED:
        return window_host(conf.get(DURATION_KEY), conf.get(SLIDE_KEY), cname), path
    if path in FIXED:
        return None, f"{__name__}.{FIXED[path]}"
    return None, path


def _seconds(value, what, cname):
    try:
        secs = int(value)
    except (TypeError, ValueError):
        raise TopologyError(f"streamlet {cname!r}: the window's {what} must be a whole number of seconds, "
                            f"got {value!r}") from None
    if secs < 1:
        raise TopologyError(f"streamlet {cname!r}: the window's {what} must be at least 1 second (heronpy "
                            f"windows have second resolution), got {secs}")
    return secs


def window_host(duration, slide, cname):
    """The Bittern windowed bolt class for a heronpy window of ``duration`` seconds
    every ``slide`` seconds (slide defaults to the duration, as in heronpy)."""
    d = _seconds(duration, "duration", cname)
    s = d if slide is None else _seconds(slide, "slide interval", cname)
    if s > d:
        raise TopologyError(f"streamlet {cname!r}: the window's slide interval ({s} s) is longer than the "
                            f"window ({d} s)")
    return _window_class(f"StreamletWindow_{d}_{s}")


_WINDOW_NAME = re.compile(r"StreamletWindow_(\d+)_(\d+)$")


def _window_class(name):
    cls = globals().get(name)
    if cls is None:
        d, s = map(int, _WINDOW_NAME.match(name).groups())
        window = Window.tumbling(d) if d == s else Window.sliding(d, s)
        cls = type(name, (StreamletWindowBolt,), {"window": window, "__module__": __name__,
                                                  "__qualname__": name})
        globals()[name] = cls
    return cls


class StreamletWindowBolt(_HeronHost, WindowedBolt):
    """Hosts one of heronpy's windowed streamlet bolts on Bittern's windows: builds it
    as Heron does (``cls(delegate=self)``), and when a window fires hands its tuples to
    the bolt's own ``processWindow(WindowContext(start, end), tuples)``. heronpy's
    tick-driven bookkeeping (its deque, ``process``, ``process_tick``, expiry) is not
    used: the window holds the tuples and acks them when they leave their last window.
    heronpy's task hooks (``context.add_task_hook``, ``topology.auto.task.hooks``) are
    called as for any heronpy bolt: ``bolt_execute`` after each tuple entered its
    windows, ``emit`` for each result, ``bolt_ack``/``bolt_fail`` when a window lets
    a tuple go (at least once), ``clean_up`` at a clean stop."""

    outputs = []

    def initialize(self, config, context):
        self.heron = obj = user_class(config, "bolt")(delegate=self)
        self._task_context, self.heron_context = context, HeronContext(context, self)
        auto = config.get(heron_hooks.AUTO_HOOKS_KEY)
        if auto:  # as Heron's context does, before initialize
            for hook in heron_hooks.auto_hooks(auto, context.component, import_path):
                self.add_task_hook(hook)
        # (a copy: heronpy's window bolt asks for ticks in it; Bittern's windows fire instead)
        obj.initialize(dict(config), self.heron_context)
        self._ready_hooks()

    def _hook_up(self):
        if self._hooked:
            return
        self._hooked = True
        # (process is the window runtime's per-tuple path, bound before initialize)
        heron_hooks.hook_bolt(self, self.process)

    def process_window(self, window):
        self.heron.processWindow(WindowContext(window.start, window.end), list(window.tuples))


# --------------------------------------------------------------------------------------
# Groupings
# --------------------------------------------------------------------------------------

def key_hash(key):
    """A stable hash of a streamlet key (any picklable value)."""
    try:
        return stable_hash(key)
    except (TypeError, ValueError):
        return zlib.crc32(pickle.dumps(key, protocol=4))


class KeyGrouping:
    """heronpy's ``ReduceGrouping`` / ``JoinGrouping``: a ``(key, value)`` element goes to
    one target task chosen by its key, with a stable hash instead of ``hash()``."""

    def prepare(self, context, component, stream, target_tasks):
        self.target_tasks = list(target_tasks)

    def choose_tasks(self, values):
        userdata = values[0]
        if not isinstance(userdata, Iterable) or isinstance(userdata, (str, bytes)) or len(userdata) != 2:
            raise RuntimeError(f"a keyed streamlet operator (reduce_by_key_and_window, join) takes (key, value) "
                               f"elements, got {userdata!r}")
        return [self.target_tasks[key_hash(userdata[0]) % len(self.target_tasks)]]


class PartitionGrouping:
    """``repartition(n, fn)``: ``fn(element, n)`` gives a partition index or a list of
    them; each is taken modulo the number of target tasks (sorted), as heronpy's
    ``RepartitionCustomGrouping`` does."""

    def __init__(self, function):
        self.function = function

    def prepare(self, context, component, stream, target_tasks):
        self.target_tasks = list(target_tasks)

    def choose_tasks(self, values):
        n = len(self.target_tasks)
        targets = self.function(values[0], n)
        if isinstance(targets, Iterable) and not isinstance(targets, (str, bytes)):
            return [self.target_tasks[_index(t) % n] for t in targets]
        return [self.target_tasks[_index(targets) % n]]


def _index(t):
    if isinstance(t, bool) or not isinstance(t, int):
        raise RuntimeError(f"a repartition function must return a partition index (int) or a list of them, "
                           f"got {t!r}")
    return t


def _is_default_partitioner(fn):
    """heronpy's own ``lambda x: x`` default of ``Streamlet.repartition``."""
    code = getattr(fn, "__code__", None)  # (heronpy's serializer drops co_filename: by name)
    return code is not None and code.co_argcount == 1 and getattr(fn, "__module__", None) == \
        "heronpy.streamlet.streamlet" and getattr(fn, "__qualname__", "") == "Streamlet.repartition.<locals>.<lambda>"


def grouping(obj, where):
    """The Bittern grouping for heronpy's streamlet grouping ``obj`` (its unpickled
    custom grouping: a class path string or an object); None when it is not one."""
    if isinstance(obj, str):
        if obj in GLOBAL_GROUPINGS:
            return Grouping.GLOBAL
        return GroupingSpec("custom", custom={"class": f"{__name__}:KeyGrouping"}) if obj in KEY_GROUPINGS else None
    cls = type(obj)
    if f"{cls.__module__}.{cls.__qualname__}" != REPARTITION_GROUPING:
        return None
    fn = getattr(obj, "_repartition_function", None)
    if fn is None or _is_default_partitioner(fn):
        return Grouping.SHUFFLE
    try:
        import cloudpickle
        blob = cloudpickle.dumps(PartitionGrouping(fn))
    except Exception as e:  # noqa: BLE001 - user code, reported with its cause
        raise TopologyError(f"{where}: the repartition function cannot be pickled: {type(e).__name__}: {e}") \
            from None
    return GroupingSpec("custom", custom={"pickle": base64.b64encode(blob).decode()})


# --------------------------------------------------------------------------------------
# heronpy's classes, fixed (made on demand: heronpy is imported only then)
# --------------------------------------------------------------------------------------

def _make_transform_bolt():
    from heronpy.streamlet.impl.transformbolt import TransformBolt as Base

    class TransformBolt(Base):
        """heronpy's TransformBolt, whose ``process`` asks for ``self.transform_operator``
        (it is ``_transform_operator``): the operator's ``transform(tup)`` is called with
        the tuple, as heronpy means to."""

        def process(self, tup):
            self._transform_operator.transform(tup)
            self.processed += 1
            self.ack(tup)
    return TransformBolt


def _ending(base_path, attr):
    import importlib
    mod, _, name = base_path.rpartition(".")
    base = getattr(importlib.import_module(mod), name)

    def next_tuple(self):
        try:
            base.next_tuple(self)
        except StopIteration:
            self.delegate.done()  # a bounded source: Bittern's end of input

    return type(attr, (base,), {"next_tuple": next_tuple, "__module__": __name__, "__qualname__": attr,
                                "__doc__": f"heronpy's {name}; StopIteration from the source ends the task."})


_MAKERS = {
    "TransformBolt": _make_transform_bolt,
    "GeneratorSpout": lambda: _ending(IMPL + "generatorspout.GeneratorSpout", "GeneratorSpout"),
    "SupplierSpout": lambda: _ending(IMPL + "supplierspout.SupplierSpout", "SupplierSpout"),
}


def __getattr__(name):
    """The fixed heronpy classes and the window hosts, made when first asked for (the
    instances resolve ``bittern.compat.streamlet:NAME``)."""
    if name in _MAKERS:
        cls = _MAKERS[name]()
        cls.__module__, cls.__qualname__ = __name__, name
        globals()[name] = cls
        return cls
    if _WINDOW_NAME.match(name):
        return _window_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------------------
# What heronpy 0.20.5 refuses while a streamlet file runs
# --------------------------------------------------------------------------------------

_installed = False


def install():
    """Patch heronpy's streamlet classes (idempotent): ``repartition`` (and ``clone``)
    and ``outer_join`` are accepted; a graph that cannot be built names its streamlets."""
    global _installed
    if _installed:
        return
    from heronpy.streamlet.builder import Builder
    from heronpy.streamlet.impl.consumebolt import ConsumeBolt, ConsumeStreamlet
    from heronpy.streamlet.impl.joinbolt import JoinBolt, JoinStreamlet
    from heronpy.streamlet.impl.repartitionbolt import RepartitionStreamlet
    from heronpy.streamlet.streamlet import Streamlet
    from heronpy.streamlet.windowconfig import WindowConfig

    def repartition_init(self, num_partitions, repartition_function, parent):
        Streamlet.__init__(self)
        if not callable(repartition_function):
            raise RuntimeError("Repartition function has to be callable")
        if not _is_default_partitioner(repartition_function) and not _takes_two(repartition_function):
            raise RuntimeError("Repartition function should take 2 arguments (the element and the number of "
                               "partitions)")
        if not isinstance(parent, Streamlet):
            raise RuntimeError("Parent of Repartition Streamlet has to be a Streamlet")
        self._parent = parent
        self._repartition_function = repartition_function
        self.set_num_partitions(num_partitions)

    def join_init(self, join_type, window_config, join_function, left, right):
        Streamlet.__init__(self)
        if join_type not in (JoinBolt.INNER, JoinBolt.OUTER_RIGHT, JoinBolt.OUTER_LEFT, JoinBolt.OUTER):
            raise RuntimeError("join type has to be one of inner, outer, outer left, outer right")
        if not isinstance(window_config, WindowConfig):
            raise RuntimeError("window config has to be of type WindowConfig")
        if not callable(join_function):
            raise RuntimeError("Join function has to be callable")
        if not isinstance(left, Streamlet) or not isinstance(right, Streamlet):
            raise RuntimeError("Parent of Join has to be a Streamlet")
        self._join_type, self._window_config, self._join_function = join_type, window_config, join_function
        self._left, self._right = left, right
        self.set_num_partitions(left.get_num_partitions())

    def consume_init(self, consume_function, parent):
        Streamlet.__init__(self)
        if not callable(consume_function):
            raise RuntimeError("Consume function has to be callable")
        if not isinstance(parent, Streamlet):
            raise RuntimeError("Parent of Consume Streamlet has to be a Streamlet")
        self._parent = parent
        self._consume_function = consume_function
        self.set_num_partitions(parent.get_num_partitions())

    def consume_build_this(self, builder, stage_names):
        if not self.get_name():
            self.set_name(self._default_stage_name_calculator("consume", stage_names))
        if self.get_name() in stage_names:
            raise RuntimeError("Duplicate Names")
        stage_names.add(self.get_name())
        builder.add_bolt(self.get_name(), ConsumeBolt, par=self.get_num_partitions(),
                         inputs=self._calculate_inputs(),
                         config={ConsumeBolt.CONSUMEFUNCTION: self._consume_function})
        return True

    original_build = Builder.build

    def build(self, bldr):
        try:
            # (heronpy's JoinStreamlet prints its build steps on stdout: kept off the CLI's output)
            with contextlib.redirect_stdout(io.StringIO()):
                original_build(self, bldr)
        except RuntimeError as e:
            if str(e).startswith("Topology cannot be fully built"):
                raise RuntimeError("the streamlet graph cannot be built: " + _unbuilt(self)) from None
            if str(e) == "Duplicate Names":
                raise RuntimeError("two streamlets are named " + _duplicate(self)) from None
            raise

    RepartitionStreamlet.__init__ = repartition_init
    ConsumeStreamlet.__init__, ConsumeStreamlet._build_this = consume_init, consume_build_this
    JoinStreamlet.__init__ = join_init
    Builder.build = build
    _installed = True


def _takes_two(fn):
    import inspect
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True  # (a builtin: let the call tell)
    try:
        sig.bind(None, None)
        return True
    except TypeError:
        return False


def _streamlets(builder):
    seen, order, todo = set(), [], list(builder._sources)
    while todo:
        s = todo.pop(0)
        if id(s) in seen:
            continue
        seen.add(id(s))
        order.append(s)
        todo.extend(s._children)
    return order


def _describe(s):
    return repr(s.get_name()) if s.get_name() else f"an unnamed {type(s).__name__}"


def _unbuilt(builder):
    bad = [s for s in _streamlets(builder) if not s._built]
    parts = []
    for s in bad:
        parents = [p for p in (getattr(s, "_left", None), getattr(s, "_right", None)) if p is not None]
        missing = [_describe(p) for p in parents if not p._built]
        parts.append(f"{_describe(s)} reads {', '.join(missing)}, which comes from a source not added to this "
                     "Builder" if missing else _describe(s))
    return "; ".join(parts) or "a streamlet is not reachable from the Builder's sources"


def _duplicate(builder):
    names = [s.get_name() for s in _streamlets(builder) if s.get_name()]
    dups = sorted({n for n in names if names.count(n) > 1})
    return (", ".join(repr(n) for n in dups) + " (set_name must be unique)") if dups else "alike"


__all__ = ["KeyGrouping", "PartitionGrouping", "StreamletWindowBolt", "WindowContext", "component_class",
           "grouping", "install", "is_streamlet_class", "window_host"]
