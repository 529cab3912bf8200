"""Savepoints: a complete checkpoint taken on purpose, kept until deleted, and
self-describing, so that a topology can be stopped, changed and started again from
its state (Flink's savepoints; ``bittern savepoint``, ``kill --savepoint``, ``submit
--from-savepoint``).

A savepoint is a directory::

    savepoint.json      {"format": "bittern-savepoint", "version": 1, "topology",
                         "checkpoint", "created_at", "key_groups", "layout",
                         "components": {name: {"kind", "class", "par", "stateful"}},
                         "files": {"<task>": {"bytes", "crc32"}}}
    task-<task>.bin     each task's full state with the checkpoint store's header and
                        CRC-32 (a base: an incremental checkpoint's chain is resolved
                        when the savepoint is written, so a savepoint never depends
                        on files outside it)

It is written under a temporary name beside the target and renamed into place, so a
savepoint directory is either whole or absent. Starting from one (:func:`install`)
checks everything first (format, version, every file's checksum, the key-group count,
which components it holds), then puts it into the new submission's checkpoint store
as its latest complete checkpoint, with the task layout it was taken with: every task
of the new topology restores by component name and index, key groups moving when a
parallelism changed (``instance/rescale.py``), and components the savepoint does not
know start empty.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import zlib

from .api.state import State, StateFormatError
from .checkpoint import CheckpointCorrupt, CheckpointError, check_layout, component_tasks, decode_file, encode_file
from .errors import BitternError

FORMAT = "bittern-savepoint"
VERSION = 1
MANIFEST = "savepoint.json"


class SavepointError(BitternError):
    """A savepoint that cannot be taken or used (the message names it and the mismatch)."""


def _holds_state(data):
    """Whether a task's saved state holds anything worth restoring: the user's plain or
    keyed entries, or the runtime's windows and timers (a watermark alone is not)."""
    st = State.restore(data)
    return bool(len(st) or len(st.keyed) or st.system_keyed.groups())


def write(store, checkpoint_id, target, tdef, key_groups):
    """Copy complete checkpoint ``checkpoint_id`` of ``store`` into the new savepoint
    directory ``target`` (which must not exist, or be empty); returns the manifest."""
    target = os.path.abspath(target)
    if os.path.exists(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise SavepointError(f"savepoint {target}: the directory exists and is not empty")
    meta = store.metadata(checkpoint_id)
    if meta is None:
        raise SavepointError(f"checkpoint {checkpoint_id} of {store.topology!r} is not complete (pruned?)")
    layout = meta.get("layout")
    files, stateful = {}, {}
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.tmp-", dir=parent)
    try:
        for task in meta["tasks"]:
            try:
                data = store.load(checkpoint_id, task)  # the full state: a delta's chain resolved
            except CheckpointError as e:
                raise SavepointError(f"savepoint {target}: {e}") from None
            blob = encode_file(data)
            comp = _component_of(layout, task)
            stateful[comp] = stateful.get(comp, False) or _holds_state(data)
            dst = os.path.join(tmp, f"task-{task}.bin")
            with open(dst, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            files[str(task)] = {"bytes": len(blob), "crc32": zlib.crc32(blob)}
        comps = {}
        for name, c in tdef.components.items():
            comps[name] = {"kind": c.kind, "class": c.class_path, "par": c.par, "stateful": stateful.get(name, False)}
        doc = {"format": FORMAT, "version": VERSION, "topology": tdef.name, "checkpoint": checkpoint_id,
               "created_at": time.time(), "key_groups": key_groups, "layout": layout, "components": comps,
               "files": files}
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        if os.path.isdir(target):
            os.rmdir(target)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return doc


def _component_of(layout, task):
    if layout is None:
        return None
    v = layout["tasks"].get(str(task))
    return v[0] if v else None


def read(path):
    """The manifest of the savepoint at ``path``, every file checked; raises
    :class:`SavepointError` naming the savepoint and what is wrong."""
    where = f"savepoint {path}"
    manifest = os.path.join(path, MANIFEST)
    if not os.path.isdir(path):
        raise SavepointError(f"{where}: no such directory")
    try:
        with open(manifest) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise SavepointError(f"{where}: no {MANIFEST} (not a savepoint, or an incomplete copy)") from None
    except (OSError, ValueError) as e:
        raise SavepointError(f"{where}: {MANIFEST} is unreadable or corrupt ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SavepointError(f"{where}: {MANIFEST} is not a Bittern savepoint manifest")
    if doc.get("version") != VERSION:
        raise SavepointError(f"{where}: format version {doc.get('version')!r} is not supported (this Bittern "
                             f"reads version {VERSION})")
    for key in ("topology", "checkpoint", "key_groups", "components", "files"):
        if key not in doc:
            raise SavepointError(f"{where}: {MANIFEST} has no {key!r}")
    try:
        if doc.get("layout") is not None:
            check_layout(doc["layout"])
    except CheckpointError as e:
        raise SavepointError(f"{where}: {e}") from None
    for task, info in doc["files"].items():
        fp = os.path.join(path, f"task-{task}.bin")
        try:
            with open(fp, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            raise SavepointError(f"{where}: the state of task {task} ({_component_of(doc.get('layout'), task)}) "
                                 f"is missing (task-{task}.bin)") from None
        if len(blob) != info.get("bytes") or zlib.crc32(blob) != info.get("crc32"):
            raise SavepointError(f"{where}: task-{task}.bin is corrupt or truncated ({len(blob)} bytes, the "
                                 f"manifest says {info.get('bytes')}; checksum mismatch)")
        try:
            State.restore(decode_file(blob, fp))
        except (CheckpointCorrupt, StateFormatError) as e:
            raise SavepointError(f"{where}: {e}") from None
    return doc


def check_compatible(doc, path, tdef, key_groups, allow_non_restored=False):
    """Refuse (one line naming the savepoint, the component and the mismatch) what the
    new topology cannot take from the savepoint."""
    where = f"savepoint {path}"
    if doc["topology"] != tdef.name:
        raise SavepointError(f"{where} is of topology {doc['topology']!r}, not {tdef.name!r} (start it "
                             f"with --name {doc['topology']} to upgrade that topology)")
    if doc["key_groups"] != key_groups:
        raise SavepointError(f"{where} was taken with {doc['key_groups']} key groups; topology {tdef.name!r} "
                             f"has {key_groups} (bittern.state.key.groups is fixed for a topology's life)")
    for name, c in doc["components"].items():
        if not c.get("stateful"):
            continue
        now = tdef.components.get(name)
        if now is None:
            if not allow_non_restored:
                raise SavepointError(f"{where}: component {name!r} holds state but is not in topology "
                                     f"{tdef.name!r} (--allow-non-restored-state drops it)")
            continue
        if now.kind != c["kind"]:
            raise SavepointError(f"{where}: component {name!r} was a {c['kind']} and is now a {now.kind}")
        if now.kind == "spout" and now.par != c["par"]:
            raise SavepointError(f"{where}: spout {name!r} keeps its source offsets per task: its parallelism "
                                 f"cannot change from {c['par']} to {now.par}")


def install(path, doc, store, state):
    """Put the savepoint into ``store`` (a new submission's, still empty) as its latest
    complete checkpoint, and the epoch record that makes the topology master keep it.
    Returns the checkpoint id."""
    cid = doc["checkpoint"]
    tasks = []
    for task in doc["files"]:
        t = int(task) if task.isdigit() else task
        dst = store.path(cid, t)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(path, f"task-{task}.bin"), dst)
        tasks.append(t)
    store.mark_complete(cid, tasks, layout=doc.get("layout"))
    return cid


def tasks_of(doc, component):
    """The savepoint's task ids of ``component`` (None if it had none)."""
    lay = doc.get("layout")
    return None if lay is None else component_tasks(lay, component)
