"""heronpy topologies, accepted by ``bittern submit`` / ``bittern run`` unchanged.

heronpy defines a topology in two ways, and both are found here:

* the class style: ``class WordCount(heronpy.api.topology.Topology)`` whose attributes
  are ``WordSpout.spec(par=2)`` / ``CountBolt.spec(inputs={...})``;
* the builder style: ``TopologyBuilder(name)`` + ``add_spout``/``add_bolt``/``set_config``
  + ``build_and_submit()``, which Heron's examples put under
  ``if __name__ == '__main__':``. When the module itself holds no topology, the file is
  run again as ``__main__`` (``sys.argv = [file, <file name>]``, as ``heron submit``
  passes the topology name) with ``build_and_submit`` intercepted: the builder is
  captured and the block stops there, nothing is written or submitted.

Topology classes made by a factory (a class statement in a function, or heronpy's own
``TopologyType(name, (Topology,), {...})``, which records them as classes of
``heronpy.api.topology``) count as the file's, and so does whatever the file hands over
with ``build_and_submit()`` or ``Topology.write()``, the way heron-cli takes a
topology: while a file naming heronpy is imported (:func:`importing`), both only record
what they were called on; in the ``__main__`` block they stop it.

Each heronpy component becomes a Bittern component hosted by an adapter
(:mod:`bittern.compat.heron_runtime`: ``HeronSpout``/``HeronBolt``) whose config names
the user's class under ``heronpy.class``; the adapter builds the user's object with
itself as heronpy's ``delegate``. A class defined in the topology file is recorded as
``bittern_topology:Name`` (the module name every instance imports the file under), so
classes of a ``__main__`` block's file resolve in the instances too.

Heron's config keys carry over (they are Bittern's names: ``topology.reliability.mode``,
``topology.message.timeout.secs``, ``topology.max.spout.pending``,
``topology.tick.tuple.freq.secs``, ``topology.enable.message.timeouts``, ...); heronpy
turns every value into a string, so numbers and booleans given as strings are read
back into the type of Bittern's default. ``topology.component.parallelism`` in a
component's config overrides its ``par`` (as in Heron); Heron's default
``topology.max.spout.pending`` (100) applies unless the topology sets it.

heronpy itself is imported only for a file that names it (just before the file imports
it; the loader asks :func:`find` only when it did), never at Bittern's import.
Installing heronpy 0.20.5 on Python 3.11 needs its pins relaxed: see
:data:`PIP_REQUIREMENTS` and docs/COMPAT.md.
"""
from __future__ import annotations

import base64
import contextlib
import importlib
import os
import pickle
import re
import runpy
import sys
import tempfile

from ..api.component import ComponentSpec
from ..api.stream import DEFAULT_STREAM, Grouping, GroupingSpec, Stream
from ..api.topology import _build, import_path, input_items
from ..config import defaults
from ..errors import TopologyError
from ..loader import MODULE_NAME, user_error

# pip install --no-deps <these>: heronpy pins protobuf==3.16.0 and cloudpickle~=1.5,
# whose pickled functions do not load on 3.11; these versions work (docs/COMPAT.md).
PIP_REQUIREMENTS = ["heronpy==0.20.5", "protobuf==3.20.3", "cloudpickle>=3,<4"]
PIP_ARGS = ["--no-deps"]

CLASS_KEY = "heronpy.class"
PARALLELISM_KEY = "topology.component.parallelism"
HERON_DEFAULTS = {"topology.max.spout.pending": 100}  # Heron's; its other defaults are Bittern's
# Heron key -> (Bittern key, conversion)
RENAMES = {"topology.container.ram": ("topology.container.ram.mb", lambda b: float(b) / 2 ** 20)}
# Grouping enum names of heronpy.proto.topology_pb2 -> Bittern groupings
GROUPINGS = {"SHUFFLE": Grouping.SHUFFLE, "ALL": Grouping.ALL, "LOWEST": Grouping.GLOBAL,
             "NONE": Grouping.NONE}


def before_import(path=None):
    """Called by the loader before it imports a topology file. heronpy builds a class-style
    topology's protobuf the moment the class is defined and refuses to without the
    ``HERON_OPTIONS`` that ``heron submit`` sets: give it one (only its temp directory is
    read; nothing is written there, see :func:`importing`)."""
    os.environ.setdefault("HERON_OPTIONS", f"cmdline.topologydefn.tmpdirectory={tempfile.gettempdir()}")


# Topologies a file handed over while it was imported (``build_and_submit()`` /
# ``Topology.write()`` at module level), by the file's path: read by :func:`find`.
_HANDED = {}


@contextlib.contextmanager
def importing(path):
    """Around the import of a topology file (by the CLI and by every instance): when the
    file names heronpy, ``TopologyBuilder.build_and_submit()`` and ``Topology.write()``
    record what they were called on instead of writing a ``.defn`` file (heron-cli takes
    a topology that way), and the import goes on."""
    before_import(path)
    api = _heron_api(path)
    if api is None:
        yield
        return
    if "heronpy.streamlet" in sys.modules or _mentions(path, "heronpy.streamlet"):
        from . import streamlet
        streamlet.install()  # what heronpy 0.20.5 refuses while a Streamlet file runs
    handed = _HANDED.setdefault(os.path.abspath(path), [])

    def submit(self):
        handed.append(self)

    def write(cls):
        handed.append(cls)

    with _patched(api, submit, write):
        yield


def _heron_api(path):
    """``heronpy.api.topology`` when the file mentions heronpy (imported then, as the file
    is about to), else None."""
    if "heronpy.api.topology" in sys.modules:
        return sys.modules["heronpy.api.topology"]
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            if "heronpy" not in f.read():
                return None
        return importlib.import_module("heronpy.api.topology")
    except Exception:  # noqa: BLE001 - not installed or broken: the file's own import reports it
        return None


def _mentions(path, text):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return text in f.read()
    except OSError:
        return False


@contextlib.contextmanager
def _patched(api, submit, write):
    builder, topo = api.TopologyBuilder, api.Topology
    saved = builder.__dict__["build_and_submit"], topo.__dict__["write"]
    builder.build_and_submit, topo.write = submit, classmethod(write)
    try:
        yield
    finally:
        builder.build_and_submit, topo.write = saved


# --------------------------------------------------------------------------------------
# Finding the topology
# --------------------------------------------------------------------------------------

def find(module, path):
    """``[(attr, HeronTopology)]`` for the heronpy topologies ``module`` defines (a
    ``Topology`` subclass written in it or made by a factory or by heronpy's
    ``TopologyType``, a ``TopologyBuilder``), hands over while it is imported
    (``build_and_submit()``, ``Topology.write()``), or its ``__main__`` block builds."""
    api = sys.modules.get("heronpy.api.topology")
    if api is None:
        return []
    found, seen = [], set()

    def add(attr, val):
        if id(val) in seen:
            return
        seen.add(id(val))
        if isinstance(val, api.TopologyBuilder):
            found.append((attr, HeronTopology.from_builder(val)))
        else:
            found.append((attr, HeronTopology.from_class(val)))

    for attr, val in vars(module).items():
        if isinstance(val, api.TopologyBuilder) or (_is_topology_class(api, val) and _made_here(api, val, module)):
            add(attr, val)
    for val in _HANDED.pop(os.path.abspath(path), []):
        add("build_and_submit()" if isinstance(val, api.TopologyBuilder) else f"{val.__name__}.write()", val)
    if not found and _has_main_block(path):
        handed = run_main_block(path, api)
        if handed is not None:
            add("__main__", handed)
    return found


def _is_topology_class(api, val):
    return isinstance(val, type) and issubclass(val, api.Topology) and val is not api.Topology


def _made_here(api, cls, module):
    """Written in the file, or made by a factory (a class statement in a function) or by
    heronpy's ``TopologyType(name, (Topology,), {...})``, which records its classes as
    ``heronpy.api.topology``; not a topology class merely imported from another module."""
    return cls.__module__ in (module.__name__, api.__name__) or "<locals>" in cls.__qualname__


def _has_main_block(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return re.search(r"""__name__\s*==\s*['"]__main__['"]""", f.read()) is not None
    except OSError:
        return False


class _Submitted(BaseException):
    """Stops the ``__main__`` block at ``build_and_submit`` / ``write`` (a BaseException,
    so a user's ``except Exception`` around it does not swallow it)."""


def run_main_block(path, api):
    """Run ``path`` as ``__main__`` with ``TopologyBuilder.build_and_submit`` and
    ``Topology.write`` intercepted; the builder or topology class handed over first, or
    None if neither was called."""
    captured = []

    def intercept(obj):
        captured.append(obj)
        raise _Submitted()

    where = f"topology file {path!r}"
    saved_argv = sys.argv
    sys.argv = [path, os.path.splitext(os.path.basename(path))[0]]
    try:
        with _patched(api, intercept, intercept):
            runpy.run_path(path, run_name="__main__")
    except _Submitted:
        pass
    except SystemExit as e:
        if not captured:
            raise TopologyError(f"{where}: its __main__ block exited (code {e.code}) before "
                                "build_and_submit()") from None
    except Exception as e:  # noqa: BLE001 - user code: show the user their traceback
        raise user_error(path, f"{where}: its __main__ block failed", e) from None
    finally:
        sys.argv = saved_argv
    return captured[0] if captured else None


class HeronTopology:
    """What the loader asks for: ``topology_name`` and ``build(name) -> TopologyDef``."""

    def __init__(self, specs, config, topology_name, where):
        self.specs = list(specs)
        self.config = dict(config or {})
        self.topology_name = topology_name
        self.where = where

    @classmethod
    def from_class(cls, topo):
        # the class's own ``config`` (heronpy reads only the class body's), unsanitised. A
        # class written in the file is named after the file, as Bittern's class-style
        # topologies are; one made by TopologyType(name, ...) (a builder's, a factory's)
        # carries the name it was given, as in Heron
        made = topo.__module__ == "heronpy.api.topology"
        name = (getattr(topo, "topology_name", None) or topo.__name__) if made else None
        return cls(getattr(topo, "_heron_specs", None) or [], vars(topo).get("config") or {}, name,
                   f"topology {topo.__name__}")

    @classmethod
    def from_builder(cls, builder):
        return cls(builder._specs.values(), builder._topology_config, builder.topology_name,
                   f"topology {builder.topology_name!r}")

    def build(self, name=None):
        return translate(name or self.topology_name, self.specs, self.config, self.where)


# --------------------------------------------------------------------------------------
# Translation
# --------------------------------------------------------------------------------------

def translate(name, specs, config, where):
    """heronpy ``HeronComponentSpec`` objects and topology config -> a validated TopologyDef."""
    topo_conf = dict(HERON_DEFAULTS)
    topo_conf.update(translate_config(config, f"{where} config"))
    topo_conf.pop(PARALLELISM_KEY, None)  # Heron's per-component default; each spec sets its own
    if any(streamlet_spec(spec) for spec in specs):
        # heronpy's Streamlet API: elements are any Python value (KeyedWindow, tuples), as
        # Heron's Python serializer carries them
        topo_conf.setdefault("topology.serializer", "pickle")
    out = []
    for spec in specs:
        cname = getattr(spec, "name", None)
        if not isinstance(cname, str) or not cname:
            raise TopologyError(f"{where}: a component needs a non-empty name, got {cname!r}")
        try:
            out.append(_component(spec, cname))
        except TopologyError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the file holds: one line naming the component
            raise TopologyError(f"component {cname!r}: cannot be translated: {type(e).__name__}: {e}") from None
    return _build(name, out, topo_conf, where)


def _component(spec, cname):
    """One heronpy spec -> a Bittern ComponentSpec hosted by HeronSpout / HeronBolt."""
    from .heron_runtime import HeronBolt, HeronSpout
    kind = "spout" if spec.is_spout else "bolt"
    conf = translate_config(spec.custom_config or {}, f"component {cname!r} config")
    par = conf.pop(PARALLELISM_KEY, spec.parallelism)
    if isinstance(par, str) and par.strip().isdigit():
        par = int(par)
    host, class_path = None, spec.python_class_path
    if streamlet_spec(spec):  # heronpy's Streamlet API (bittern/compat/streamlet.py)
        from . import streamlet
        host, class_path = streamlet.component_class(class_path, conf, cname)
    conf[CLASS_KEY] = resolve_class(class_path, kind, cname)
    outputs = translate_outputs(spec.outputs, cname)
    inputs = translate_inputs(spec.inputs, cname) if kind == "bolt" else None
    if kind == "spout" and not outputs:
        raise TopologyError(f"component {cname!r}: a heronpy spout needs at least one output "
                            "(outputs = [...] on its class)")
    if kind == "bolt" and not inputs:
        raise TopologyError(f"component {cname!r}: a heronpy bolt needs at least one input")
    bspec = ComponentSpec(host or (HeronSpout if kind == "spout" else HeronBolt), kind, name=cname, par=par,
                          inputs=inputs, config=conf)
    bspec.optional_outputs = outputs
    return bspec


def streamlet_spec(spec):
    return str(getattr(spec, "python_class_path", "")).startswith("heronpy.streamlet.")


def translate_config(raw, where):
    """A heronpy config dict with Heron's key names -> Bittern's, values typed like
    Bittern's defaults (heronpy's own defaults and sanitising turn them into strings)."""
    if not isinstance(raw, dict):
        raise TopologyError(f"{where}: config must be a dict, got {type(raw).__name__}")
    known = defaults()
    out = {}
    for key, val in raw.items():
        if not isinstance(key, str):
            raise TopologyError(f"{where}: config keys must be strings, got {key!r}")
        if key in RENAMES:
            new, conv = RENAMES[key]
            try:
                key, val = new, conv(val)
            except (TypeError, ValueError):
                raise TopologyError(f"{where}: {key} must be a number of bytes, got {val!r}") from None
        elif key in known:
            val = _typed(val, known[key])
        out[key] = val
    return out


def _typed(val, default):
    """``"true"``/``"30"``/``"0.5"`` -> the type of ``default``; anything else unchanged
    (Bittern's config check then names a bad value)."""
    if not isinstance(val, str) or isinstance(default, str):
        return val
    text = val.strip()
    if isinstance(default, bool):
        return {"true": True, "false": False}.get(text.lower(), val)
    if isinstance(default, (int, float)):
        try:
            num = float(text)
        except ValueError:
            return val
        return int(num) if isinstance(default, int) and num.is_integer() else num
    return val


def resolve_class(python_class_path, kind, cname):
    """heronpy's ``module.Name`` of a component class -> ``module:Name`` that resolves in
    every instance (the topology file's own classes under ``bittern_topology``)."""
    mod, _, name = str(python_class_path).rpartition(".")
    if mod == "__main__":
        mod = MODULE_NAME
    path = f"{mod}:{name}"
    try:
        cls = import_path(path)
    except TopologyError:
        if mod == MODULE_NAME:
            raise TopologyError(f"component {cname!r}: class {name} is defined inside the topology file's "
                                "__main__ block, where Bittern's instances cannot import it; define it at "
                                "module level") from None
        raise TopologyError(f"component {cname!r}: cannot import class {python_class_path!r}") from None
    from heronpy.api.bolt.base_bolt import BaseBolt
    from heronpy.api.spout.base_spout import BaseSpout
    base = BaseSpout if kind == "spout" else BaseBolt
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TopologyError(f"component {cname!r}: {python_class_path} is not a heronpy "
                            f"{'Spout' if kind == 'spout' else 'Bolt'}")
    return path


def translate_outputs(outputs, cname):
    """heronpy outputs (field names and ``Stream``s; plain names and a ``default`` Stream
    add up, a later Stream of the same name replaces an earlier one) -> Bittern Streams."""
    from heronpy.api.stream import Stream as HeronStream
    streams = {}
    for o in outputs or ():
        if isinstance(o, str):
            streams.setdefault(DEFAULT_STREAM, []).append(o)
        elif isinstance(o, HeronStream):
            if o.stream_id == DEFAULT_STREAM and DEFAULT_STREAM in streams:
                streams[DEFAULT_STREAM].extend(o.fields)
            else:
                streams[o.stream_id] = list(o.fields)
        else:
            raise TopologyError(f"component {cname!r}: outputs must be field names or heronpy Streams, "
                                f"got {o!r}")
    try:
        return [Stream(fields=f, name=s) for s, f in streams.items()]
    except TopologyError as e:
        raise TopologyError(f"component {cname!r}: {e}") from None


def translate_inputs(inputs, cname):
    """heronpy inputs (a dict of spec / ``spec["stream"]`` -> grouping, or a list for
    shuffle) -> ``{(component, stream): GroupingSpec}``."""
    from heronpy.api.component.component_spec import GlobalStreamId, HeronComponentSpec
    from heronpy.api.stream import Grouping as HeronGrouping
    if inputs is None:
        return None
    items = input_items(inputs, cname, HeronGrouping.SHUFFLE)
    out = {}
    for key, grouping in items:
        if isinstance(key, HeronComponentSpec):
            src = (key.name, DEFAULT_STREAM)
        elif isinstance(key, GlobalStreamId):
            src = (key.component_id, key.stream_id)
        else:
            raise TopologyError(f"component {cname!r}: cannot use {key!r} as an input (a spec or "
                                "spec['stream'])")
        out[src] = translate_grouping(grouping, cname, src)
    return out


def translate_grouping(g, cname, src):
    from heronpy.api.stream import Grouping as HeronGrouping
    from heronpy.proto import topology_pb2
    where = f"component {cname!r}: input {src[0]!r} stream {src[1]!r}"
    if isinstance(g, HeronGrouping.FIELDS):
        return Grouping.fields(*g.fields)
    if isinstance(g, HeronGrouping.CUSTOM):
        return _custom(g.python_serialized, where)
    if isinstance(g, int) and not isinstance(g, bool):
        try:
            kind = topology_pb2.Grouping.Name(g)
        except ValueError:
            kind = None
        if kind in GROUPINGS:
            return GROUPINGS[kind]
        if kind == "DIRECT":
            raise TopologyError(f"{where}: Grouping.DIRECT is not supported for heronpy topologies "
                                "(heronpy has no direct streams: Stream(direct=True) raises)")
        if kind in ("FIELDS", "CUSTOM"):
            raise TopologyError(f"{where}: use Grouping.{kind.lower()}(...), not the bare constant")
    raise TopologyError(f"{where}: {g!r} is not a heronpy Grouping")


def _custom(blob, where):
    """heronpy's custom grouping: a cloudpickled ICustomGrouping (or class path string).
    The blob itself is kept: the instances unpickle it (cloudpickle is heronpy's
    dependency, so classes pickled by value load there too)."""
    try:
        obj = pickle.loads(blob)
    except Exception as e:  # noqa: BLE001 - user code, reported with its cause
        raise TopologyError(f"{where}: cannot load the custom grouping: {type(e).__name__}: {e}") from None
    if (obj if isinstance(obj, str) else type(obj).__module__).startswith("heronpy.streamlet."):
        from . import streamlet  # heronpy's Streamlet groupings: keyed by a stable hash, repartition
        replaced = streamlet.grouping(obj, where)
        if replaced is not None:
            return replaced
    if isinstance(obj, str):
        return Grouping.custom(obj)
    if not callable(getattr(obj, "choose_tasks", None)):
        raise TopologyError(f"{where}: custom grouping {type(obj).__name__} has no choose_tasks(values)")
    return GroupingSpec("custom", custom={"pickle": base64.b64encode(blob).decode()})


__all__ = ["CLASS_KEY", "PIP_ARGS", "PIP_REQUIREMENTS", "HeronTopology", "before_import", "find", "importing",
           "translate"]
