"""Storm Flux YAML topologies of shell (multilang) components, run unchanged.

``bittern run topology.yaml`` / ``bittern submit topology.yaml`` take a Flux definition
(Storm's ``flux-core`` model: ``name``, ``config``, ``includes``, ``spouts``, ``bolts``,
``streams``) whose spouts and bolts are Flux's shell wrappers,
``org.apache.storm.flux.wrappers.spouts.FluxShellSpout`` and
``org.apache.storm.flux.wrappers.bolts.FluxShellBolt``:

* ``constructorArgs``: ``[command argv]`` or ``[command argv, default stream's fields]``;
  a last argument that is a file beside the YAML or in its ``resources/`` is the
  component's script (found there, as Bittern's ``ShellBolt.spec(script=...)``);
  the command runs in the YAML's directory;
* ``configMethods``: ``setDefaultStream([fields])``, ``setNamedStream(name, [fields])``,
  ``addComponentConfig(key, value)`` (the wrappers' own), ``changeChildCWD(true)``;
* ``config`` (per component and for the topology; Storm's key names, as
  streamparse's are read: :func:`bittern.compat.streamparse.translate_config`),
  ``parallelism`` (``numTasks`` and the resource hints are accepted, unused);
* ``streams`` with every Flux grouping but ``CUSTOM`` (a Java class); a stream some
  bolt reads with ``DIRECT`` is declared direct (Flux's wrappers cannot say it);
* ``includes`` (``file``, ``resource``, ``override``), merged as Flux does: one level,
  the including file wins unless ``override: true``, streams add up;
* property substitution on the text before it is parsed, as Storm's flux CLI:
  ``${name}`` from ``--filter FILE`` (a Java ``.properties`` file), ``${name[i]}``
  (an element of a list-valued property), ``${ENV-NAME}`` with ``--env-filter``.

Refused, each with one line naming the file and the component (or stream, include,
key): a Java spout, bolt or grouping (any other ``className``, ``customClass``,
``components`` beans, ``topologySource``, ``workerHooks``, ``ref`` arguments,
``properties`` setters, factories), an unknown key, a reference that has no value.
PyYAML (``pip install 'bittern[flux]'``) parses the YAML.
"""
from __future__ import annotations

import os
import re

from ..api.stream import DEFAULT_STREAM, Grouping, Stream
from ..errors import BitternError, TopologyError

SHELL_SPOUT = "org.apache.storm.flux.wrappers.spouts.FluxShellSpout"
SHELL_BOLT = "org.apache.storm.flux.wrappers.bolts.FluxShellBolt"
WRAPPERS = {"spout": SHELL_SPOUT, "bolt": SHELL_BOLT}
PLAIN_SHELL = {"org.apache.storm.spout.ShellSpout": SHELL_SPOUT, "org.apache.storm.task.ShellBolt": SHELL_BOLT}
EXTENSIONS = (".yaml", ".yml")

TOP_KEYS = {"name", "config", "includes", "spouts", "bolts", "streams", "components", "topologySource",
            "workerHooks"}
VERTEX_KEYS = {"id", "className", "constructorArgs", "configMethods", "parallelism", "numTasks", "config",
               "properties", "factory", "factoryArgs", "onHeapMemoryLoad", "offHeapMemoryLoad", "cpuLoad"}
STREAM_KEYS = {"name", "from", "to", "grouping"}
GROUPING_KEYS = {"type", "args", "streamId", "customClass"}
INCLUDE_KEYS = {"file", "resource", "override"}
GROUPINGS = {"SHUFFLE": Grouping.SHUFFLE, "ALL": Grouping.ALL, "GLOBAL": Grouping.GLOBAL, "NONE": Grouping.NONE,
             "DIRECT": Grouping.DIRECT, "LOCAL_OR_SHUFFLE": Grouping.LOCAL_OR_SHUFFLE, "FIELDS": None,
             "CUSTOM": None}
REF = re.compile(r"\$\{([^}]+)\}")
LIST_REF = re.compile(r"^(.+)\[(\d+)\]$")

# ``--filter FILE`` / ``--env-filter`` of ``bittern run`` / ``submit`` (set by the CLI).
OPTIONS = {"filter": None, "env_filter": False}


class FluxError(TopologyError):
    """A Flux file that cannot run here (one line naming the file and what)."""


def is_flux(path):
    return str(path).lower().endswith(EXTENSIONS)


def add_flux_args(parser):
    """Storm's flux CLI options on ``bittern run`` / ``submit``."""
    parser.add_argument("--filter", metavar="FILE",
                        help="Flux YAML: replace ${name} with the property of FILE (a .properties file)")
    parser.add_argument("--env-filter", action="store_true",
                        help="Flux YAML: replace ${ENV-NAME} with the environment variable NAME")


def flux_options(args):
    configure(args.file, args.filter, args.env_filter)


def configure(path, filter_file=None, env_filter=False):
    """The CLI's ``--filter`` / ``--env-filter``, for the Flux file it is about to load."""
    if (filter_file or env_filter) and not is_flux(path):
        raise BitternError(f"--filter and --env-filter are for Flux YAML files (.yaml), not {path!r}")
    OPTIONS["filter"] = os.path.abspath(filter_file) if filter_file else None
    OPTIONS["env_filter"] = bool(env_filter)


# --------------------------------------------------------------------------------------
# Reading: properties, substitution, YAML, includes
# --------------------------------------------------------------------------------------

def read_properties(path):
    """A Java ``.properties`` file as a dict (``key=value``, ``key: value`` or ``key value``;
    ``#``/``!`` comments, backslash continuations and escapes)."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read().splitlines()
    except OSError as e:
        raise FluxError(f"--filter {path!r}: cannot read it: {e.strerror or e}") from None
    props, logical = {}, ""
    for line in raw:
        line = line.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an odd number of backslashes: continued on the next line
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        props[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        props[key] = value
    return props


def _split_property(line):
    i, n = 0, len(line)
    while i < n and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest)


def _unescape(text):
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6] or ""):
            out.append(chr(int(text[i + 2:i + 6], 16)))
            i += 6
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
        i += 2
    return "".join(out)


def substitute(text, where, properties=None, env=None):
    """Storm's flux substitution on the text, line by line, before it is parsed:
    ``${name}`` from ``properties``, ``${name[i]}`` an element of a list-valued one
    (``["a", "b"]``), ``${ENV-NAME}`` from ``env`` (None: ``--env-filter`` not given). A
    reference with no value is an error naming the line (Storm would keep the text and
    warn); references in comment lines are left as they are."""
    out = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if "${" not in line or line.lstrip().startswith("#"):
            out.append(line)
            continue
        out.append(REF.sub(lambda m: _value(m.group(1), f"{where} line {lineno}", properties, env), line))
    return "\n".join(out)


def _value(var, where, properties, env):
    if var.startswith("ENV-"):
        if env is None:
            raise FluxError(f"{where}: ${{{var}}} is an environment variable: add --env-filter to substitute it")
        if var[4:] not in env:
            raise FluxError(f"{where}: ${{{var}}}: the environment variable {var[4:]!r} is not set")
        return env[var[4:]]
    if properties is None:
        raise FluxError(f"{where}: ${{{var}}} has no value: give its properties with --filter FILE")
    if var in properties:
        return properties[var]
    m = LIST_REF.match(var)
    if m and m.group(1) in properties:
        items = [s.strip() for s in properties[m.group(1)].strip()[1:-1].split(",")]
        i = int(m.group(2))
        if i >= len(items):
            raise FluxError(f"{where}: ${{{var}}}: property {m.group(1)!r} has {len(items)} element(s)")
        item = items[i]
        return item[1:-1] if len(item) >= 2 and item[0] == item[-1] and item[0] in "\"'" else item
    raise FluxError(f"{where}: ${{{var}}}: no property {var!r} in the --filter file")


def _load_yaml(path, properties, env):
    """One file: read, substitute, parse; a mapping with Flux's top-level keys."""
    try:
        import yaml
    except ImportError:
        raise FluxError(f"{os.path.basename(path)}: reading Flux YAML needs PyYAML: "
                        "pip install 'bittern[flux]'") from None
    name = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise FluxError(f"Flux file {path!r}: cannot read it: {e.strerror or e}") from None
    text = substitute(text, name, properties, env)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise FluxError(f"{name}{where}: not valid YAML: {what}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise FluxError(f"{name}: a Flux file is a mapping (name, config, spouts, bolts, streams), "
                        f"got a {type(doc).__name__}")
    unknown = [k for k in doc if k not in TOP_KEYS]
    if unknown:
        raise FluxError(f"{name}: unknown key {unknown[0]!r} (Flux knows {', '.join(sorted(TOP_KEYS))})")
    return doc


def parse(path, properties=None, env=None):
    """The Flux model of ``path`` with its includes merged (as Flux does: one level; a
    later file replaces a spout, bolt, name or config key only with ``override: true``;
    streams add up): ``{"name", "config", "spouts": {id: def}, "bolts": {id: def},
    "streams": [...], "components", "topologySource", "workerHooks", "files"}``."""
    path = os.path.abspath(path)
    doc = _load_yaml(path, properties, env)
    model = {"name": doc.get("name"), "config": _mapping(doc.get("config"), path, "config"),
             "spouts": _by_id(doc.get("spouts"), path, "spouts"), "bolts": _by_id(doc.get("bolts"), path, "bolts"),
             "streams": _list(doc.get("streams"), path, "streams"),
             "components": _list(doc.get("components"), path, "components"),
             "topologySource": doc.get("topologySource"), "workerHooks": _list(doc.get("workerHooks"), path,
                                                                                 "workerHooks"),
             "files": {path}}
    for inc in _list(doc.get("includes"), path, "includes"):
        _include(model, path, inc, properties, env)
    return model


def _include(model, path, inc, properties, env):
    name = os.path.basename(path)
    if not isinstance(inc, dict) or "file" not in inc:
        raise FluxError(f"{name}: an include is a mapping with a file (and resource, override), got {inc!r}")
    unknown = [k for k in inc if k not in INCLUDE_KEYS]
    if unknown:
        raise FluxError(f"{name}: include {inc.get('file')!r}: unknown key {unknown[0]!r}")
    target = find_include(path, str(inc["file"]), bool(inc.get("resource", False)))
    override = bool(inc.get("override", False))
    other = _load_yaml(target, properties, env)  # (Flux does not follow an included file's includes)
    if other.get("name") is not None and (model["name"] is None or override):
        model["name"] = other["name"]
    for key, val in _mapping(other.get("config"), target, "config").items():
        if override or key not in model["config"]:
            model["config"][key] = val
    for kind in ("spouts", "bolts"):
        for vid, vdef in _by_id(other.get(kind), target, kind).items():
            if override or vid not in model[kind]:
                model[kind][vid] = vdef
    model["streams"] += _list(other.get("streams"), target, "streams")
    model["components"] += _list(other.get("components"), target, "components")
    model["workerHooks"] += _list(other.get("workerHooks"), target, "workerHooks")
    if other.get("topologySource") is not None and model["topologySource"] is None:
        model["topologySource"] = other["topologySource"]
    model["files"].add(target)


def find_include(path, file, resource):
    """An included file: absolute, or relative to the including file's directory (then
    the working directory); a ``resource: true`` one (a classpath resource in Storm) is
    looked for beside the including file and in its ``resources/``."""
    here = os.path.dirname(path)
    rel = file.lstrip("/") if resource else file
    if resource:
        cands = [os.path.join(here, rel), os.path.join(here, "resources", rel)]
    elif os.path.isabs(file):
        cands = [file]
    else:
        cands = [os.path.join(here, file), os.path.abspath(file)]
    for c in cands:
        if os.path.isfile(c):
            return os.path.abspath(c)
    raise FluxError(f"{os.path.basename(path)}: include {file!r} not found (looked at {', '.join(cands)})")


def _mapping(val, path, key):
    if val is None:
        return {}
    if not isinstance(val, dict):
        raise FluxError(f"{os.path.basename(path)}: {key} must be a mapping, got {type(val).__name__}")
    return dict(val)


def _list(val, path, key):
    if val is None:
        return []
    if not isinstance(val, list):
        raise FluxError(f"{os.path.basename(path)}: {key} must be a list, got {type(val).__name__}")
    return list(val)


def _by_id(val, path, key):
    kind = key[:-1]
    out = {}
    for item in _list(val, path, key):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"]:
            raise FluxError(f"{os.path.basename(path)}: each of {key} needs an id, got {item!r}")
        if item["id"] in out:
            raise FluxError(f"{os.path.basename(path)}: {kind} {item['id']!r} is defined twice")
        out[item["id"]] = dict(item, _file=path)
    return out


# --------------------------------------------------------------------------------------
# Translation into Bittern's definition
# --------------------------------------------------------------------------------------

def load(path, name=None, filter_file=None, env_filter=None):
    """``path`` as a validated :class:`~bittern.api.topology.TopologyDef` (``filter_file``
    and ``env_filter`` default to the CLI's :data:`OPTIONS`)."""
    path = os.path.abspath(path)
    if filter_file is None:
        filter_file = OPTIONS["filter"]
    if env_filter is None:
        env_filter = OPTIONS["env_filter"]
    properties = read_properties(filter_file) if filter_file else None
    env = dict(os.environ) if env_filter else None
    if not os.path.isfile(path):
        raise FluxError(f"Flux file {path!r} does not exist")
    try:
        model = parse(path, properties, env)
        tdef = translate(model, path, name)
    except FluxError:
        raise
    except TopologyError as e:  # from the shared validation: name the file
        raise FluxError(f"{os.path.basename(path)}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a shape of YAML not foreseen: still one line naming the file
        raise FluxError(f"{os.path.basename(path)}: cannot be read as a Flux topology: {type(e).__name__}: {e}") \
            from None
    tdef.source = {"file": path, "module": None, "sys_path": [os.path.dirname(path)]}
    return tdef


def translate(model, path, name=None):
    from ..api.topology import _build
    from .streamparse import translate_config
    fname = os.path.basename(path)
    _refuse_java(model, fname)
    topo_name = name or model["name"] or os.path.splitext(fname)[0]
    if not isinstance(topo_name, str):
        raise FluxError(f"{fname}: name must be a string, got {topo_name!r}")
    inputs, direct = _streams(model, fname)
    for bolt, srcs in inputs.items():
        for src, _ in srcs:
            if src in model["bolts"] and src not in inputs:
                raise FluxError(f"{fname}: bolt {bolt!r} reads bolt {src!r}, which no stream feeds: Flux leaves "
                                f"{src!r} out of the topology")
    for kind in ("spout", "bolt"):  # (every one: Flux builds a bolt no stream feeds too)
        for vid, vdef in model[kind + "s"].items():
            _check_class(kind, vid, vdef, path)
    specs = []
    for kind in ("spout", "bolt"):
        for vid, vdef in model[kind + "s"].items():
            if kind == "bolt" and vid not in inputs:
                continue  # Flux adds a bolt to the topology with its first stream; none: left out
            specs.append(_component(kind, vid, vdef, inputs.get(vid), direct.get(vid, set()), path))
    conf = translate_config(model["config"], f"{fname}: config", topology_level=True)
    return _build(topo_name, specs, conf, where=f"Flux topology {topo_name!r}")


def _refuse_java(model, fname):
    java = "Bittern runs Flux's shell components (FluxShellSpout, FluxShellBolt) only"
    if model["topologySource"] is not None:
        cls = (model["topologySource"] or {}).get("className") if isinstance(model["topologySource"], dict) else None
        raise FluxError(f"{fname}: topologySource {cls or ''} is a Java topology; {java}")
    for bean in model["components"]:
        bid = bean.get("id") if isinstance(bean, dict) else bean
        cls = bean.get("className") if isinstance(bean, dict) else None
        raise FluxError(f"{fname}: components: bean {bid!r} ({cls}) is a Java object; {java}")
    for hook in model["workerHooks"]:
        cls = hook.get("className") if isinstance(hook, dict) else hook
        raise FluxError(f"{fname}: workerHooks: {cls} is a Java worker hook; {java}")


def _streams(model, fname):
    """``({bolt: {(source, stream): grouping}}, {source: {streams read with DIRECT}})``."""
    inputs, direct = {}, {}
    comps = set(model["spouts"]) | set(model["bolts"])
    for s in model["streams"]:
        if not isinstance(s, dict):
            raise FluxError(f"{fname}: each stream is a mapping (from, to, grouping), got {s!r}")
        label = s.get("name") or f"{s.get('from')} --> {s.get('to')}"
        where = f"{fname}: stream {label!r}"
        unknown = [k for k in s if k not in STREAM_KEYS]
        if unknown:
            raise FluxError(f"{where}: unknown key {unknown[0]!r} (from, to, grouping, name)")
        src, dst, g = s.get("from"), s.get("to"), s.get("grouping")
        if not isinstance(src, str) or src not in comps:
            raise FluxError(f"{where}: from {src!r} is not a spout or bolt of this file "
                            f"({', '.join(sorted(map(str, comps)))})")
        if not isinstance(dst, str) or dst not in model["bolts"]:
            raise FluxError(f"{where}: to {dst!r} is not a bolt of this file "
                            f"({', '.join(sorted(map(str, model['bolts'])))})")
        if not isinstance(g, dict):
            raise FluxError(f"{where}: needs a grouping (type: SHUFFLE, FIELDS, ...)")
        unknown = [k for k in g if k not in GROUPING_KEYS]
        if unknown:
            raise FluxError(f"{where}: grouping: unknown key {unknown[0]!r} (type, args, streamId, customClass)")
        kind = g.get("type")
        if not isinstance(kind, str) or kind not in GROUPINGS:
            raise FluxError(f"{where}: grouping type {kind!r} is not one of {', '.join(GROUPINGS)}")
        if kind == "CUSTOM" or g.get("customClass") is not None:
            cls = g.get("customClass")
            cls = cls.get("className") if isinstance(cls, dict) else cls
            raise FluxError(f"{where}: custom grouping {cls} is a Java class; Bittern cannot run Java groupings")
        stream = g.get("streamId") or DEFAULT_STREAM
        if not isinstance(stream, str):
            raise FluxError(f"{where}: streamId must be a string, got {stream!r}")
        if kind == "FIELDS":
            args = g.get("args")
            if not isinstance(args, list) or not args or not all(isinstance(a, str) and a for a in args):
                raise FluxError(f"{where}: a FIELDS grouping needs args: [field, ...], got {args!r}")
            grouping = Grouping.fields(*args)
        else:
            grouping = GROUPINGS[kind]
        if kind == "DIRECT":
            direct.setdefault(src, set()).add(stream)
        mine = inputs.setdefault(dst, {})
        if (src, stream) in mine:
            raise FluxError(f"{where}: bolt {dst!r} already reads {src!r} stream {stream!r}")
        mine[(src, stream)] = grouping
    return inputs, direct


def _check_class(kind, vid, vdef, path):
    """Only Flux's shell wrappers run here: anything else is a Java class."""
    where = f"{os.path.basename(vdef.get('_file') or path)}: {kind} {vid!r}"
    cls = vdef.get("className")
    if cls == WRAPPERS[kind]:
        return
    if cls in WRAPPERS.values():
        raise FluxError(f"{where}: {cls} is a {'spout' if kind == 'bolt' else 'bolt'}, listed under {kind}s")
    if cls in PLAIN_SHELL:
        raise FluxError(f"{where}: {cls} declares no outputs and Flux cannot place it; use {PLAIN_SHELL[cls]}")
    raise FluxError(f"{where}: className {cls} is a Java {kind}; Bittern runs Flux's shell components "
                    f"only ({WRAPPERS[kind]})")


def _component(kind, vid, vdef, inputs, direct, path):
    from ..multilang import ShellBolt, ShellSpout
    from .streamparse import translate_config
    fname = os.path.basename(vdef.get("_file") or path)
    where = f"{fname}: {kind} {vid!r}"
    unknown = [k for k in vdef if k not in VERTEX_KEYS and k != "_file"]
    if unknown:
        raise FluxError(f"{where}: unknown key {unknown[0]!r}")
    cls = vdef.get("className")
    for key in ("properties", "factory", "factoryArgs"):
        if vdef.get(key):
            raise FluxError(f"{where}: {key} set Java fields or call a Java factory; {cls} takes constructorArgs "
                            "and configMethods")
    argv, streams = _constructor(vdef.get("constructorArgs"), where)
    extra = {}
    calls = vdef.get("configMethods") or []
    if not isinstance(calls, list):
        raise FluxError(f"{where}: configMethods must be a list, got {type(calls).__name__}")
    for call in calls:
        _config_method(call, streams, extra, where)
    conf = translate_config(dict(extra, **_mapping_of(vdef.get("config"), where)), where)
    outputs = [Stream(fields=fields, name=s, direct=s in direct) for s, fields in streams.items()]
    missing = sorted(direct - set(streams))
    if missing:
        raise FluxError(f"{where}: a stream reads its {missing[0]!r} stream with DIRECT, which it does not declare "
                        f"(streams: {', '.join(streams) or 'none'})")
    command, script = _script(argv, path)
    par = vdef.get("parallelism", 1)
    try:
        if kind == "spout":
            return ShellSpout.spec(command=command, script=script, outputs=outputs, name=vid, par=par, config=conf)
        return ShellBolt.spec(command=command, script=script, outputs=outputs, name=vid, inputs=inputs, par=par,
                              config=conf)
    except TopologyError as e:
        raise FluxError(f"{where}: {e}") from None


def _mapping_of(val, where):
    if val is None:
        return {}
    if not isinstance(val, dict):
        raise FluxError(f"{where}: config must be a mapping, got {type(val).__name__}")
    return val


def _strings(val, where, what):
    if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
        raise FluxError(f"{where}: {what} must be a list of strings, got {val!r}")
    return list(val)


def _refs(args, where):
    for a in args:
        if isinstance(a, dict) and ("ref" in a or "reflist" in a):
            raise FluxError(f"{where}: argument {a!r} refers to a Java component bean; Bittern cannot build it")


def _constructor(args, where):
    """FluxShell*(String[] command[, String[] outputFields]): ``(argv, {stream: fields})``."""
    if not isinstance(args, list) or not 1 <= len(args) <= 2:
        raise FluxError(f"{where}: constructorArgs must be [command] or [command, output fields], got {args!r}")
    _refs(args, where)
    argv = _strings(args[0], where, "the command (constructorArgs[0])")
    if not argv or not argv[0].strip():
        raise FluxError(f"{where}: the command (constructorArgs[0]) is empty")
    streams = {}
    if len(args) == 2:
        streams[DEFAULT_STREAM] = _strings(args[1], where, "the output fields (constructorArgs[1])")
    return argv, streams


def _config_method(call, streams, extra, where):
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise FluxError(f"{where}: each of configMethods is a mapping with a name (and args), got {call!r}")
    name, args = call["name"], call.get("args") or []
    if not isinstance(args, list):
        args = [args]
    _refs(args, where)
    here = f"{where}: configMethod {name}"
    if name == "setDefaultStream" and len(args) == 1:
        streams[DEFAULT_STREAM] = _strings(args[0], here, "the fields")
    elif name == "setNamedStream" and len(args) == 2 and isinstance(args[0], str) and args[0]:
        streams[args[0]] = _strings(args[1], here, "the fields")
    elif name == "addComponentConfig" and len(args) == 2 and isinstance(args[0], str):
        extra[args[0]] = args[1]
    elif name == "changeChildCWD" and args in ([True], [False]):
        if not args[0]:
            raise FluxError(f"{here}(false): the command always runs in the Flux file's directory here")
    elif name in ("setDefaultStream", "setNamedStream", "addComponentConfig", "changeChildCWD"):
        raise FluxError(f"{here}: wrong arguments {args!r}")
    elif name == "setEnv":
        raise FluxError(f"{here}: the command's environment cannot be set per component here; set it for "
                        "the topology's processes instead")
    else:
        raise FluxError(f"{here} is not a method of Flux's shell wrappers (setDefaultStream, setNamedStream, "
                        "addComponentConfig, changeChildCWD)")


def _script(argv, path):
    """``(command, script)``: a last argument that names a file beside the Flux file or in
    its ``resources/`` is the script, which Bittern's multilang host finds there."""
    here = os.path.dirname(path)
    last = argv[-1]
    if len(argv) > 1 and not os.path.isabs(last):
        for base in (here, os.path.join(here, "resources")):
            if os.path.isfile(os.path.join(base, last)):
                return argv[:-1], last
    return argv, None


__all__ = ["OPTIONS", "FluxError", "add_flux_args", "configure", "flux_options", "is_flux", "load", "parse", "read_properties", "substitute",
           "translate"]
