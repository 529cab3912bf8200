"""The checkpoint store: where tasks save their state for checkpoint *n* (EFFECTIVELY_ONCE).

Layout. State files live in a directory (``bittern.checkpoint.dir``; empty means
``$BITTERN_HOME/checkpoints``; in cluster mode it must name a directory every
host shares)::

    <root>/<topology>/<checkpoint id>/task-<task>.bin

and the record of which checkpoints are complete lives in the state manager::

    checkpoints/<topology>/<checkpoint id>   {"id", "tasks", "completed_at", "layout"}

``layout`` is the task layout the checkpoint was taken with (:func:`task_layout`):
which component and index each task id had, and each component's parallelism. A
restore under another packing (a rebalance changed a parallelism, so task ids and
indexes moved) finds a task's old state through it, by component and index, never
by task id.

A checkpoint is complete exactly when its metadata document exists: the
topology master writes it (``mark_complete``) once every task has saved, and
that write is the commit point. Only then is the checkpoint visible to
``latest_complete`` (and so to a rollback). The newest ``keep`` complete
checkpoints are kept; older ones, and incomplete ones older than the newest
complete one (abandoned, or left by a task that crashed), are deleted.

Atomicity. ``save`` writes a temp file in the checkpoint's directory, fsyncs it,
renames it to its final name and fsyncs the directory. A crash at any point
leaves either no file under the final name or the whole file, never a prefix;
leftover temp files (dot-names) are never read and go with their directory.

Integrity. Each file starts with a header: magic ``BTCK``, a format byte, the
payload length (8 bytes, big-endian) and its CRC-32 (4 bytes): 17 bytes in
version 1; version 2 adds the *parent* checkpoint id (8 bytes), covered by the
CRC too. ``load`` checks all of it and raises :class:`CheckpointCorrupt` naming
the file, so a file damaged after it was written (a torn copy, a bad disk, a
truncated sync to a shared directory) is reported, not restored.

Incremental checkpoints (chains). A task's file is either a full snapshot (a
*base*: written with a version-1 header, exactly as before deltas existed, so
older readers and savepoints keep working) or a *delta* on its own file of an
earlier, complete checkpoint, the parent, named in the version-2 header (see
:mod:`bittern.api.deltas`). ``load`` resolves the chain, base first, and returns
the full state, so readers (restore, rescale, savepoints) never see a delta; a
missing or corrupt link raises naming that link's file. ``prune`` reads only the
headers to keep every checkpoint directory that a kept checkpoint's files
reference, transitively, and ``mark_complete`` refuses a checkpoint whose chain
has a missing link (so a broken chain is never recorded as complete).

Rebases (the disk backend). ``rebase`` replaces a task's delta in a checkpoint by a
base of the same state, written later in the background (instance/ckptwriter.py),
even once the checkpoint is complete: what the file restores to does not change,
only how it is encoded, and the file is replaced atomically, so a reader sees the
delta or the base, never a mix; "a complete checkpoint is immutable" holds for its
state. The links the delta named may then be pruned; a reader that followed the
old delta and finds a link gone reads the chain again from its head, once
(``load_chain``, ``chain``).

Probes (cluster mode). Before an exactly-once topology starts on a cluster, nimbus
and the stream manager of every container write a probe file into
``<root>/<topology>/_probe/`` (:func:`write_probe`: temp file, fsync, rename, fsync
of the directory, as a state file), and the topology master reads each one back
(:func:`check_probe`): every host writes the same shared store and sees what the
others wrote. What the store must guarantee, and what another backend (an object
store) would take: docs/CHECKPOINT_STORE.md.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass

from .ckptfile import (  # noqa: F401 - (the file format and errors: part of this module's API)
    CHAIN_VERSION, FILE_VERSION, HEADER2_SIZE, HEADER_SIZE, MAGIC, CheckpointCorrupt, CheckpointError,
    CheckpointMissing, _chunks, _makedirs_durable, decode_file, encode_file, file_header, fsync_dir,
    read_file, read_parent, unpack_file, write_payload)
from .errors import ConfigError

MAX_CHAIN = 10_000  # links followed before a chain is called corrupt (a cycle)
_TASK_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_FILE_RE = re.compile(r"^task-(.+)\.bin$")


def _check_id(checkpoint_id):
    if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int) or checkpoint_id < 0:
        raise CheckpointError(f"a checkpoint id is a whole number >= 0, got {checkpoint_id!r}")
    return checkpoint_id


def _check_task(task):
    if isinstance(task, bool) or not (isinstance(task, int) and task >= 0
                                      or isinstance(task, str) and _TASK_RE.match(task)):
        raise CheckpointError(f"a task is a task id (int >= 0) or a plain name, got {task!r}")
    return task


def _task_from_name(name):
    return int(name) if name.isdigit() else name


class _LinkMissing(CheckpointMissing):
    """A link of a chain (not its head) is missing: read again from the head once (a
    rebase may have replaced the delta that named it)."""


class CheckpointStore:
    """Checkpoint files of one topology under ``root_dir``, with metadata in ``state_manager``."""

    def __init__(self, root_dir, state_manager, topology, keep=3, clock=time.time):
        if not isinstance(topology, str) or not topology or topology in (".", "..") \
                or "/" in topology or "\\" in topology or "\0" in topology or topology.startswith("."):
            raise CheckpointError(f"bad topology name for a checkpoint directory: {topology!r}")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise CheckpointError(f"bittern.checkpoint.keep must be a whole number >= 1, got {keep!r}")
        self.root = os.path.abspath(root_dir)
        self.sm = state_manager
        self.topology = topology
        self.keep = keep
        self._clock = clock
        self.dir = os.path.join(self.root, topology)
        self.meta = f"checkpoints/{topology}"

    def __repr__(self):
        return f"<CheckpointStore {self.topology!r} at {self.dir} keep={self.keep}>"

    # -- paths
    def checkpoint_dir(self, checkpoint_id):
        return os.path.join(self.dir, str(_check_id(checkpoint_id)))

    def path(self, checkpoint_id, task):
        return os.path.join(self.checkpoint_dir(checkpoint_id), f"task-{_check_task(task)}.bin")

    # -- tasks' side
    def save(self, checkpoint_id, task, data, parent=0):
        """Save ``task``'s state for ``checkpoint_id`` atomically and durably. Saving
        again before the checkpoint is complete replaces the file; a complete
        checkpoint is immutable. ``data``: bytes, or a list of byte chunks (written one
        after the other, never joined); ``parent``: for a delta, the checkpoint it
        applies to (this task's file there must exist), 0 for a base."""
        if isinstance(data, (bytes, bytearray, memoryview, list, tuple)):
            chunks = _chunks(data)
            if not all(isinstance(c, (bytes, bytearray, memoryview)) for c in chunks):
                raise CheckpointError(f"checkpoint {checkpoint_id} task {task}: state must be bytes, "
                                      f"got {type(data).__name__}")
        elif hasattr(data, "__next__"):
            chunks = data  # a generator of chunks: streamed, the header written last
        else:
            raise CheckpointError(f"checkpoint {checkpoint_id} task {task}: state must be bytes, "
                                  f"got {type(data).__name__}")
        final = self.path(checkpoint_id, task)
        if parent:
            _check_id(parent)
            if parent >= checkpoint_id:
                raise CheckpointError(f"checkpoint {checkpoint_id} task {task}: a delta's parent must be an "
                                      f"earlier checkpoint, got {parent}")
            if not os.path.isfile(self.path(parent, task)):
                raise CheckpointMissing(f"checkpoint {checkpoint_id} task {task}: the delta's parent "
                                        f"{self.path(parent, task)} is missing (pruned?)")
        if self.sm.get(f"{self.meta}/{checkpoint_id}") is not None:
            raise CheckpointError(f"checkpoint {checkpoint_id} of {self.topology!r} is already complete: "
                                  f"task {task} cannot save into it")
        tmp = self._write_temp(checkpoint_id, task, chunks, parent)
        try:
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        fsync_dir(os.path.dirname(final))
        return final

    def rebase(self, checkpoint_id, task, chunks):
        """Replace ``task``'s file in ``checkpoint_id`` (a delta) by ``chunks``, a base of
        the same state (an iterator of byte chunks, streamed): temp file, fsync, rename,
        fsync of the directory, as ``save``. Allowed on a complete checkpoint (its state
        does not change: see the module docstring). Never creates the checkpoint's
        directory: if the checkpoint or the file is gone (pruned, abandoned) it raises
        :class:`CheckpointMissing`."""
        final = self.path(checkpoint_id, task)
        if not os.path.isfile(final):
            raise CheckpointMissing(f"checkpoint {checkpoint_id} of {self.topology!r} task {task}: no file "
                                    f"{final} to rebase (pruned or abandoned?)")
        try:
            tmp = self._write_temp(checkpoint_id, task, chunks, makedirs=False)
        except FileNotFoundError:  # (the directory went meanwhile)
            raise CheckpointMissing(f"checkpoint {checkpoint_id} of {self.topology!r} task {task}: its "
                                    f"directory {os.path.dirname(final)} is gone (pruned or abandoned?)") from None
        try:
            os.replace(tmp, final)
        except FileNotFoundError:
            raise CheckpointMissing(f"checkpoint {checkpoint_id} of {self.topology!r} task {task}: pruned "
                                    f"while its base was written") from None
        fsync_dir(os.path.dirname(final))
        return final

    def _write_temp(self, checkpoint_id, task, data, parent=0, makedirs=True):
        """Step one of ``save``: the whole file, synced, under a temp name in the final
        directory (the same file system, so the rename is atomic). A crash after this
        step leaves only the temp file, which nothing reads."""
        d = self.checkpoint_dir(checkpoint_id)
        if makedirs:
            _makedirs_durable(d)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".tmp-task-{_check_task(task)}-")
        try:
            with os.fdopen(fd, "wb") as f:
                write_payload(f, data, parent)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        return tmp

    def load_file(self, checkpoint_id, task, link_of=None):
        """``(parent, payload)`` of ``task``'s own file in ``checkpoint_id``, verified
        (parent 0: a base). ``link_of``: the checkpoint whose chain this file is a link
        of (for the error message)."""
        path = self.path(checkpoint_id, task)
        try:
            parent, payload = read_file(path)
        except FileNotFoundError:
            if link_of is not None:
                raise _LinkMissing(f"checkpoint {link_of} of {self.topology!r}, task {task}: its chain "
                                        f"needs checkpoint {checkpoint_id}, whose file {path} is missing "
                                        f"(pruned, or deleted by hand?)") from None
            raise CheckpointMissing(f"checkpoint {checkpoint_id} of {self.topology!r} has no state for "
                                    f"task {task} (no file {path})") from None
        if parent and parent >= checkpoint_id:
            raise CheckpointCorrupt(f"checkpoint file {path} is corrupt: its parent {parent} is not an "
                                    f"earlier checkpoint")
        return parent, payload

    def load_chain(self, checkpoint_id, task):
        """The payloads of ``task``'s chain ending at ``checkpoint_id``, base first, as
        ``[(checkpoint id, payload)...]``. A link missing is read again from the head
        once (a rebase may have replaced a delta meanwhile, and its links gone)."""
        try:
            return self._load_chain(checkpoint_id, task)
        except _LinkMissing:
            return self._load_chain(checkpoint_id, task)

    def _load_chain(self, checkpoint_id, task):
        chain = []
        cid, link_of = checkpoint_id, None
        while True:
            parent, payload = self.load_file(cid, task, link_of)
            chain.append((cid, payload))
            if not parent:
                break
            if len(chain) > MAX_CHAIN:
                raise CheckpointCorrupt(f"checkpoint {checkpoint_id} task {task}: chain longer than "
                                        f"{MAX_CHAIN} links (a cycle?)")
            cid, link_of = parent, checkpoint_id
        chain.reverse()
        return chain

    def resolve_doc(self, checkpoint_id, task):
        """The full state document (``bittern.api.deltas.read_doc`` form) of ``task`` in
        ``checkpoint_id``: its chain resolved, one link decoded at a time."""
        from .api.deltas import read_doc, resolve
        chain = self.load_chain(checkpoint_id, task)

        def docs():
            for i, (cid, payload) in enumerate(chain):
                doc = self._read_link(read_doc, cid, task, payload)
                chain[i] = None  # (the payload is no longer needed)
                if i and doc.get("parent") != ids[i - 1]:
                    raise CheckpointCorrupt(f"checkpoint file {self.path(cid, task)} is corrupt: its header "
                                            f"names parent {ids[i - 1]}, its state {doc.get('parent')}")
                yield doc
        ids = [c for c, _ in chain]
        try:
            return resolve(docs())
        except CheckpointError:
            raise
        except Exception as e:  # StateFormatError: a chain that does not fit together
            raise CheckpointCorrupt(f"checkpoint {checkpoint_id} task {task}: cannot resolve its chain "
                                    f"{ids}: {e}") from e

    def _read_link(self, read_doc, cid, task, payload):
        from .api.state import StateFormatError
        try:
            return read_doc(payload)
        except StateFormatError as e:
            raise CheckpointCorrupt(f"checkpoint file {self.path(cid, task)}: {e}") from e

    def load(self, checkpoint_id, task):
        """The full state ``task`` saved for ``checkpoint_id`` (a delta's chain resolved:
        its base, then each delta), verified; raises :class:`CheckpointMissing` or
        :class:`CheckpointCorrupt` naming the file (the missing or damaged link)."""
        parent, payload = self.load_file(checkpoint_id, task)
        if not parent:
            return payload
        from .api.deltas import encode_doc
        return b"".join(encode_doc(self.resolve_doc(checkpoint_id, task)))

    def chain(self, checkpoint_id, task):
        """The checkpoint ids of ``task``'s chain ending at ``checkpoint_id``, base first,
        from the files' headers only; raises :class:`CheckpointMissing` for a missing
        link (read again from the head once first, as ``load_chain``)."""
        try:
            return self._chain(checkpoint_id, task)
        except _LinkMissing:
            return self._chain(checkpoint_id, task)

    def _chain(self, checkpoint_id, task):
        ids = [checkpoint_id]
        while True:
            path = self.path(ids[-1], task)
            try:
                parent = read_parent(path)
            except FileNotFoundError:
                raise (_LinkMissing if len(ids) > 1 else CheckpointMissing)(
                    f"checkpoint {checkpoint_id} of {self.topology!r}, task {task}: no file {path} in its "
                    f"chain") from None
            if not parent:
                return ids[::-1]
            if parent >= ids[-1] or len(ids) > MAX_CHAIN:
                raise CheckpointCorrupt(f"checkpoint file {path} is corrupt: parent {parent}")
            ids.append(parent)

    def tasks_saved(self, checkpoint_id):
        """The tasks with a state file in ``checkpoint_id`` (temp files excluded), sorted."""
        try:
            names = os.listdir(self.checkpoint_dir(checkpoint_id))
        except FileNotFoundError:
            return []
        tasks = [_task_from_name(m.group(1)) for m in map(_FILE_RE.match, names) if m]
        return sorted(tasks, key=lambda t: (isinstance(t, str), t))

    # -- the topology master's side
    def mark_complete(self, checkpoint_id, tasks, layout=None):
        """Record ``checkpoint_id`` as complete (every task in ``tasks`` saved it), then
        prune. Raises :class:`CheckpointMissing` if a task's file is not there.
        ``layout``: the task layout it was taken with (:func:`task_layout`); it must
        name exactly ``tasks``. Without one (older callers) a restore assumes the
        checkpoint was taken with the current packing."""
        _check_id(checkpoint_id)
        tasks = sorted({_check_task(t) for t in tasks}, key=lambda t: (isinstance(t, str), t))
        if layout is not None:
            layout = check_layout(layout)
            named = sorted(_task_from_name(t) for t in layout["tasks"])
            if set(named) != set(tasks):
                raise CheckpointError(f"checkpoint {checkpoint_id} of {self.topology!r}: the layout names "
                                      f"tasks {named}, the checkpoint has {tasks}")
        missing = [t for t in tasks if not os.path.isfile(self.path(checkpoint_id, t))]
        if missing:
            raise CheckpointMissing(f"checkpoint {checkpoint_id} of {self.topology!r} cannot be complete: "
                                    f"no state saved for tasks {missing} (in {self.checkpoint_dir(checkpoint_id)})")
        for t in tasks:  # a delta whose chain lost a link must not become a restore point
            try:
                self.chain(checkpoint_id, t)
            except CheckpointError as e:
                raise CheckpointMissing(f"checkpoint {checkpoint_id} of {self.topology!r} cannot be complete: "
                                        f"{e}") from None
        doc = {"id": checkpoint_id, "tasks": tasks, "completed_at": self._clock()}
        if layout is not None:
            doc["layout"] = layout
        self.sm.put(f"{self.meta}/{checkpoint_id}", doc)
        self.prune()
        return doc

    def metadata(self, checkpoint_id):
        return self.sm.get(f"{self.meta}/{_check_id(checkpoint_id)}")

    def layout(self, checkpoint_id):
        """The task layout ``checkpoint_id`` was taken with, or None (not complete, or
        recorded without one)."""
        doc = self.metadata(checkpoint_id)
        lay = (doc or {}).get("layout")
        return None if lay is None else check_layout(lay)

    def complete_ids(self):
        """Ids of the complete checkpoints, oldest first."""
        return sorted(int(n) for n in self.sm.children(self.meta) if n.isdigit())

    def latest_complete(self):
        ids = self.complete_ids()
        return ids[-1] if ids else None

    def _dir_ids(self):
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def prune(self):
        """Delete all but the newest ``keep`` complete checkpoints, and every incomplete
        one older than the newest complete, except the directories a kept checkpoint's
        files (or a newer, in-flight one's) reference as parents, transitively: a
        delta's chain stays whole while the delta is kept. (Such a referenced older
        checkpoint loses its metadata, so it is no restore point of its own; its files
        stay as links.) Metadata goes first: a crash in between leaves only
        unreferenced files, which the next prune removes."""
        complete = self.complete_ids()
        if not complete:
            return []
        newest = complete[-1]
        kept = set(complete[-self.keep:])
        removed = []
        for cid in complete:
            if cid not in kept:
                self.sm.delete(f"{self.meta}/{cid}")
                removed.append(cid)
        dirs = self._dir_ids()
        linked = self._referenced(kept | {c for c in dirs if c > newest})
        for cid in dirs:
            if cid not in kept and cid not in linked and cid < newest:
                shutil.rmtree(os.path.join(self.dir, str(cid)), ignore_errors=True)
                if cid not in removed:
                    removed.append(cid)
        if removed and os.path.isdir(self.dir):
            fsync_dir(self.dir)
        return sorted(removed)

    def _referenced(self, roots):
        """The checkpoint ids the files of ``roots`` reference as parents, transitively
        (headers only; an unreadable header references nothing)."""
        seen, todo = set(), sorted(roots)
        while todo:
            cid = todo.pop()
            d = os.path.join(self.dir, str(cid))
            try:
                names = os.listdir(d)
            except FileNotFoundError:
                continue
            for name in names:
                if not _FILE_RE.match(name):
                    continue
                try:
                    parent = read_parent(os.path.join(d, name))
                except (OSError, CheckpointError):
                    continue
                if parent and parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        return seen

    def delete_all(self):
        """Remove every checkpoint of the topology (files and metadata): for ``kill``."""
        self.sm.delete(self.meta)
        shutil.rmtree(self.dir, ignore_errors=True)


# -- task layouts --------------------------------------------------------------------------

def task_layout(task_component, task_index=None):
    """The task layout of a packing (a ``PackingPlan``, or ``task_component`` and
    ``task_index`` dicts), as stored in checkpoint metadata and sent in RESTORE::

        {"tasks": {"<task id>": [component, index], ...},
         "parallelism": {component: number of tasks, ...}}

    Task ids are strings (JSON and msgpack maps in the state manager and on the wire)."""
    if task_index is None:
        task_component, task_index = task_component.task_component, task_component.task_index
    par = {}
    for comp in task_component.values():
        par[comp] = par.get(comp, 0) + 1
    return check_layout({"tasks": {str(t): [c, task_index[t]] for t, c in sorted(task_component.items())},
                         "parallelism": par})


def check_layout(layout):
    """``layout`` checked (each component's indexes are exactly 0..parallelism-1, once
    each); raises :class:`CheckpointError`. Returns it."""
    if not isinstance(layout, dict) or not isinstance(layout.get("tasks"), dict) \
            or not isinstance(layout.get("parallelism"), dict):
        raise CheckpointError(f"a task layout is {{'tasks': ..., 'parallelism': ...}}, got {layout!r}")
    seen = {}
    for t, v in layout["tasks"].items():
        if not (isinstance(v, (list, tuple)) and len(v) == 2 and isinstance(v[0], str)
                and isinstance(v[1], int) and not isinstance(v[1], bool)):
            raise CheckpointError(f"task layout: task {t!r} has {v!r}, not [component, index]")
        seen.setdefault(v[0], []).append(v[1])
    for comp, n in layout["parallelism"].items():
        if sorted(seen.get(comp, [])) != list(range(n if isinstance(n, int) else -1)):
            raise CheckpointError(f"task layout: component {comp!r} has parallelism {n!r} but task indexes "
                                  f"{sorted(seen.get(comp, []))}")
    extra = set(seen) - set(layout["parallelism"])
    if extra:
        raise CheckpointError(f"task layout: components {sorted(extra)} have tasks but no parallelism")
    return layout


def component_tasks(layout, component):
    """The task ids ``component`` had in ``layout``, in index order (None if it had none)."""
    out = {v[1]: _task_from_name(t) for t, v in layout["tasks"].items() if v[0] == component}
    if not out:
        return None
    return [out[i] for i in range(len(out))]


# -- configuration -------------------------------------------------------------------------

@dataclass(frozen=True)
class CheckpointSettings:
    interval_secs: float
    dir: str
    keep: int
    key_groups: int
    barrier_buffer_max_tuples: int
    incremental: bool = True  # bittern.checkpoint.incremental
    max_deltas: int = 8  # bittern.checkpoint.incremental.max.deltas


def checkpoint_settings(conf, home=None):
    """The checkpoint settings of a merged topology config, checked; the directory
    resolved (empty: ``<home>/checkpoints``, ``home`` defaulting to ``$BITTERN_HOME``)."""
    interval = conf["topology.stateful.checkpoint.interval.seconds"]
    keep = conf["bittern.checkpoint.keep"]
    groups = conf["bittern.state.key.groups"]
    bound = conf["bittern.barrier.buffer.max.tuples"]
    root = conf["bittern.checkpoint.dir"]
    if not interval > 0:
        raise ConfigError(f"topology.stateful.checkpoint.interval.seconds must be > 0, got {interval!r}")
    for key, val in (("bittern.checkpoint.keep", keep), ("bittern.state.key.groups", groups)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ConfigError(f"{key} must be a whole number >= 1, got {val!r}")
    if isinstance(bound, bool) or not isinstance(bound, int) or bound < 0:
        raise ConfigError(f"bittern.barrier.buffer.max.tuples must be a whole number >= 0, got {bound!r}")
    incremental = conf.get("bittern.checkpoint.incremental", True)
    max_deltas = conf.get("bittern.checkpoint.incremental.max.deltas", 8)
    if not isinstance(incremental, bool):
        raise ConfigError(f"bittern.checkpoint.incremental must be true or false, got {incremental!r}")
    if isinstance(max_deltas, bool) or not isinstance(max_deltas, int) or max_deltas < 0:
        raise ConfigError(f"bittern.checkpoint.incremental.max.deltas must be a whole number >= 0, "
                          f"got {max_deltas!r}")
    if not root:
        if home is None:
            from .state.local import default_home
            home = default_home()
        root = os.path.join(home, "checkpoints")
    root = os.path.abspath(os.path.expanduser(root))
    return CheckpointSettings(float(interval), root, keep, groups, bound, incremental, max_deltas)
