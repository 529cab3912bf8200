"""Topology definitions: the class style and the builder style, both validated
into one plain, serialisable :class:`TopologyDef` (the logical plan).

Validation happens here, once, with errors that name the component, the stream
and the field: everything downstream (packing, instances, stream managers) can
trust the definition.

Names: any non-empty component or stream name is the user's (``__`` prefixes
included, as Heron allows) except the few Bittern itself uses
(:data:`RESERVED_COMPONENTS`, :data:`RESERVED_STREAMS`).

Config values JSON cannot hold faithfully (functions, iterators, instances, tuples,
sets: what heronpy lets a component's config carry) travel pickled, as heronpy
does with cloudpickle: the config shows ``"<pickled: TYPE>"`` in their place (in the
state, the run plan, ZooKeeper, the HTTP API) and the definition carries the bytes
under ``pickled``. Only the instance unpickles them (:func:`unpickle_config`), when
it hands the config to ``initialize``: they come from its own topology's definition,
the same trust as its code. Nothing else (nimbus, the topology master, stream
managers, the CLI) ever unpickles them.
"""
from __future__ import annotations

import base64
import importlib
import importlib.util
import pickle
from dataclasses import dataclass, field

from ..errors import TopologyError
from .component import Bolt, ComponentSpec, Spout, StreamRef, declared_streams
from .stream import DEFAULT_STREAM, Grouping, GroupingSpec
from .timedecl import check_time, time_decl

# Component names Bittern itself uses, and what for: refused in every topology style.
RESERVED_COMPONENTS = {
    "__system": "the source of tick tuples",
    "__tmaster": "the topology master's own error records",
    "checkpoint-store": "the topology master's error records of the checkpoint store",
    "tmaster": "the topology master's log, `bittern logs NAME tmaster`",
    "stmgr": "the stream managers' logs stmgr-C.log",
    "supervisor": "the supervisor's log",
    "console": "the topology's console log",
}
# Stream names Bittern itself uses in data batches and tuples.
RESERVED_STREAMS = {
    "__tick": "tick tuples",
    "__barrier": "checkpoint barriers",
    "__watermark": "watermarks",
    "__heartbeat": "multilang heartbeats",
}
NAME_MAX = 128  # a component's name is part of its log files' names and of HTTP API paths
PICKLED_SHOWN = "<pickled: {}>"


@dataclass
class InputDef:
    component: str
    stream: str
    grouping: GroupingSpec

    def to_dict(self):
        return {"component": self.component, "stream": self.stream, "grouping": self.grouping.to_dict()}

    @staticmethod
    def from_dict(d):
        return InputDef(d["component"], d["stream"], GroupingSpec.from_dict(d["grouping"]))


@dataclass
class ComponentDef:
    name: str
    kind: str  # "spout" | "bolt"
    class_path: str  # "module:qualname"
    par: int
    outputs: dict  # stream -> {"fields": [...], "direct": bool}
    inputs: list = field(default_factory=list)  # [InputDef]
    config: dict = field(default_factory=dict)
    # Event time (bittern/api/windows.py): a spout's {"watermarks": True, ...}; a windowed
    # bolt's {"window": ..., "event_time": bool, "timestamp_field", "lag", "lateness",
    # "late_stream"}; {"timers": True} for a bolt with on_timer. Empty: processing time.
    time: dict = field(default_factory=dict)
    # config values carried pickled: key -> {"type": ..., "pickle": base64}; ``config``
    # holds "<pickled: TYPE>" for each (see the module docstring)
    pickled: dict = field(default_factory=dict)

    def to_dict(self):
        d = {"name": self.name, "kind": self.kind, "class": self.class_path, "par": self.par,
             "outputs": self.outputs, "inputs": [i.to_dict() for i in self.inputs],
             "config": self.config}
        if self.time:
            d["time"] = self.time
        if self.pickled:
            d["pickled"] = self.pickled
        return d

    @staticmethod
    def from_dict(d):
        return ComponentDef(d["name"], d["kind"], d["class"], d["par"], d["outputs"],
                            [InputDef.from_dict(i) for i in d["inputs"]], d.get("config", {}),
                            d.get("time", {}), d.get("pickled") or {})


@dataclass
class TopologyDef:
    """The validated logical plan. ``components`` keeps definition order."""

    name: str
    components: dict  # name -> ComponentDef
    config: dict = field(default_factory=dict)
    # Where the code comes from: {"file", "module", "sys_path"} (set by the loader).
    source: dict = field(default_factory=dict)
    # topology config values carried pickled (as ComponentDef.pickled)
    pickled: dict = field(default_factory=dict)

    @property
    def spouts(self):
        return [c for c in self.components.values() if c.kind == "spout"]

    @property
    def bolts(self):
        return [c for c in self.components.values() if c.kind == "bolt"]

    def subscribers(self, component, stream):
        """[(bolt name, GroupingSpec)] subscribed to ``component``'s ``stream``."""
        out = []
        for c in self.components.values():
            for i in c.inputs:
                if i.component == component and i.stream == stream:
                    out.append((c.name, i.grouping))
        return out

    def to_dict(self):
        d = {"name": self.name, "config": self.config, "source": self.source,
             "components": [c.to_dict() for c in self.components.values()]}
        if self.pickled:
            d["pickled"] = self.pickled
        return d

    @staticmethod
    def from_dict(d):
        comps = [ComponentDef.from_dict(c) for c in d["components"]]
        return TopologyDef(d["name"], {c.name: c for c in comps}, d.get("config", {}),
                           d.get("source", {}), d.get("pickled") or {})


# --------------------------------------------------------------------------------------
# The two ways to define a topology
# --------------------------------------------------------------------------------------

class TopologyType(type):
    """Collects the ``ComponentSpec`` attributes of a class-style topology, in order."""

    def __new__(mcs, clsname, bases, attrs):
        specs = {}
        for base in bases:
            specs.update(getattr(base, "_specs", {}))
        for attr, val in attrs.items():
            if isinstance(val, ComponentSpec):
                if val.name is None:
                    val.name = attr
                specs[attr] = val
        attrs["_specs"] = specs
        return super().__new__(mcs, clsname, bases, attrs)


class Topology(metaclass=TopologyType):
    """Class-style topology::

        class WordCount(Topology):
            config = {"topology.stmgrs": 2}
            word = WordSpout.spec(par=2)
            count = CountBolt.spec(par=3, inputs={word: Grouping.fields("word")})
    """

    config: dict = {}

    @classmethod
    def build(cls, name=None):
        return _build(name or cls.__name__, list(cls._specs.values()), dict(cls.config or {}),
                      where=f"topology {cls.__name__}")


class TopologyBuilder:
    """heronpy's builder::

        builder = TopologyBuilder("word_count")
        word = builder.add_spout("word", WordSpout, par=2)
        builder.add_bolt("count", CountBolt, par=3, inputs={word: Grouping.fields("word")})
        builder.set_config({"topology.stmgrs": 2})
    """

    def __init__(self, name):
        if not isinstance(name, str) or not name:
            raise TopologyError(f"TopologyBuilder needs a non-empty name, got {name!r}")
        self.topology_name = name
        self._specs = []
        self._config = {}

    def add_spout(self, name, spout_cls, par=1, config=None, optional_outputs=None):
        """``spout_cls``: a Spout class, or a multilang spout (``ShellSpout.spec(...)``)."""
        return self._add(name, spout_cls, "spout", par, None, config, optional_outputs)

    def add_bolt(self, name, bolt_cls, par=1, inputs=None, config=None, optional_outputs=None):
        """``bolt_cls``: a Bolt class, or a multilang bolt (``ShellBolt.spec(command=...,
        script=..., outputs=[...])``, as Storm's ``setBolt("split", new ShellBolt(...))``)."""
        return self._add(name, bolt_cls, "bolt", par, inputs, config, optional_outputs)

    def _add(self, name, cls, kind, par, inputs, config, optional_outputs):
        if isinstance(cls, ComponentSpec):  # a shell component's spec: placed here
            spec = cls
            if spec.kind != kind:
                raise TopologyError(f"component {name!r}: add_{kind} was given a {spec.kind} spec")
            spec.name, spec.par, spec.inputs = name, par, inputs
            spec.config.update(config or {})
            if optional_outputs is not None:
                spec.optional_outputs = optional_outputs
        else:
            spec = ComponentSpec(cls, kind, name=name, par=par, inputs=inputs, config=config)
            spec.optional_outputs = optional_outputs
        self._specs.append(spec)
        return spec

    def set_config(self, config):
        if not isinstance(config, dict):
            raise TopologyError(f"set_config takes a dict, got {type(config).__name__}")
        self._config.update(config)
        return self

    def build(self, name=None):
        return _build(name or self.topology_name, self._specs, dict(self._config),
                      where=f"topology {self.topology_name!r}")


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------

def class_path(cls):
    if "<locals>" in cls.__qualname__:
        raise TopologyError(f"class {cls.__qualname__} is defined inside a function; instances "
                            "cannot import it (define it at module level)")
    return f"{cls.__module__}:{cls.__qualname__}"


def _build(name, specs, config, where):
    if not specs:
        raise TopologyError(f"{where} has no components")
    comps = {}
    seen_specs = {}
    for spec in specs:
        cname = spec.name
        if not isinstance(cname, str) or not cname:
            raise TopologyError(f"{where}: a component needs a non-empty name, got {cname!r}")
        check_component_name(cname)
        if cname in comps:
            raise TopologyError(f"component {cname!r} is defined twice")
        if id(spec) in seen_specs:
            raise TopologyError(f"component {cname!r} is the same spec as {seen_specs[id(spec)]!r}; "
                                "call .spec() once per component")
        seen_specs[id(spec)] = cname
        comps[cname] = _component_def(spec)
    by_spec = {id(s): s.name for s in specs}
    for spec in specs:
        comps[spec.name].inputs = _inputs(spec, comps, by_spec)
    if not any(c.kind == "spout" for c in comps.values()):
        raise TopologyError(f"{where} has no spout")
    for c in comps.values():
        check_time(c, comps)
    if not isinstance(config, dict):
        raise TopologyError(f"{where}: config must be a dict, got {type(config).__name__}")
    config, pickled = encode_config(config, where)
    check_configs(where, config, comps)
    return TopologyDef(name, comps, config, pickled=pickled)


def check_configs(where, config, comps):
    """Bittern's settings in the topology's and each component's config, checked here
    so that a bad value is reported with the topology's file (the CLI checks them again,
    merged with ``--config``)."""
    from ..config import check
    from ..errors import ConfigError
    try:
        check(config, f"{where} config")
        for c in comps.values():
            check(c.config, f"component {c.name!r} config")
    except ConfigError as e:
        raise TopologyError(str(e)) from None


def check_component_name(cname):
    """Refuse a name Bittern uses itself, or one that cannot name a log file."""
    if cname in RESERVED_COMPONENTS:
        raise TopologyError(f"component {cname!r}: the name {cname!r} is reserved by Bittern "
                            f"({RESERVED_COMPONENTS[cname]}); choose another")
    if len(cname) > NAME_MAX or "/" in cname or any(ord(ch) < 32 or ord(ch) == 127 for ch in cname):
        raise TopologyError(f"component {cname[:NAME_MAX]!r}: a component name is 1-{NAME_MAX} characters, "
                            "without '/' or control characters")


def check_stream_names(cname, streams):
    for s in streams:
        if s in RESERVED_STREAMS:
            raise TopologyError(f"component {cname!r}: the stream name {s!r} is reserved by Bittern "
                                f"({RESERVED_STREAMS[s]}); choose another")


def _component_def(spec):
    cname, cls = spec.name, spec.cls
    if not isinstance(cls, type):
        raise TopologyError(f"component {cname!r}: expected a Spout or Bolt class, got {cls!r}")
    base = Spout if spec.kind == "spout" else Bolt
    if not issubclass(cls, base):
        raise TopologyError(f"component {cname!r}: {cls.__qualname__} is not a {base.__name__} subclass")
    par = spec.par
    if isinstance(par, bool) or not isinstance(par, int) or par < 1:
        raise TopologyError(f"component {cname!r}: parallelism must be an integer >= 1, got {par!r}")
    if spec.kind == "spout" and spec.inputs:
        raise TopologyError(f"component {cname!r}: a spout takes no inputs")
    try:
        streams = declared_streams(cls)
    except TopologyError as e:
        raise TopologyError(f"component {cname!r}: {e}") from None
    extras = getattr(spec, "optional_outputs", None) or ()
    if extras:  # heronpy: added to the class's outputs (field names extend the default stream)
        base = list(getattr(cls, "outputs", None) or ())
        try:
            streams = declared_streams(type(cls.__name__, (), {"outputs": base + list(extras)}))
        except TopologyError as e:
            raise TopologyError(f"component {cname!r}: optional_outputs: {e}") from None
    if not isinstance(spec.config, dict):
        raise TopologyError(f"component {cname!r}: config must be a dict")
    time = time_decl(cls, spec.kind, cname, streams)
    check_stream_names(cname, streams)
    # a multilang component (instance/shell.py) hands its config to a child process as
    # JSON: tuples go there as lists, as they always did
    config, pickled = encode_config(spec.config, f"component {cname!r}",
                                    as_json=getattr(cls, "_runtime_attach", None) is not None)
    return ComponentDef(cname, spec.kind, class_path(cls), par,
                        {s: st.to_dict() for s, st in streams.items()}, [], config, time, pickled)


def _input_source(key, comps, by_spec, cname):
    if isinstance(key, StreamRef):
        src, stream = by_spec.get(id(key.spec), key.spec.name), key.stream
    elif isinstance(key, ComponentSpec):
        src, stream = by_spec.get(id(key), key.name), DEFAULT_STREAM
    elif isinstance(key, str):
        src, stream = key, DEFAULT_STREAM
    elif isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key):
        src, stream = key
    elif isinstance(key, type):
        raise TopologyError(f"component {cname!r}: input {key.__qualname__} is a class, not a spec "
                            "(did you forget to call .spec()?)")
    else:
        raise TopologyError(f"component {cname!r}: cannot use {key!r} as an input")
    if src not in comps:
        raise TopologyError(f"component {cname!r}: input {src!r} is not a component of this topology "
                            f"(components: {', '.join(comps)})")
    outputs = comps[src].outputs
    if stream not in outputs:
        raise TopologyError(f"component {cname!r}: input {src!r} has no stream {stream!r} "
                            f"(streams: {', '.join(outputs) or 'none'})")
    return src, stream


def input_items(raw, cname, shuffle=Grouping.SHUFFLE):
    """A spec's ``inputs`` as ``[(source, grouping)]``: a dict as it is, a list (or
    tuple) of sources each with ``shuffle`` (the DSLs' shorthand)."""
    if isinstance(raw, dict):
        return list(raw.items())
    if isinstance(raw, (list, tuple)):
        return [(k, shuffle) for k in raw]
    raise TopologyError(f"component {cname!r}: inputs must be a dict or a list, got {type(raw).__name__}")


def _inputs(spec, comps, by_spec):
    cname, raw = spec.name, spec.inputs
    if raw is None:
        return []
    items = input_items(raw, cname)
    out = []
    for key, grouping in items:
        src, stream = _input_source(key, comps, by_spec, cname)
        if not isinstance(grouping, GroupingSpec):
            raise TopologyError(f"component {cname!r}: input {src!r}: {grouping!r} is not a Grouping")
        decl = comps[src].outputs[stream]
        if grouping.kind in ("fields", "partial_key"):
            missing = [f for f in grouping.fields if f not in decl["fields"]]
            if missing:
                raise TopologyError(f"component {cname!r}: input {src!r} stream {stream!r} has no field "
                                    f"{missing[0]!r} to group on (fields: {decl['fields']})")
        if grouping.kind == "direct" and not decl["direct"]:
            raise TopologyError(f"component {cname!r}: direct grouping on {src!r} stream {stream!r}, "
                                "which is not declared direct (Stream(..., direct=True))")
        if decl["direct"] and grouping.kind != "direct":
            raise TopologyError(f"component {cname!r}: stream {stream!r} of {src!r} is direct; "
                                "subscribe to it with Grouping.DIRECT")
        if grouping.kind == "custom":
            load_custom_grouping(grouping.custom, where=f"component {cname!r}")
        if any(i.component == src and i.stream == stream for i in out):
            raise TopologyError(f"component {cname!r} subscribes to {src!r} stream {stream!r} twice")
        out.append(InputDef(src, stream, grouping))
    return out


def load_custom_grouping(custom, where="custom grouping"):
    """A fresh custom grouping object from its description (class path or pickle)."""
    try:
        if "pickle" in custom:
            return pickle.loads(base64.b64decode(custom["pickle"]))
        return import_path(custom["class"])()
    except TopologyError as e:
        raise TopologyError(f"{where}: cannot load custom grouping: {e}") from None
    except Exception as e:  # noqa: BLE001 - user code; reported with its cause
        raise TopologyError(f"{where}: cannot load custom grouping: {type(e).__name__}: {e}") from None


def import_path(path):
    """``module:qualname`` → object."""
    mod, _, qual = path.partition(":")
    try:
        obj = importlib.import_module(mod)
    except ImportError as e:
        raise TopologyError(f"cannot import module {mod!r} for {path!r}: {e}") from None
    for part in qual.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TopologyError(f"module {mod!r} has no attribute {qual!r}") from None
    return obj


# --------------------------------------------------------------------------------------
# Config values JSON cannot hold: carried pickled (see the module docstring)
# --------------------------------------------------------------------------------------

_SCALARS = (str, int, float, bool, type(None))


def _plain(val):
    """Whether JSON gives ``val`` back equal and of the same types."""
    t = type(val)
    if t in _SCALARS:
        return True
    if t is list:
        return all(_plain(v) for v in val)
    if t is dict:
        return all(type(k) is str and _plain(v) for k, v in val.items())
    return False


def _as_json(val):
    """``val`` with tuples as lists, or raise TypeError (Bittern's own settings)."""
    t = type(val)
    if t in _SCALARS:
        return val
    if t in (list, tuple):
        return [_as_json(v) for v in val]
    if t is dict and all(type(k) is str for k in val):
        return {k: _as_json(v) for k, v in val.items()}
    raise TypeError(type(val).__qualname__)


def type_name(val):
    return type(val).__qualname__


def _dumps(val):
    """cloudpickle when it is installed (heronpy's choice: functions and classes of a
    ``__main__`` block by value), else the standard pickle (importable things only)."""
    try:
        import cloudpickle
    except ImportError:
        return pickle.dumps(val, protocol=pickle.DEFAULT_PROTOCOL), False
    return cloudpickle.dumps(val), True


def encode_config(config, where, as_json=False):
    """``(config, pickled)``: ``config`` with each value JSON cannot hold replaced by
    ``"<pickled: TYPE>"``, and ``{key: {"type", "pickle"}}`` with its bytes. Bittern's own
    settings (keys of defaults.toml) are read outside the instances, so they must be
    plain (tuples as lists); so is every value JSON can take when ``as_json``. A value
    that cannot be pickled is an error naming ``where`` and the key."""
    from ..config import defaults
    out, pickled, known = {}, {}, None
    for key, val in config.items():
        if not isinstance(key, str):
            raise TopologyError(f"{where}: config keys must be strings, got {key!r}")
        if _plain(val):
            out[key] = val
            continue
        if as_json:
            try:
                out[key] = _as_json(val)
                continue
            except TypeError:
                pass
        known = defaults() if known is None else known
        if key in known:
            try:
                out[key] = _as_json(val)
            except TypeError:
                raise TopologyError(f"{where}: config key {key!r} is a Bittern setting and takes a plain "
                                    f"value (string, number, boolean, list, dict), got a {type_name(val)}") from None
            continue
        tname = type_name(val)
        try:
            blob, cloud = _dumps(val)
        except Exception as e:  # noqa: BLE001 - user values: reported with the cause
            hint = "" if cloudpickle_installed() else \
                "; install cloudpickle (pip install 'bittern[heron]') to carry lambdas and local functions"
            raise TopologyError(f"{where}: config key {key!r}: a {tname} cannot be pickled "
                                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}){hint}") from None
        out[key] = PICKLED_SHOWN.format(tname)
        pickled[key] = {"type": tname, "pickle": base64.b64encode(blob).decode("ascii")}
    return out, pickled


def shown_definition(d):
    """A topology definition's dict as displayed (API, ``bittern top``, web UI): without
    the pickled values' bytes, which the config already shows as ``<pickled: TYPE>``."""
    if not isinstance(d, dict):
        return d
    out = {k: v for k, v in d.items() if k != "pickled"}
    comps = d.get("components")
    if isinstance(comps, list):
        out["components"] = [{k: v for k, v in c.items() if k != "pickled"} if isinstance(c, dict) else c
                             for c in comps]
    elif isinstance(comps, dict):
        out["components"] = {n: ({k: v for k, v in c.items() if k != "pickled"} if isinstance(c, dict) else c)
                             for n, c in comps.items()}
    return out


def cloudpickle_installed():
    return importlib.util.find_spec("cloudpickle") is not None


def unpickle_config(conf, tdef, component):
    """In the instance: the task's merged ``conf`` with the values its topology's
    definition carries pickled (the topology's, then the component's own) put back,
    where the placeholder is still what the config holds (a later layer, such as
    ``--config``, may have replaced it)."""
    cdef = tdef.components[component]
    layers = [(tdef.pickled or {}, "topology config"), (cdef.pickled or {}, "config")]
    out = None
    for pickled, what in layers:
        for key, p in pickled.items():
            if conf.get(key) != PICKLED_SHOWN.format(p.get("type")):
                continue
            try:
                val = pickle.loads(base64.b64decode(p["pickle"]))
            except Exception as e:  # noqa: BLE001 - user values: reported with the cause
                raise TopologyError(f"component {component!r}: {what} key {key!r}: its {p.get('type')} cannot be "
                                    f"unpickled here: {type(e).__name__}: {e}") from None
            if out is None:
                out = dict(conf)
            out[key] = val
    return conf if out is None else out
