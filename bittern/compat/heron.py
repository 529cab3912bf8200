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

heronpy itself is imported only when a user's file already did (the loader asks
:func:`find` only then), never at Bittern's import. Installing heronpy 0.20.5 on
Python 3.11 needs its pins relaxed: see :data:`PIP_REQUIREMENTS` and docs/COMPAT.md.
"""
from __future__ import annotations

import base64
import os
import pickle
import re
import runpy
import sys
import tempfile
import traceback

from ..api.component import ComponentSpec
from ..api.stream import DEFAULT_STREAM, Grouping, GroupingSpec, Stream
from ..api.topology import _build, import_path, input_items
from ..config import defaults
from ..errors import TopologyError
from ..loader import MODULE_NAME

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
    read, and nothing is written there unless the file calls ``build_and_submit`` itself
    at module level)."""
    os.environ.setdefault("HERON_OPTIONS", f"cmdline.topologydefn.tmpdirectory={tempfile.gettempdir()}")


# --------------------------------------------------------------------------------------
# Finding the topology
# --------------------------------------------------------------------------------------

def find(module, path):
    """``[(attr, HeronTopology)]`` for the heronpy topologies ``module`` defines, or that
    its ``__main__`` block builds."""
    api = sys.modules.get("heronpy.api.topology")
    if api is None:
        return []
    found = []
    for attr, val in vars(module).items():
        if isinstance(val, type) and issubclass(val, api.Topology) and val is not api.Topology \
                and val.__module__ == module.__name__:
            found.append((attr, HeronTopology.from_class(val)))
        elif isinstance(val, api.TopologyBuilder):
            found.append((attr, HeronTopology.from_builder(val)))
    if not found and _has_main_block(path):
        builder = run_main_block(path, api.TopologyBuilder)
        if builder is not None:
            found.append(("__main__", HeronTopology.from_builder(builder)))
    return found


def _has_main_block(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return re.search(r"""__name__\s*==\s*['"]__main__['"]""", f.read()) is not None
    except OSError:
        return False


class _Submitted(BaseException):
    """Stops the ``__main__`` block at ``build_and_submit`` (a BaseException, so a user's
    ``except Exception`` around it does not swallow it)."""


def run_main_block(path, builder_cls):
    """Run ``path`` as ``__main__`` with ``builder_cls.build_and_submit`` intercepted;
    the builder it was called on, or None if it was never called."""
    captured = []

    def intercept(self):
        captured.append(self)
        raise _Submitted()

    where = f"topology file {path!r}"
    saved_argv, saved_submit = sys.argv, builder_cls.build_and_submit
    sys.argv = [path, os.path.splitext(os.path.basename(path))[0]]
    builder_cls.build_and_submit = intercept
    try:
        runpy.run_path(path, run_name="__main__")
    except _Submitted:
        pass
    except SystemExit as e:
        if not captured:
            raise TopologyError(f"{where}: its __main__ block exited (code {e.code}) before "
                                "build_and_submit()") from None
    except Exception as e:  # noqa: BLE001 - user code: show the user their traceback
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))
        err = TopologyError(f"{where}: its __main__ block failed: {type(e).__name__}: {e}")
        err.user_traceback = tb
        raise err from None
    finally:
        sys.argv = saved_argv
        builder_cls.build_and_submit = saved_submit
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
        # the class's own ``config`` (heronpy reads only the class body's), unsanitised;
        # named after the file, as Bittern's class-style topologies are
        return cls(topo._heron_specs, vars(topo).get("config") or {}, None, f"topology {topo.__name__}")

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
    from .heron_runtime import HeronBolt, HeronSpout

    topo_conf = dict(HERON_DEFAULTS)
    topo_conf.update(translate_config(config, f"{where} config"))
    topo_conf.pop(PARALLELISM_KEY, None)  # Heron's per-component default; each spec sets its own
    out = []
    for spec in specs:
        cname = spec.name
        if not isinstance(cname, str) or not cname:
            raise TopologyError(f"{where}: a component needs a non-empty name, got {cname!r}")
        kind = "spout" if spec.is_spout else "bolt"
        conf = translate_config(spec.custom_config or {}, f"component {cname!r} config")
        par = conf.pop(PARALLELISM_KEY, spec.parallelism)
        if isinstance(par, str) and par.strip().isdigit():
            par = int(par)
        conf[CLASS_KEY] = resolve_class(spec.python_class_path, kind, cname)
        outputs = translate_outputs(spec.outputs, cname)
        inputs = translate_inputs(spec.inputs, cname) if kind == "bolt" else None
        if kind == "spout" and not outputs:
            raise TopologyError(f"component {cname!r}: a heronpy spout needs at least one output "
                                "(outputs = [...] on its class)")
        if kind == "bolt" and not inputs:
            raise TopologyError(f"component {cname!r}: a heronpy bolt needs at least one input")
        bspec = ComponentSpec(HeronSpout if kind == "spout" else HeronBolt, kind, name=cname, par=par,
                              inputs=inputs, config=conf)
        bspec.optional_outputs = outputs
        out.append(bspec)
    return _build(name, out, topo_conf, where)


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
    if isinstance(obj, str):
        return Grouping.custom(obj)
    if not callable(getattr(obj, "choose_tasks", None)):
        raise TopologyError(f"{where}: custom grouping {type(obj).__name__} has no choose_tasks(values)")
    return GroupingSpec("custom", custom={"pickle": base64.b64encode(blob).decode()})


__all__ = ["CLASS_KEY", "PIP_ARGS", "PIP_REQUIREMENTS", "HeronTopology", "before_import", "find", "translate"]
