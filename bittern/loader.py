"""Load a topology file: import it as a module and find its one topology.

The same function runs in the CLI (to validate and plan) and in every instance
process (to import the component classes), so a class defined in the topology
file resolves to the same ``module:qualname`` everywhere.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import traceback

from .api.topology import Topology, TopologyBuilder, import_path
from .errors import TopologyError

MODULE_NAME = "bittern_topology"
# Topologies written for other engines (streamparse's DSL, heronpy): each module has
# ``find(module, path) -> [(attr, builder)]``, ``builder.build(name) -> TopologyDef``
# and ``builder.topology_name`` (None: the file's name). It is asked only when the
# user's file imported the package it adapts, and must not import that package itself.
FOREIGN = {"streamparse": "bittern.compat.streamparse", "heronpy": "bittern.compat.heron"}


def code_paths(path):
    """The directories put on ``sys.path`` for a topology file: its own, and ``src/``
    beside it or its parent (streamparse projects keep components there)."""
    here = os.path.dirname(os.path.abspath(path))
    paths = [here]
    for cand in (os.path.join(here, "src"), os.path.join(os.path.dirname(here), "src")):
        if os.path.isdir(cand):
            paths.append(cand)
    return paths


# Packages a build system put a source tree under: Heron's pex files held its tree under
# ``heron/``, so Heron's examples import ``heron.examples.src.python...`` as well as
# ``examples.src.python...`` (the same modules, run from the tree's root).
TREE_PREFIXES = ("heron",)


def package_roots(path):
    """``(roots, prefixes)``: the directories a topology file's own absolute imports
    start from (its package tree's root), found from those imports: ``import a.b.c`` in
    ``ROOT/a/b/x.py`` gives ``ROOT``; ``prefixes`` are the :data:`TREE_PREFIXES` the file
    puts in front of its own package (``heron.a.b...``) where no directory says so.
    Nothing when the file imports nothing of its own tree that way (or does not parse:
    importing it reports that)."""
    import ast
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return [], []
    here = os.path.dirname(os.path.abspath(path)).split(os.sep)
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module]
    roots, prefixes = [], []
    for name in names:
        parts = name.split(".")
        for skip in ((0, 1) if parts[0] in TREE_PREFIXES else (0,)):
            j = next((j for j in range(min(len(parts) - skip, len(here) - 1), 0, -1)
                      if here[-j:] == parts[skip:skip + j]), 0)
            if j:
                root = os.sep.join(here[:-j]) or os.sep
                if root not in roots:
                    roots.append(root)
                if skip and parts[0] not in prefixes:
                    prefixes.append(parts[0])
                break
    return roots, prefixes


class _TreeAlias:
    """A meta path finder that makes ``PREFIX.top...`` the very modules ``top...`` of a
    package tree (one module, one class, whichever name imported it)."""

    def __init__(self, prefix, tops):
        self.prefix, self.tops = prefix, set(tops)

    def find_spec(self, fullname, path=None, target=None):
        head, _, rest = fullname.partition(".")
        if head != self.prefix:
            return None
        if not rest:  # the prefix itself, when nothing else provides it: an empty package
            if importlib.machinery.PathFinder.find_spec(fullname) is not None:
                return None
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if rest.split(".")[0] not in self.tops:
            return None
        real = importlib.import_module(rest)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=hasattr(real, "__path__"))

    def create_module(self, spec):
        rest = spec.name.partition(".")[2]
        return sys.modules[rest] if rest else None

    def exec_module(self, module):
        """(an aliased module ran already; the bare prefix is empty)"""


def add_package_roots(path):
    """Put the file's package tree roots (:func:`package_roots`) on ``sys.path``, after
    everything else (a source tree must not shadow what is installed: Heron's holds an
    unbuilt ``heronpy``), and alias the prefixed names it imports its own tree by."""
    roots, prefixes = package_roots(path)
    for root in roots:
        if root not in sys.path:
            sys.path.append(root)
    if not prefixes:
        return
    top = os.path.relpath(os.path.abspath(path), roots[0]).split(os.sep)[0]
    for prefix in prefixes:
        if any(os.path.isdir(os.path.join(r, prefix, top)) for r in roots):
            continue  # a real package there (a tree checked out as heron/): nothing to alias
        if not any(isinstance(f, _TreeAlias) and f.prefix == prefix and top in f.tops for f in sys.meta_path):
            sys.meta_path.insert(0, _TreeAlias(prefix, [top]))


def import_file(path, module_name=MODULE_NAME, sys_path=None):
    """Execute the file as module ``module_name``; user errors become a TopologyError
    that carries the user's traceback."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise TopologyError(f"topology file {path!r} does not exist")
    if not os.path.isfile(path):
        raise TopologyError(f"topology file {path!r} is not a file")
    for p in reversed(sys_path or code_paths(path)):
        if p not in sys.path:
            sys.path.insert(0, p)
    add_package_roots(path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TopologyError(f"topology file {path!r} cannot be imported (is it a .py file, or a Flux "
                            ".yaml?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # heronpy builds a class-style topology when the class is defined (it needs HERON_OPTIONS),
    # and a file may hand its topology over with build_and_submit() / Topology.write()
    try:
        with importlib.import_module(FOREIGN["heronpy"]).importing(path):
            spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 - user code: show the user their traceback
        sys.modules.pop(module_name, None)
        if isinstance(e, KeyboardInterrupt):
            raise
        raise user_error(path, f"topology file {path!r} failed to import", e) from None
    return module


# packages whose own checks a topology file may trip while it is imported
FOREIGN_PACKAGES = ("heronpy", "streamparse", "pystorm")


def user_error(path, what, e):
    """The TopologyError for an exception raised while running the user's file ``path``.
    When one of the adapted packages refused what the file asked (heronpy's,
    streamparse's or pystorm's code is on the way from the file's last line to the
    exception), it is one line naming the file's line and, when that package was
    working on one, the component; otherwise it carries the user's traceback, which is
    theirs to read."""
    frames, tb = [], e.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    mine = [i for i, t in enumerate(frames) if _same_file(t.tb_frame.f_code.co_filename, path)]
    after = frames[mine[-1] + 1:] if mine else []
    package = next((p for t in after for p in FOREIGN_PACKAGES if _in_package(t.tb_frame.f_code.co_filename, p)),
                   None)
    if package is None:
        err = TopologyError(f"{what}: {type(e).__name__}: {e}")
        err.user_traceback = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))
        return err
    line = frames[mine[-1]]
    comp = next((c for c in map(_spec_name, reversed(after)) if c), None)
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if text:
        text = f": {text}"
    else:  # (heronpy asserts without a message: show what the line asked)
        src = traceback.extract_tb(line, limit=1)[0].line
        text = f" at `{src}`" if src else ""
    return TopologyError(f"topology file {path!r} line {line.tb_lineno}: "
                         + (f"component {comp!r}: " if comp else "")
                         + f"{package} refused it: {type(e).__name__}{text}")


def _same_file(filename, path):
    return os.path.abspath(filename) == os.path.abspath(path)


def _in_package(filename, package):
    return f"{os.sep}{package}{os.sep}" in filename


def _spec_name(tb):
    """The name of the component spec a foreign package's frame was working on."""
    obj = tb.tb_frame.f_locals.get("self")
    name = getattr(obj, "name", None) if type(obj).__name__.endswith("ComponentSpec") else None
    return name if isinstance(name, str) and name else None


def find_topology(module, path):
    """The one topology a module defines (a Topology subclass or a TopologyBuilder)."""
    found = []
    for attr, val in vars(module).items():
        if isinstance(val, type) and issubclass(val, Topology) and val is not Topology \
                and val.__module__ == module.__name__:
            found.append((attr, val))
        elif isinstance(val, TopologyBuilder):
            found.append((attr, val))
    if not found:
        for package, adapter in FOREIGN.items():
            if package in sys.modules:
                found += importlib.import_module(adapter).find(module, path)
    if not found:
        raise TopologyError(f"topology file {path!r} defines no topology "
                            "(a Topology subclass or a TopologyBuilder)")
    if len(found) > 1:
        raise TopologyError(f"topology file {path!r} defines {len(found)} topologies "
                            f"({', '.join(a for a, _ in found)}); keep one per file")
    return found[0][1]


def load_topology(path, name=None):
    """Import ``path`` and return its validated :class:`TopologyDef` (a Storm Flux
    ``.yaml`` is read by :mod:`bittern.compat.flux` instead: nothing to import)."""
    path = os.path.abspath(path)
    flux = importlib.import_module("bittern.compat.flux")
    if flux.is_flux(path):
        return flux.load(path, name)
    module = import_file(path)
    topo = find_topology(module, path)
    default_name = name or (None if isinstance(topo, type) else getattr(topo, "topology_name", None)) \
        or os.path.splitext(os.path.basename(path))[0]
    try:
        tdef = topo.build(default_name)
    except TopologyError as e:
        raise TopologyError(f"{os.path.basename(path)}: {e}") from None
    tdef.source = {"file": path, "module": MODULE_NAME, "sys_path": code_paths(path)}
    return tdef


def load_class(tdef, class_path):
    """In an instance: import the topology's code, then resolve ``module:qualname``."""
    src = tdef.source
    if src.get("module") and src["module"] not in sys.modules:
        import_file(src["file"], src["module"], src.get("sys_path"))
    return import_path(class_path)
