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

Taking one (:func:`take`) and starting from one (:func:`check_restore`,
:func:`install_fresh`) are the same code in both modes: the CLI runs them in local
mode, the leader nimbus in cluster mode (``nimbus/savepoints.py``), against
``bittern.checkpoint.dir``, the directory every host shares.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import zlib

from .api.state import State, StateFormatError
from .checkpoint import (CheckpointCorrupt, CheckpointError, check_layout, component_tasks, decode_file, encode_file,
                         fsync_dir)
from .config import EFFECTIVELY_ONCE
from .errors import BitternError
from .wire import Op

FORMAT = "bittern-savepoint"
VERSION = 1
MANIFEST = "savepoint.json"
WAIT_TRIES = 3  # checkpoint timeouts to wait for the savepoint's checkpoint


class SavepointError(BitternError):
    """A savepoint that cannot be taken or used (the message names it and the mismatch)."""


class CheckpointGone(SavepointError):
    """The checkpoint to copy was pruned meanwhile (the next one is taken instead)."""


def _holds_state(data):
    """Whether a task's saved state holds anything worth restoring: the user's plain or
    keyed entries, or the runtime's windows and timers (a watermark alone is not)."""
    st = State.restore(data)
    return bool(len(st) or len(st.keyed) or st.system_keyed.groups())


def check_target(target):
    """Refuse a savepoint directory that exists and is not empty (before anything waits)."""
    if os.path.exists(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise SavepointError(f"savepoint {target}: the directory exists and is not empty")


def write(store, checkpoint_id, target, tdef, key_groups):
    """Copy complete checkpoint ``checkpoint_id`` of ``store`` into the new savepoint
    directory ``target`` (which must not exist, or be empty); returns the manifest."""
    target = os.path.abspath(target)
    check_target(target)
    meta = store.metadata(checkpoint_id)
    if meta is None:
        raise CheckpointGone(f"checkpoint {checkpoint_id} of {store.topology!r} is not complete (pruned?)")
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
                gone = store.metadata(checkpoint_id) is None  # pruned while copying: not an error
                raise (CheckpointGone if gone else SavepointError)(f"savepoint {target}: {e}") from None
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
        whose = f"the state of component {_component_of(doc.get('layout'), task)!r}, task {task}"
        if len(blob) != info.get("bytes") or zlib.crc32(blob) != info.get("crc32"):
            raise SavepointError(f"{where}: task-{task}.bin is corrupt or truncated ({len(blob)} bytes, the "
                                 f"manifest says {info.get('bytes')}; checksum mismatch; {whose})")
        try:
            State.restore(decode_file(blob, fp))
        except (CheckpointCorrupt, StateFormatError) as e:
            raise SavepointError(f"{where}: {e} ({whose})") from None
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
    complete checkpoint. Returns the checkpoint id."""
    cid = doc["checkpoint"]
    tasks = []
    for task in doc["files"]:
        t = int(task) if task.isdigit() else task
        dst = store.path(cid, t)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(path, f"task-{task}.bin"), dst)
        with open(dst, "rb+") as f:  # durable before it is recorded complete (a shared disk)
            os.fsync(f.fileno())
        tasks.append(t)
    if tasks:
        fsync_dir(os.path.dirname(store.path(cid, tasks[0])))
    store.mark_complete(cid, tasks, layout=doc.get("layout"))
    return cid


def install_fresh(path, doc, store, state, submitted_at):
    """Start a new submission (``submitted_at``, as in its topology record) from the
    checked savepoint at ``path``: whatever checkpoints the name had are deleted, the
    savepoint becomes the latest complete checkpoint, and the epoch record names this
    submission, so its topology master restores it instead of starting afresh. Must run
    before any of the topology's processes starts. Returns the checkpoint id."""
    store.delete_all()
    cid = install(os.path.abspath(path), doc, store, state)
    state.put(f"{store.meta}/epoch", {"epoch": 0, "submitted_at": submitted_at})
    return cid


def check_restore(path, tdef, conf, allow_non_restored=False):
    """Check savepoint ``path`` against the topology about to start (``conf``: its merged
    config), before anything starts; returns its manifest."""
    if conf.get("topology.reliability.mode") != EFFECTIVELY_ONCE:
        raise SavepointError(f"savepoint {path}: topology {tdef.name!r} is "
                             f"{conf.get('topology.reliability.mode')}; state is restored under "
                             f"EFFECTIVELY_ONCE only")
    doc = read(path)
    check_compatible(doc, path, tdef, conf["bittern.state.key.groups"], allow_non_restored)
    return doc


# -- taking one --------------------------------------------------------------------------

def require_exactly_once(name, conf):
    if conf.get("topology.reliability.mode") != EFFECTIVELY_ONCE:
        raise SavepointError(f"topology {name!r} is {conf.get('topology.reliability.mode')}: only an "
                             f"EFFECTIVELY_ONCE topology keeps the checkpoints a savepoint is made of")


def wait_limit(conf):
    """Seconds :func:`take` waits for a checkpoint to complete."""
    return WAIT_TRIES * float(conf["topology.stateful.checkpoint.timeout.secs"]) + \
        float(conf["topology.stateful.checkpoint.interval.seconds"])


def default_name(name):
    return f"{name}-{time.strftime('%Y%m%dT%H%M%S')}"


def take(tm, store, tdef, conf, key_groups, target, deactivate=None, say=lambda line: None):
    """Savepoint ``target`` of the running topology whose topology master answers on
    ``tm`` (a :class:`bittern.client.TMClient`) and whose checkpoints are in ``store``:
    the first checkpoint that completes after this call, after ``deactivate()`` (when
    given: spouts stopped, so that it holds everything the topology took in). Returns
    the manifest."""
    name = store.topology
    limit = wait_limit(conf)
    check_target(target)
    if deactivate is not None:
        deactivate()
        say(f"{name} deactivated")
    ck = tm.request(Op.GET_METRICS).get("checkpoints") or {}
    mark = max(ck.get("in_flight") or 0, ck.get("last_complete") or 0)
    deadline = time.monotonic() + limit
    while True:
        ck = tm.request(Op.GET_METRICS).get("checkpoints") or {}
        cid = ck.get("last_complete") or 0
        if cid > mark and not ck.get("rolling_back"):
            try:
                doc = write(store, cid, target, tdef, key_groups)
                break
            except CheckpointGone as e:  # pruned meanwhile: take the next one
                if time.monotonic() >= deadline:
                    raise SavepointError(f"savepoint of {name!r}: could not copy checkpoint {cid}: {e}") from None
                mark = cid
            except OSError as e:
                raise SavepointError(f"savepoint of {name!r}: could not copy checkpoint {cid} to {target}: "
                                     f"{e}") from None
        if time.monotonic() >= deadline:
            raise SavepointError(f"savepoint of {name!r}: no checkpoint completed within {limit:g} s "
                                 f"(last complete {ck.get('last_complete')}, waiting for "
                                 f"{ck.get('waiting_for') or 'nothing'})")
        time.sleep(0.2)
    say(f"checkpoint {doc['checkpoint']} saved as a savepoint: "
        f"{sum(1 for c in doc['components'].values() if c['stateful'])} stateful components")
    return doc


def tasks_of(doc, component):
    """The savepoint's task ids of ``component`` (None if it had none)."""
    lay = doc.get("layout")
    return None if lay is None else component_tasks(lay, component)
