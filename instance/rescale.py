"""Which state a task restores from a checkpoint (EFFECTIVELY_ONCE), also when the
checkpoint was taken with another parallelism (a rebalance).

RESTORE carries the checkpoint id and the task layout the checkpoint was taken with
(``bittern.checkpoint.task_layout``: each old task's component and index, each
component's parallelism). A task finds its old state by its component and index,
never by its task id: packing numbers tasks over the components in name order, so a
rebalance that changes one component's parallelism shifts the ids of the others.

* **Same parallelism** (the usual case, and every component a rebalance did not
  touch): the old task with the same index; its whole state, plain and keyed.
* **Rescaled component**, keyed state: new task *i* of *n* owns the key groups
  ``KeyGroups.groups_of(i, n)``; it reads the file of every old task whose groups
  overlap them (each file once) and keeps only its own groups
  (``State.restore(data, groups=mine)``, ``merge``). Every group comes from the one
  old task that owned it, so no key is lost and none lands on two tasks.
* **Rescaled component**, plain state (it belongs to one task and cannot be split
  by key): if the component defines ``rescale_state(old, task_index, n_tasks)``, it
  decides: ``old`` is the list of the old tasks' plain states (dicts, in old index
  order), the return value (a dict, or None for empty) is this task's plain state.
  Without it:

  - a bolt: new task *i* takes old task *i*'s plain state if there was one, else
    starts empty; an old task that no longer exists (a scale-down) must have had
    none, else the restore fails (:class:`RescaleError`) rather than drop it;
  - a spout: its plain state is its source offset, which means nothing under
    another parallelism (a spout shards its source by index and count), so a
    rescaled spout whose old tasks kept any plain state fails to restore. A spout
    with no plain state at all (it keeps nothing) rescales freely.

A component missing from the layout (it had no tasks then) starts empty. A layout
of None (a checkpoint recorded before layouts were) is taken as the current one.

With the disk backend (``bittern.state.backend = disk``) the same rules apply, but an
old task's keyed groups are never held in memory: its chain's base is streamed group
by group into the new task's database and its deltas applied there
(:func:`load_disk_chain`); only the plain and runtime stores are read as documents.
"""
from __future__ import annotations

import logging

from bittern.api.context import TopologyContext
from bittern.api.deltas import read_doc
from bittern.api.state import State, StateError
from bittern.checkpoint import CheckpointCorrupt
from bittern.checkpoint import CheckpointError, component_tasks

log = logging.getLogger("bittern.instance")


class RescaleError(CheckpointError):
    """A checkpoint's state cannot be given to the tasks of a new parallelism."""


def sources(old_n, index, n, key_groups):
    """The old task indexes whose key groups overlap those of new task ``index`` of ``n``."""
    mine = key_groups.groups_of(index, n)
    if not mine:
        return []
    lo, hi = mine[0], mine[-1]
    return [j for j in range(old_n) if (r := key_groups.groups_of(j, old_n)) and r[0] <= hi and r[-1] >= lo]


def load_disk_chain(store, checkpoint_id, task, keyed, groups=None):
    """Load ``task``'s chain ending at ``checkpoint_id`` into the disk-backed ``keyed``
    store (only ``groups``, None: all): its base's groups streamed into the database,
    then each delta's changes. Returns a State holding the rest of the last link (plain,
    system and runtime keyed stores; no keyed entries)."""
    chain = store.load_chain(checkpoint_id, task)
    want = None if groups is None else set(groups)
    last = None
    for i, (cid, payload) in enumerate(chain):
        chain[i] = None  # (each payload is freed once applied)
        try:
            if i == 0:
                last = keyed.load_groups(payload, want)
            else:
                last = read_doc(payload)
                if last.get("parent") != prev:
                    raise CheckpointCorrupt(f"checkpoint file {store.path(cid, task)} is corrupt: it is a "
                                            f"delta on {last.get('parent')}, its chain says {prev}")
                keyed.apply_delta(last, want)
        except StateError as e:
            raise CheckpointCorrupt(f"checkpoint file {store.path(cid, task)}: {e}") from e
        prev = cid
    rest = State(keyed.key_groups)
    rest._plain.update((k, v) for k, v in last.get("plain", ()))
    rest.system.update((k, v) for k, v in last.get("system", ()))
    for g, pairs in last.get("system_keyed", ()):
        if pairs and (want is None or g in want):
            rest.system_keyed._groups[g] = {k: v for k, v in pairs}
    return rest


def restore_state(store, checkpoint_id, layout, component, index, n, key_groups, kind="bolt",
                  rescale=None, new_keyed=None):
    """The State task ``index`` of ``n`` of ``component`` restores from ``checkpoint_id``
    of ``store`` (None: empty), given the ``layout`` it was taken with. ``rescale``:
    the component's ``rescale_state`` method, if it has one. ``new_keyed``: a function
    of the owned groups making an empty disk-backed keyed store (None: the memory
    backend). Returns ``(state, how)``, ``how`` a short description for the log."""
    mine = key_groups.groups_of(index, n)

    def fresh():
        return State(key_groups, mine, keyed=None if new_keyed is None else new_keyed(mine))
    if checkpoint_id is None:
        return fresh(), "empty"
    old = component_tasks(layout, component)
    if old is None:
        log.warning("checkpoint %s has no tasks of %r: its %d tasks start empty", checkpoint_id,
                    component, n)
        return fresh(), f"empty ({component!r} is not in checkpoint {checkpoint_id})"
    if len(old) == n and new_keyed is None:
        return (State.restore(store.load(checkpoint_id, old[index]), key_groups=key_groups, owned_groups=mine),
                f"task {old[index]}")
    if len(old) == n:
        state = fresh()
        try:
            rest = load_disk_chain(store, checkpoint_id, old[index], state.keyed)
        except BaseException:
            state.keyed.close()
            raise
        state._plain, state.system = rest._plain, rest.system
        state.system_keyed = rest.system_keyed
        return state, f"task {old[index]}, into its database"
    state = fresh()
    try:
        return _rescaled(store, checkpoint_id, old, component, index, n, key_groups, kind, rescale, state)
    except BaseException:
        if new_keyed is not None:
            state.keyed.close()
        raise


def _rescaled(store, checkpoint_id, old, component, index, n, key_groups, kind, rescale, state):
    mine = key_groups.groups_of(index, n)
    # rescaled: every old file this task needs, read once
    need = set(sources(len(old), index, n, key_groups))
    if rescale is not None or kind == "spout":
        need.update(range(len(old)))  # every old plain state matters
    elif index < len(old):
        need.add(index)
    # the runtime's per-task state (watermarks, windows of a bolt that is not keyed) of
    # old task j goes to new task j % n, which merges what it takes over
    need.update(j for j in range(len(old)) if j % n == index)
    files = sorted(need)
    if not state.on_disk:
        datas = {j: store.load(checkpoint_id, old[j]) for j in files}
        for j, data in datas.items():
            state.merge(State.restore(data, key_groups=key_groups, groups=mine, plain=False))
        olds = {j: State.restore(data, key_groups=key_groups, groups=(), plain=True) for j, data in datas.items()}
        del datas
    else:
        olds = {j: load_disk_chain(store, checkpoint_id, old[j], state.keyed, mine) for j in files}
        for j, rest in olds.items():
            for g, d in rest.system_keyed._groups.items():  # (filtered to mine by the load)
                state.system_keyed._groups.setdefault(g, {}).update(d)
    plains = {j: dict(st.items()) for j, st in olds.items()}
    state.system_merged = [dict(olds[j].system) for j in sorted(olds) if j % n == index and olds[j].system]
    how = f"{len(old)} -> {n} tasks, key groups {mine.start}..{mine.stop - 1} from old tasks " \
          f"{[old[j] for j in sorted(files)]}"
    if rescale is not None:
        if len(plains) != len(old):  # (cannot happen: every old file was read)
            raise RescaleError("rescale_state needs every old task's state")
        plain = rescale([plains[j] for j in range(len(old))], index, n)
        if plain is not None and not isinstance(plain, dict):
            raise RescaleError(f"{component}.rescale_state returned {type(plain).__name__}, not a dict or None")
        for k, v in (plain or {}).items():
            state.put(k, v)
        return state, how + ", plain state from rescale_state"
    if kind == "spout":
        kept = [old[j] for j, p in sorted(plains.items()) if p]
        if kept:
            raise RescaleError(
                f"spout {component!r} cannot change its parallelism from {len(old)} to {n} under "
                f"EFFECTIVELY_ONCE: its old tasks {kept} kept state (their source offsets) that means "
                f"nothing under another parallelism; define rescale_state(old, task_index, n_tasks) on "
                f"the spout to split or merge it, or keep its parallelism")
        return state, how
    dropped = [old[j] for j in range(n, len(old)) if plains.get(j)]
    if dropped:
        raise RescaleError(
            f"bolt {component!r} cannot shrink from {len(old)} to {n} tasks: old tasks {dropped} kept plain "
            f"(non-keyed) state, which only moves with a task index that still exists; keep such data in "
            f"state.keyed, or define rescale_state(old, task_index, n_tasks) to merge it")
    for k, v in plains.get(index, {}).items():
        state.put(k, v)
    return state, how


def recover_old_sinks(inst, checkpoint_id, layout, index, n):
    """After a rebalance: resolve what sink tasks of this component left under task ids
    it no longer has. A sink names its output by task id (FileSink's files, a table's
    rows), and task ids move when a parallelism changes; a checkpoint that was complete
    but whose CKPT_COMMIT had not reached the old task before it stopped is pending
    under the old id, and nobody would ever commit it. Old index j is resolved by new
    task ``j % n``, with a sink made for the old id (``make_sink``), recovered to the
    restored checkpoint (commit what it pre-committed up to it, abort the rest), closed.
    ``inst``: the restoring ``instance.runtime.Instance``."""
    old = component_tasks(layout, inst.component) or []
    now = set(inst.plan.packing.component_tasks[inst.component])
    orphans = [(j, t) for j, t in enumerate(old) if t not in now and j % n == index]
    if not orphans:
        return
    make = getattr(inst.obj, "make_sink", None)
    if make is None:
        log.warning("%s[task %d]: old sink tasks %s of checkpoint %d are gone and this sink has no "
                    "make_sink: their pending output is not resolved", inst.component, inst.task,
                    [t for _, t in orphans], checkpoint_id)
        return
    plan = inst.plan
    for j, t in orphans:
        ctx = TopologyContext(plan.name, t, inst.component, j, inst.container, inst.conf,
                              plan.packing.component_tasks, inst.task_component, plan.topology)
        sink = make(inst.conf, ctx)
        sink.open(ctx, inst.conf)
        try:
            rep = sink.recover([checkpoint_id], checkpoint_id)
        finally:
            sink.close()
        if rep.committed or rep.aborted:
            log.info("%s[task %d]: resolved the output old task %d left: committed %s, aborted %s",
                     inst.component, inst.task, t, rep.committed, rep.aborted)
