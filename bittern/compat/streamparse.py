"""Run a streamparse project's topology unchanged.

``bittern run topologies/wordcount.py`` on a file that defines a
``streamparse.Topology`` subclass: :func:`find` (asked by ``bittern/loader.py``
when the file imported streamparse) hands back a builder that translates the
DSL into Bittern's own specs and validates them with the same ``_build`` as a
Bittern topology:

* Python components (``Spout.spec``/``Bolt.spec`` of pystorm ``Spout``, ``Bolt``,
  ``BatchingBolt``, ``TicklessBatchingBolt`` subclasses; streamparse declares them
  as ``streamparse_run module.Class``) become multilang components
  (``bittern.ShellSpout``/``ShellBolt``) whose command is this module run with
  ``python -m bittern.compat.streamparse [-s json|msgpack] module.Class``: it puts
  the project's directories on ``sys.path`` and hands over to streamparse's own
  ``streamparse_run``. The class must resolve here, at submit time.
* ``ShellBolt.spec``/``ShellSpout.spec`` with another command run that command;
  a ``script`` that names a file beside the topology or in the project's ``src/``
  (what streamparse ships as the jar's resources) is found there.
* ``JavaBolt``/``JavaSpout`` and Java custom groupings cannot run: one line names
  the component.
* Outputs (field lists, named and direct ``Stream``\\ s), inputs (a dict of
  groupings or a list, meaning shuffle, or direct for a direct stream) and the
  groupings carry over; ``Grouping.GLOBAL`` (Storm's empty fields grouping) is
  Bittern's global grouping.
* Config (the topology's ``config = {...}`` and each spec's ``config``) keeps
  Storm's key names, which Bittern shares (``topology.message.timeout.secs``,
  ``topology.max.spout.pending``, ``topology.tick.tuple.freq.secs``,
  ``topology.workers``, ``topology.acker.executors``: 0 turns acking off; see
  ``bittern/config.py``). Storm tracks every tuple a spout emits with an id
  unless told otherwise, so a topology silent about it runs ``ATLEAST_ONCE``.
  ``topology.*`` keys with no Bittern meaning are dropped with a debug message;
  other keys (``pystorm.log.*``, the user's own) reach the components' ``storm_conf``.
* The serializer: ``-s`` in a ``streamparse_run`` script, else the project's
  ``config.json`` ``"serializer"`` (as ``sparse`` does), pins it for the
  component; without either the child speaks whatever the host speaks
  (``topology.multilang.serializer``, told through ``BITTERN_MULTILANG_SERIALIZER``).

Nothing here imports streamparse until it is handed a module that did.
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import shlex
import sys

from ..errors import TopologyError

log = logging.getLogger("bittern.compat.streamparse")

RUNNER_MODULE = "bittern.compat.streamparse"
SERIALIZER_ENV = "BITTERN_MULTILANG_SERIALIZER"
SERIALIZERS = ("json", "msgpack")
STORM_RUN_COMMANDS = ("streamparse_run",)
# Namespaces of Storm's own settings: an unknown key here means nothing to Bittern.
STORM_PREFIXES = ("topology.", "storm.", "nimbus.", "supervisor.", "worker.", "drpc.", "transactional.",
                  "ui.", "logviewer.", "dev.zookeeper.", "java.library.path")
RELIABILITY_KEY = "topology.reliability.mode"
ACKERS_KEY = "topology.acker.executors"


def find(module, path):
    """``[(attr, builder)]`` for each streamparse ``Topology`` subclass the file defines."""
    from streamparse.dsl.topology import Topology as SpTopology
    found = []
    for attr, val in vars(module).items():
        if isinstance(val, type) and issubclass(val, SpTopology) and val is not SpTopology \
                and val.__module__ == module.__name__:
            found.append((attr, StreamparseTopology(val, path)))
    return found


class StreamparseTopology:
    """The loader's builder for one streamparse ``Topology`` class."""

    topology_name = None  # the file's name, as sparse names it

    def __init__(self, cls, path):
        self.cls = cls
        self.path = os.path.abspath(path)
        self.where = f"streamparse topology {cls.__name__}"

    def build(self, name=None):
        from ..api.topology import _build
        project_ser = project_serializer(self.path)
        specs = [self._translated(s, project_ser) for s in getattr(self.cls, "specs", None) or []]
        config = translate_config(self.cls.config or {}, self.where, topology_level=True)
        return _build(name or self.cls.__name__, specs, config, where=self.where)

    # -- one component ------------------------------------------------------------------
    def _translated(self, spec, project_ser):
        try:
            return self._component(spec, project_ser)
        except TopologyError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the file holds: one line naming the component
            raise TopologyError(f"component {getattr(spec, 'name', None)!r}: cannot be translated: "
                                f"{type(e).__name__}: {e}") from None

    def _component(self, spec, project_ser):
        from streamparse.dsl.bolt import JavaBoltSpec, ShellBoltSpec
        from streamparse.dsl.component import JavaComponentSpec

        from ..multilang import ShellBolt, ShellSpout
        name = spec.name
        cls = spec.component_cls
        if isinstance(spec, JavaComponentSpec):
            java = getattr(getattr(spec, "component_object", None), "java_object", None)
            what = getattr(java, "full_class_name", None) or "serialized Java"
            raise TopologyError(f"component {name!r}: {cls.__name__} is a Java component ({what}); "
                                "Bittern runs Python and multilang components only")
        kind = "bolt" if isinstance(spec, ShellBoltSpec) else "spout"
        shell = spec.component_object.shell
        command, script, serializer = self._command(name, kind, cls, shell.execution_command,
                                                    shell.script or "", project_ser)
        par = _parallelism(name, spec.par)
        try:
            conf = json.loads(spec.config) if isinstance(spec.config, str) else dict(spec.config or {})
        except ValueError as e:
            raise TopologyError(f"component {name!r}: config is not valid JSON: {e}") from None
        conf = translate_config(conf, f"component {name!r}")
        outputs = _outputs(spec.outputs)
        if kind == "bolt":
            return ShellBolt.spec(command=command, script=script, outputs=outputs, name=name,
                                  inputs=_inputs(name, spec.inputs), par=par, config=conf,
                                  serializer=serializer)
        return ShellSpout.spec(command=command, script=script, outputs=outputs, name=name, par=par,
                               config=conf, serializer=serializer)

    def _command(self, name, kind, cls, command, script, project_ser):
        """``(argv, script, serializer)`` for Bittern's multilang host."""
        try:
            argv = shlex.split(command or "")
            args = shlex.split(script)
        except ValueError as e:
            raise TopologyError(f"component {name!r}: cannot parse command {command!r} {script!r}: {e}") \
                from None
        if not argv:
            raise TopologyError(f"component {name!r}: the shell component has no command")
        if os.path.basename(argv[0]) in STORM_RUN_COMMANDS:
            serializer, target = _run_args(name, argv[1:] + args)
            serializer = serializer or project_ser
            if "<locals>" in getattr(cls, "__qualname__", "") and target.endswith("." + cls.__name__):
                raise TopologyError(f"component {name!r}: class {cls.__qualname__} is defined inside a "
                                    "function; streamparse_run cannot import it (define it at module level)")
            target = self._resolve(name, kind, target)
            cmd = [sys.executable, "-m", RUNNER_MODULE] + (["-s", serializer] if serializer else []) + [target]
            return cmd, None, serializer
        # another program: a first argument that is a file of the project is the script
        if len(args) == 1 and not os.path.isabs(args[0]):
            found = self._project_file(args[0])
            if found:
                return argv, found, None
        return argv + args, None, None

    def _project_file(self, rel):
        """``rel`` beside the topology file, in its resources/, or in the project's src/:
        a path relative to the topology's directory (Bittern's multilang host resolves it)."""
        from ..loader import code_paths
        here = os.path.dirname(self.path)
        for base in code_paths(self.path) + [os.path.join(here, "resources")]:
            cand = os.path.join(base, rel)
            if os.path.isfile(cand):
                return os.path.relpath(cand, here)
        return None

    def _resolve(self, name, kind, target):
        """Check that ``module.Class`` imports here and is a pystorm component of the right
        kind; a class defined in the topology file itself is named by the file's module."""
        import pystorm

        from ..loader import MODULE_NAME
        mod_name, _, cls_name = target.rpartition(".")
        if not mod_name or not cls_name:
            raise TopologyError(f"component {name!r}: {target!r} is not a 'module.Class' name")
        if mod_name == MODULE_NAME:  # the topology file: the child imports it by its file name
            stem = os.path.splitext(os.path.basename(self.path))[0]
            if not stem.isidentifier():
                raise TopologyError(f"component {name!r}: class {cls_name} is defined in the topology "
                                    f"file, whose name {stem!r} cannot be imported; move it to src/")
            mod, target = sys.modules.get(MODULE_NAME), f"{stem}.{cls_name}"
        else:
            try:
                mod = importlib.import_module(mod_name)
            except Exception as e:  # noqa: BLE001 - user code: reported with its cause
                raise TopologyError(f"component {name!r}: cannot resolve class {target!r}: "
                                    f"{type(e).__name__}: {e}") from None
        obj = getattr(mod, cls_name, None)
        if not isinstance(obj, type):
            raise TopologyError(f"component {name!r}: cannot resolve class {target!r}: module "
                                f"{mod_name!r} has no class {cls_name!r}")
        base = pystorm.Spout if kind == "spout" else pystorm.Bolt
        if not issubclass(obj, base):
            raise TopologyError(f"component {name!r}: {target!r} is not a pystorm {base.__name__} subclass")
        return target


def _run_args(name, args):
    """``[-s json|msgpack] module.Class`` (streamparse_run's arguments)."""
    serializer, rest = None, []
    it = iter(args)
    for a in it:
        if a in ("-s", "--serializer"):
            serializer = next(it, None)
        elif a.startswith("--serializer="):
            serializer = a.partition("=")[2]
        else:
            rest.append(a)
    if serializer is not None and serializer not in SERIALIZERS:
        raise TopologyError(f"component {name!r}: serializer must be one of {', '.join(SERIALIZERS)}, "
                            f"got {serializer!r}")
    if len(rest) != 1:
        raise TopologyError(f"component {name!r}: streamparse_run takes one 'module.Class', got {rest!r}")
    return serializer, rest[0]


def _parallelism(name, par):
    """An int, or sparse's per-environment dict (Bittern has one environment: the largest)."""
    if isinstance(par, dict):
        if not par:
            raise TopologyError(f"component {name!r}: par is an empty dict")
        chosen = max(par.values())
        log.debug("component %r: par %r is per streamparse environment; using %s", name, par, chosen)
        return chosen
    return par


def _outputs(streams):
    from ..api.stream import Stream
    out = []
    for sname, info in (streams or {}).items():
        out.append(Stream(fields=list(info.output_fields or ()), name=sname, direct=bool(info.direct)))
    return out


def _inputs(name, inputs):
    """streamparse's resolved ``{GlobalStreamId: thrift Grouping}`` as Bittern inputs."""
    out = {}
    for gsid, grouping in (inputs or {}).items():
        src = gsid.componentId if isinstance(gsid.componentId, str) else getattr(gsid.componentId, "name", None)
        out[(src, gsid.streamId or "default")] = _grouping(name, src, grouping)
    return out


def _grouping(name, src, g):
    from ..api.stream import Grouping
    if g.fields is not None:
        return Grouping.fields(*g.fields) if g.fields else Grouping.GLOBAL
    for attr, value in (("shuffle", Grouping.SHUFFLE), ("all", Grouping.ALL), ("none", Grouping.NONE),
                        ("direct", Grouping.DIRECT), ("local_or_shuffle", Grouping.LOCAL_OR_SHUFFLE)):
        if getattr(g, attr, None) is not None:
            return value
    if getattr(g, "custom_object", None) is not None or getattr(g, "custom_serialized", None) is not None:
        raise TopologyError(f"component {name!r}: input {src!r} uses a Java custom grouping, which Bittern "
                            "cannot run")
    raise TopologyError(f"component {name!r}: input {src!r}: unsupported grouping {g!r}")


def translate_config(conf, where, topology_level=False):
    """Storm's config as Bittern's. ``bittern.config.check`` knows Storm's names
    (``topology.workers``, ``topology.acker.executors``, ...) and accepts its JVM/Kryo
    keys quietly; a ``topology.*`` key it would warn about means nothing here and is
    dropped (debug). A topology that says nothing about acking gets Storm's default:
    ackers run, so ``ATLEAST_ONCE``. Keys outside Storm's namespaces reach the
    components' ``storm_conf``."""
    from .. import config as cfg
    if not isinstance(conf, dict):
        raise TopologyError(f"{where}: config must be a dict, got {type(conf).__name__}")
    known = cfg.defaults()
    quiet = set(getattr(cfg, "ALIASES", {})) | set(getattr(cfg, "TRANSLATED", {})) \
        | set(getattr(cfg, "FOREIGN_KEYS", ()))
    foreign_prefixes = tuple(getattr(cfg, "FOREIGN_PREFIXES", ()))
    out = {}
    for key, val in conf.items():
        if not isinstance(key, str):
            raise TopologyError(f"{where}: config keys must be strings, got {key!r}")
        if key in known or key in quiet or (foreign_prefixes and key.startswith(foreign_prefixes)):
            out[key] = val
        elif key.startswith("topology."):  # (bittern.* keys go on: check() reports their typos)
            log.debug("%s: Storm config key %r has no meaning in Bittern; ignored", where, key)
        else:
            if key.startswith(STORM_PREFIXES):
                log.debug("%s: Storm config key %r has no meaning in Bittern; passed to the components "
                          "only", where, key)
            out[key] = val
    if topology_level and RELIABILITY_KEY not in conf and ACKERS_KEY not in conf:
        out[RELIABILITY_KEY] = "ATLEAST_ONCE"  # Storm runs ackers unless told otherwise
    return out


def project_serializer(topology_path):
    """``"serializer"`` of the streamparse project's ``config.json`` (the project root is
    the topology directory's parent, or that directory itself), or None."""
    here = os.path.dirname(os.path.abspath(topology_path))
    for base in (os.path.dirname(here), here):
        path = os.path.join(base, "config.json")
        if not os.path.isfile(path):
            continue
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise TopologyError(f"streamparse project config {path!r} cannot be read: {e}") from None
        ser = doc.get("serializer") if isinstance(doc, dict) else None
        if ser is not None and ser not in SERIALIZERS:
            raise TopologyError(f"streamparse project config {path!r}: serializer must be one of "
                                f"{', '.join(SERIALIZERS)}, got {ser!r}")
        return ser
    return None


# --------------------------------------------------------------------------------------
# The child: python -m bittern.compat.streamparse [-s json|msgpack] module.Class
# --------------------------------------------------------------------------------------

def main(argv=None):
    """Run a pystorm component as ``streamparse_run`` would, with the project's
    directories (found from the working directory, the topology's) on ``sys.path``."""
    parser = argparse.ArgumentParser(prog="python -m bittern.compat.streamparse",
                                     description="run a streamparse/pystorm component under Bittern")
    parser.add_argument("-s", "--serializer", choices=SERIALIZERS, default=None)
    parser.add_argument("target_class", help="module.Class")
    args = parser.parse_args(argv)
    serializer = args.serializer or os.environ.get(SERIALIZER_ENV) or "json"
    from ..loader import code_paths
    paths = code_paths(os.path.join(os.getcwd(), "topology.py"))
    sys.path[:0] = [p for p in paths if p not in sys.path]
    from streamparse.run import main as streamparse_run
    sys.argv = ["streamparse_run", "-s", serializer, args.target_class]
    streamparse_run()


if __name__ == "__main__":
    main()
