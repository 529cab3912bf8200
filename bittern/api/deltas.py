"""Incremental snapshots: deltas of a :class:`~bittern.api.state.State` on a parent
checkpoint, and chains (a base and its deltas) resolved into a full snapshot.

Why. A full snapshot costs what the whole state costs (1,000,000 keys: ~16 MB every
checkpoint), although between two checkpoints a task usually changes a small part of
it. A *delta* holds only what the keyed store's change log names
(``KeyedState.detach_log``), so taking it on the instance's loop is O(changed).

Two documents (msgpack, ``"format": "bittern-state"``):

* a **base** (version 1): what ``State.snapshot`` writes, unchanged, so checkpoints
  and savepoints written before deltas existed still load;
* a **delta** (version 2)::

      {"format", "version": 2, "key_groups", "parent": <checkpoint id, 0: the empty state>,
       "plain": [[k, v]...], "system": [[k, v]...], "system_keyed": [[g, [[k, v]...]]...],
       "changed": [[g, {k: v...}]...], "deleted": [[g, [k...]]...]}

  (``changed`` holds a msgpack map per group: the change log's own dict is packed as
  it is, the cheapest thing to do on the loop.)

  The plain store and the runtime's stores (``system``, ``system_keyed``: watermarks,
  timers, windows; rebuilt whole by the runtime at every checkpoint) are whole in
  every delta; only keyed state is incremental. Applying a delta to its parent's
  full state replaces those stores and, per key group, sets the changed entries and
  removes the deleted keys.

A chain is resolved oldest first: the base, then each delta on the one before
(:func:`resolve`). The result is a base document again (:func:`encode_doc`), which
is also how a compaction writes a new base without encoding the live state.

Decoding and encoding go one key group at a time (msgpack's streaming ``Unpacker``
and ``Packer``): a compaction runs on a background thread of the instance, and one
C call over a 16 MB document would hold the GIL (so stop the instance's loop) for
tens of milliseconds; per group, each call is about a millisecond.

This module is pure: bytes in, documents and bytes out; the checkpoint store
(:mod:`bittern.checkpoint`) does the files.
"""
from __future__ import annotations

import io

import msgpack

from .changelog import DELETED
from .state import _FORMAT, DELTA_VERSION, FORMAT_VERSION, StateFormatError, _default, _ext_hook, check_doc

_GROUPED_DICT = ("keyed", "changed")  # [[g, [[k, v]...] or {k: v}]...] -> {g: {k: v}}
_GROUPED_LIST = ("system_keyed",)  # [[g, pairs]...], read one group at a time, kept as is


def encode_delta(state, log, parent):
    """The delta of ``state`` on checkpoint ``parent`` (0: on the empty state), given
    ``log``, the :class:`~bittern.api.state.ChangeLog` of its keyed store since then
    (the union of the logs detached since): each logged key's value, or deleted.
    O(logged keys) plus the plain and runtime stores. Raises
    :class:`~bittern.api.state.StateTypeError` like ``snapshot`` for a value that
    cannot be encoded."""
    changed, deleted = [], []
    for g in sorted(log.groups):
        d = log.groups[g]
        if g in log.deleted_in:
            ch = {k: v for k, v in d.items() if v is not DELETED}
            de = [k for k, v in d.items() if v is DELETED]
            if de:
                deleted.append([g, de])
        else:
            ch = d  # packed as it is: no pass over the entries in Python
        if ch:
            changed.append([g, ch])
    sk = state.system_keyed._groups
    doc = {"format": _FORMAT, "version": DELTA_VERSION, "key_groups": state.key_groups.n_groups,
           "parent": int(parent or 0),
           "plain": [[k, v] for k, v in state._plain.items()],
           "system": [[k, v] for k, v in state.system.items()],
           "system_keyed": [[g, [[k, v] for k, v in sk[g].items()]] for g in sorted(sk)],
           "changed": changed, "deleted": deleted}
    return state._encode(doc)


# -- reading -------------------------------------------------------------------------------

def read_doc(data):
    """A base or delta document from its bytes, decoded one key group at a time.
    Keyed entries come back as ``{group: {key: value}}`` (``"keyed"`` of a base,
    ``"changed"`` of a delta), everything else as in the document. Raises
    :class:`StateFormatError`."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StateFormatError(f"a state snapshot is bytes, got {type(data).__name__}")
    up = msgpack.Unpacker(io.BytesIO(data), raw=False, strict_map_key=False, ext_hook=_ext_hook,
                          max_buffer_size=0)
    doc = {}
    try:
        n = up.read_map_header()
        for _ in range(n):
            key = up.unpack()
            if key in _GROUPED_DICT or key in _GROUPED_LIST:
                m = up.read_array_header()
                groups = {} if key in _GROUPED_DICT else []
                for _ in range(m):
                    entry = up.unpack()
                    if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], (list, dict))):
                        raise StateFormatError(f"corrupt state snapshot: a {key!r} entry is not [group, entries]")
                    if key in _GROUPED_DICT:
                        e = entry[1]
                        groups[entry[0]] = e if isinstance(e, dict) else {k: v for k, v in e}
                    else:
                        groups.append(entry)
                doc[key] = groups
            else:
                doc[key] = up.unpack()
    except StateFormatError:
        raise
    except Exception as e:  # msgpack's errors, a short read, a pair that is not a pair
        raise StateFormatError(f"not a state snapshot (msgpack: {type(e).__name__}: {e})") from e
    if doc.get("format") != _FORMAT:
        raise StateFormatError("not a state snapshot (no bittern-state header)")
    # check_doc checks the document's shape, where these were lists
    check_doc({k: ([] if k in _GROUPED_DICT else v) for k, v in doc.items()})
    return doc


def empty_doc(key_groups):
    """The full (base) document of an empty state."""
    return {"format": _FORMAT, "version": FORMAT_VERSION, "key_groups": key_groups, "plain": [],
            "keyed": {}, "system": [], "system_keyed": []}


def is_delta(doc):
    return doc.get("version") == DELTA_VERSION


def apply_delta(full, delta, consume=False):
    """Apply ``delta`` (a read delta document) to ``full`` (a read base document), in
    place; returns ``full``, which is then the state the delta was taken of.
    ``consume``: empty ``delta``'s groups as they are applied (freed a group at a time:
    see :func:`encode_doc`)."""
    if not is_delta(delta):
        raise StateFormatError("apply_delta: the second document is not a delta")
    if is_delta(full):
        raise StateFormatError("apply_delta: the first document must be a full one (resolve it first)")
    if delta["key_groups"] != full["key_groups"]:
        raise StateFormatError(f"a delta taken with {delta['key_groups']} key groups cannot apply to a "
                               f"state of {full['key_groups']}")
    full["plain"] = delta["plain"]
    full["system"] = delta.get("system", [])
    full["system_keyed"] = delta.get("system_keyed", [])
    keyed = full["keyed"]
    changed = delta["changed"]
    for g in list(changed):
        entries = changed[g]
        d = keyed.get(g)
        if d is None:
            keyed[g] = entries if consume else dict(entries)
        else:
            d.update(entries)
        if consume:
            del changed[g]
            del entries
    for g, keys in delta["deleted"]:
        d = keyed.get(g)
        if d is None:
            continue
        for k in keys:
            d.pop(k, None)
        if not d:
            del keyed[g]
    return full


def resolve(blobs):
    """The full document of a chain: ``blobs`` the payloads (or read documents) oldest
    first, a base then deltas each on the one before, read and applied one at a time
    (an iterator may produce them lazily; documents passed in are consumed). Raises
    :class:`StateFormatError`."""
    it = iter(blobs)
    try:
        first = next(it)
    except StopIteration:
        raise StateFormatError("an empty chain of state snapshots") from None
    full = first if isinstance(first, dict) else read_doc(first)
    if is_delta(full):
        raise StateFormatError(f"a chain of state snapshots must start with a full one, not a delta on "
                               f"checkpoint {full['parent']}")
    for blob in it:
        apply_delta(full, blob if isinstance(blob, dict) else read_doc(blob), consume=True)
    return full


# -- writing -------------------------------------------------------------------------------

_BASE_KEYS = ("format", "version", "key_groups", "plain", "keyed", "system", "system_keyed")


def encode_doc(full, consume=False):
    """A full (base, version 1) document as a list of byte chunks (their concatenation
    is what ``State.snapshot`` would give for the same state, up to the order of
    entries), packed one key group at a time. ``consume``: empty ``full``'s keyed
    groups as they are packed (freeing a million entries at once holds the GIL for
    tens of milliseconds; a group at a time, a fraction of one)."""
    pk = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True)
    pack = pk.pack
    out = [pk.pack_map_header(len(_BASE_KEYS))]
    for key in _BASE_KEYS:
        out.append(pack(key))
        if key == "version":
            out.append(pack(FORMAT_VERSION))
        elif key == "keyed":
            groups = full["keyed"]
            live = sorted(g for g, d in groups.items() if d)
            out.append(pk.pack_array_header(len(live)))
            for g in live:
                out.append(pack([g, [[k, v] for k, v in groups[g].items()]]))
                if consume:
                    del groups[g]
        elif key == "system_keyed":
            entries = full.get("system_keyed", [])
            out.append(pk.pack_array_header(len(entries)))
            for e in entries:
                out.append(pack(e))
        else:
            out.append(pack(full.get(key, [])))
    return out
