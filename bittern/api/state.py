"""The stateful-component API for ``topology.reliability.mode = EFFECTIVELY_ONCE``.

A component opts in by defining two methods (see :func:`is_stateful`)::

    def init_state(self, state):        # once, before the first tuple; state is a State,
        self.counts = state.keyed       # empty or restored from the last complete checkpoint
    def pre_save(self, checkpoint_id):  # just before checkpoint ``checkpoint_id`` is taken:
        ...                             # move anything cached in attributes into the state

A :class:`State` has two parts:

* the *plain* store, ``state.get/put/delete/items``: the task's own key-value data
  (a spout's source offsets, a bolt's running totals). It belongs to one task and
  is not redistributed on a rescale (see :meth:`State.restore`).
* the *keyed* store, ``state.keyed``: data scoped by the fields-grouping key of the
  tuples the task receives (word counts by word). Its entries are held per *key
  group*: the key space is cut into a fixed number of groups
  (``bittern.state.key.groups``, 128 by default, the largest parallelism a stateful
  component can ever have), and a task owns a contiguous range of groups. A
  rescale moves whole groups between tasks; no key is ever rehashed.

Key groups and routing
----------------------
``KeyGroups(n).group_of(key)`` is ``stable_hash(key) % n``; group ``g`` belongs to
task index ``g * n_tasks // n`` (Flink's scheme), so task ``i`` owns the range
``groups_of(i, n_tasks)``. A key's state lives where its tuples go only if the
fields grouping routes by the same rule: under EFFECTIVELY_ONCE,
``instance.grouping.FieldsChooser`` must choose ``KeyGroups(n).task_for(key,
self.tasks)`` instead of ``self.tasks[stable_hash(key) % len(self.tasks)]``
(modulo placement sends a key to a task that does not own its group, and moves
almost every key when the parallelism changes). ``key`` is exactly what
FieldsChooser hashes: the value itself for a one-field grouping, a tuple of the
values for several fields. A task index is the position of the task id in the
sorted list of the component's task ids (``FieldsChooser.tasks``).

Values and encoding
-------------------
A snapshot is msgpack with a format version (see :data:`FORMAT_VERSION`). State
keys and values must be made of None, bool, int (64-bit), float, str, bytes,
list, tuple and dict. Tuples round-trip as tuples (a msgpack extension type), so
tuple keys work; bytearray/memoryview come back as bytes, subclasses of these
types as the base type (a ``defaultdict`` comes back as a plain ``dict``).

Encodability is checked in two places, because neither alone suffices:

* ``put`` checks the key and the *top-level* type of the value (one isinstance
  test: cheap enough for every tuple) and raises :class:`StateTypeError` right
  there, where the mistake is, for the common case (an object, a set, a datetime);
* ``snapshot`` encodes everything, and if that fails, finds and names the key
  (and its key group) and the path inside the value of the offending object. This
  catches what ``put`` cannot see without encoding the whole value on every put:
  something unencodable nested in a container, or a container mutated after
  ``put`` (values are stored by reference, like a dict's).

Change log (incremental checkpoints)
------------------------------------
Every ``state.keyed.put`` and every ``delete`` that removes an entry records the key
in a per-group log (one dict store: a put stays cheap; see :class:`ChangeLog`). A checkpoint detaches that log
and writes, for keyed state, only the entries it names (their values as they are
now, or "deleted" for a key no longer there) as a *delta* on the previous complete
checkpoint (:mod:`bittern.api.deltas`). So the rule is: **a value changed in place
(a list appended to, a dict updated) must be put again** to be seen by an
incremental checkpoint; values are stored by reference, and only a ``put`` tells
the state that a key changed. The plain store and the runtime's stores are saved
whole in every checkpoint and have no such rule.
"""
from __future__ import annotations

import msgpack

from ..errors import BitternError
from ..hashing import stable_hash
from .changelog import DELETED, ChangeLog  # noqa: F401 - (ChangeLog: part of this module's API)

#: Version of the snapshot encoding written by :meth:`State.snapshot` (a full *base*).
FORMAT_VERSION = 1
#: Version of a *delta* document (:mod:`bittern.api.deltas`): changes on a parent checkpoint.
DELTA_VERSION = 2
_FORMAT = "bittern-state"
DEFAULT_KEY_GROUPS = 128
_TUPLE_EXT = 1
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1
_SCALARS = (type(None), bool, int, float, str, bytes, bytearray, memoryview)
_VALUE_TYPES = _SCALARS + (list, tuple, dict)
_ALLOWED = "None, bool, int, float, str, bytes, list, tuple or dict"


class StateError(BitternError):
    """Base of the errors of the state API."""


class StateTypeError(StateError, TypeError):
    """A key or value that a checkpoint could not encode."""


class StateFormatError(StateError, ValueError):
    """Snapshot bytes that are not a state snapshot this version can read."""


class StateConflictError(StateError, ValueError):
    """Two states merged hold the same key group or the same plain key."""


class StateOwnershipError(StateError, KeyError):
    """A keyed put for a key whose group this task does not own."""

    def __str__(self):
        return self.args[0] if self.args else ""


def is_stateful(component):
    """True if ``component`` opted in to checkpointed state (has ``init_state``)."""
    return callable(getattr(component, "init_state", None))


# -- key groups ---------------------------------------------------------------------------

class KeyGroups:
    """A fixed partition of the key space into ``n_groups`` groups, each owned by one task."""

    __slots__ = ("n_groups",)

    def __init__(self, n_groups=DEFAULT_KEY_GROUPS):
        if isinstance(n_groups, bool) or not isinstance(n_groups, int) or n_groups < 1:
            raise ValueError(f"the number of key groups must be a whole number >= 1, got {n_groups!r}")
        self.n_groups = n_groups

    def __repr__(self):
        return f"KeyGroups({self.n_groups})"

    def __eq__(self, other):
        return isinstance(other, KeyGroups) and other.n_groups == self.n_groups

    def __hash__(self):
        return hash(self.n_groups)

    def group_of(self, key):
        """The key group of ``key`` (a value, or a tuple of values for several fields)."""
        return stable_hash(key) % self.n_groups

    def _check_tasks(self, n_tasks):
        if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or n_tasks < 1:
            raise ValueError(f"the number of tasks must be a whole number >= 1, got {n_tasks!r}")

    def owner(self, group, n_tasks):
        """The task index (0-based) that owns ``group`` when there are ``n_tasks`` tasks."""
        self._check_tasks(n_tasks)
        if not 0 <= group < self.n_groups:
            raise ValueError(f"key group {group!r} is out of range 0..{self.n_groups - 1}")
        return group * n_tasks // self.n_groups

    def groups_of(self, task_index, n_tasks):
        """The contiguous range of groups that task ``task_index`` of ``n_tasks`` owns
        (empty when there are more tasks than groups: such a task holds no keyed state)."""
        self._check_tasks(n_tasks)
        if not 0 <= task_index < n_tasks:
            raise ValueError(f"task index {task_index!r} is out of range 0..{n_tasks - 1}")
        n = self.n_groups
        # the g with g * n_tasks // n == task_index: ceil(i*n/p) <= g < ceil((i+1)*n/p)
        return range(-(-task_index * n // n_tasks), -(-(task_index + 1) * n // n_tasks))

    def task_for(self, key, tasks):
        """The task of ``tasks`` (task ids in task-index order, i.e. sorted, as
        ``FieldsChooser.tasks``) that owns ``key``'s group: where fields grouping must
        send ``key`` under EFFECTIVELY_ONCE."""
        return tasks[self.group_of(key) * len(tasks) // self.n_groups]


# -- encoding -----------------------------------------------------------------------------

def _default(obj):
    # strict_types: exact types are packed natively; tuples and subclasses come here
    if isinstance(obj, tuple):
        return msgpack.ExtType(_TUPLE_EXT, _packb(list(obj)))
    if isinstance(obj, dict):
        return dict(obj)
    if isinstance(obj, list):
        return list(obj)
    if isinstance(obj, str):
        return str.__str__(obj)
    if isinstance(obj, int):  # bool is exact; IntEnum and friends
        return int.__int__(obj)
    if isinstance(obj, float):
        return float.__float__(obj)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    raise TypeError(f"can not serialize {type(obj).__qualname__!r} object")


def _packb(obj):
    return msgpack.packb(obj, default=_default, strict_types=True, use_bin_type=True)


def _ext_hook(code, data):
    if code == _TUPLE_EXT:
        return tuple(_unpackb(data))
    raise StateFormatError(f"unknown msgpack extension type {code} in a state snapshot")


def _unpackb(data):
    # strict_map_key=False: dicts inside values may have int/float/tuple keys; the
    # bytes are our own checkpoint, not untrusted network input
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook)


def _type_name(obj):
    t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _bad_scalar(obj):
    """Why ``obj`` (not a container) cannot be encoded, or None."""
    if not isinstance(obj, _SCALARS):
        return f"a {_type_name(obj)}, which msgpack cannot encode (state holds only {_ALLOWED})"
    if isinstance(obj, int) and not isinstance(obj, bool) and not _INT_MIN <= obj <= _INT_MAX:
        return f"the int {obj}, outside the 64-bit range msgpack encodes"
    return None


def _at(path):
    return f" at {path.lstrip()}" if path else ""


def _find_bad(obj, path="", depth=0):
    """``(path, reason)`` of the first unencodable object inside ``obj``, or None."""
    if depth > 512:
        return path, "nested too deeply (a container that contains itself?)"
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            bad = _find_bad(v, f"{path}[{i}]", depth + 1)
            if bad:
                return bad
        return None
    if isinstance(obj, dict):
        for k, v in obj.items():
            bad = _find_bad(k, f"{path} (the dict key {k!r})", depth + 1) or \
                _find_bad(v, f"{path}[{k!r}]", depth + 1)
            if bad:
                return bad
        return None
    reason = _bad_scalar(obj)
    return (path, reason) if reason else None


def _check_key(key, where):
    bad = _find_bad(key)
    if bad is None and isinstance(key, (list, dict, bytearray, memoryview)):
        bad = ("", f"a {_type_name(key)}, which cannot be a key (keys must be hashable)")
    if bad:
        raise StateTypeError(f"{where}({key!r}, ...): the key{_at(bad[0])} is {bad[1]}")


def _check_value(key, value, where):
    """The cheap put-time check: the value's top-level type (and an int's range)."""
    if isinstance(value, (list, tuple, dict)):
        return
    reason = _bad_scalar(value)
    if reason:
        raise StateTypeError(f"{where}({key!r}, ...): the value is {reason}")


# -- the stores ----------------------------------------------------------------------------

class KeyedState:
    """Key-value entries held per key group (``state.keyed``)."""

    def __init__(self, key_groups, owned_groups=None, change_log=True):
        self.key_groups = key_groups
        self._groups = {}  # group -> {key: value}
        self._owned = None if owned_groups is None else frozenset(owned_groups)
        # the change log since it was last detached (:class:`ChangeLog`): group -> {key:
        # value put, or DELETED}. One dict per group rather than a "changed" and a
        # "deleted" set: a put costs one dict store (no lookup in the big live dicts when
        # the checkpoint encodes it, which with a million keys is a cache miss per key),
        # and a later put or delete of the same key simply overwrites the entry.
        # (None: not kept, for a state that is never checkpointed: it would only grow)
        self._log = {} if change_log else None
        self._log_dels = set()  # groups whose log holds a DELETED

    @property
    def owned_groups(self):
        """The groups this task may write (None: not checked)."""
        return self._owned

    def get(self, key, default=None):
        d = self._groups.get(self.key_groups.group_of(key))
        if d is None:
            return default
        return d.get(key, default)

    def _group_for_put(self, key, value):
        """``key``'s group, after put's checks (the key, the value's type, ownership)."""
        _check_key(key, "state.keyed.put")
        _check_value(key, value, "state.keyed.put")
        g = self.key_groups.group_of(key)
        if self._owned is not None and g not in self._owned:
            raise StateOwnershipError(
                f"state.keyed.put({key!r}, ...): the key is in key group {g}, which this task does not "
                f"own: under EFFECTIVELY_ONCE fields grouping must route by KeyGroups.task_for, so a "
                f"key's tuples reach the task that holds its state")
        return g

    def put(self, key, value):
        g = self._group_for_put(key, value)
        d = self._groups.get(g)
        if d is None:
            d = self._groups[g] = {}
        d[key] = value
        log = self._log
        if log is not None:
            lg = log.get(g)
            if lg is None:
                lg = log[g] = {}
            lg[key] = value

    def delete(self, key):
        """Remove ``key`` (no error if absent)."""
        g = self.key_groups.group_of(key)
        d = self._groups.get(g)
        if d is not None and key in d:
            del d[key]
            if not d:
                del self._groups[g]
            self._record(g, key, DELETED)

    # -- the change log (incremental checkpoints)
    def _record(self, g, key, value):
        """Note in the change log that ``key`` (group ``g``) is now ``value`` or DELETED.
        (``put`` does the same inline: it runs per tuple.)"""
        log = self._log
        if log is not None:
            lg = log.get(g)
            if lg is None:
                lg = log[g] = {}
            lg[key] = value
            if value is DELETED:
                self._log_dels.add(g)

    def detach_log(self):
        """The :class:`ChangeLog` since the last detach, replaced by an empty one: O(1),
        what a checkpoint does on the instance's loop."""
        if self._log is None:
            return ChangeLog()
        log = ChangeLog(self._log, self._log_dels)
        self._log, self._log_dels = {}, set()
        return log

    def changes(self):
        """``(changed, deleted)`` of the current change log: ``{group: set of keys}``
        each (see :meth:`ChangeLog.changes`)."""
        return ChangeLog(self._log or {}, self._log_dels).changes()

    def items(self):
        """``(key, value)`` pairs, group by group (a list: safe to modify the state meanwhile)."""
        return [kv for g in sorted(self._groups) for kv in self._groups[g].items()]

    def group_items(self, group):
        return list(self._groups.get(group, {}).items())

    def groups(self):
        """The key groups that hold at least one entry, sorted."""
        return sorted(self._groups)

    def __contains__(self, key):
        d = self._groups.get(self.key_groups.group_of(key))
        return d is not None and key in d

    def __len__(self):
        return sum(len(d) for d in self._groups.values())

    def __repr__(self):
        return f"<KeyedState {len(self)} entries in {len(self._groups)} groups of {self.key_groups.n_groups}>"


class State:
    """What ``init_state`` receives: a plain key-value store plus ``keyed`` state."""

    def __init__(self, key_groups=DEFAULT_KEY_GROUPS, owned_groups=None, change_log=True, keyed=None):
        """``key_groups``: a :class:`KeyGroups` or a number of groups; ``owned_groups``:
        the groups this task owns (keyed puts outside them raise), None to not check;
        ``change_log``: keep the keyed store's change log (incremental checkpoints; off
        for a state that is never checkpointed); ``keyed``: the keyed store, if not a
        new in-memory one (the disk backend, bittern/api/diskstate.py)."""
        if not isinstance(key_groups, KeyGroups):
            key_groups = KeyGroups(key_groups)
        self.key_groups = key_groups
        self._plain = {}
        self.keyed = KeyedState(key_groups, owned_groups, change_log) if keyed is None else keyed
        # The runtime's own state, beside the user's and invisible to it: watermarks and
        # sources' clocks (``system``, per task), timers and windows (``system_keyed``,
        # per key group, moving with the groups on a rescale). ``system_merged``: after a
        # rescale, the ``system`` stores of the old tasks this task takes over.
        self.system = {}
        self.system_keyed = KeyedState(key_groups, None, change_log=False)  # (saved whole)
        self.system_merged = []

    @classmethod
    def for_task(cls, task_index, n_tasks, key_groups=DEFAULT_KEY_GROUPS, change_log=True, keyed=None):
        """An empty state for task ``task_index`` of ``n_tasks``, checking ownership;
        ``keyed``: a function of the owned groups making the keyed store (None: memory)."""
        if not isinstance(key_groups, KeyGroups):
            key_groups = KeyGroups(key_groups)
        owned = key_groups.groups_of(task_index, n_tasks)
        return cls(key_groups, owned, change_log, None if keyed is None else keyed(owned))

    @property
    def on_disk(self):
        """True if the keyed store is the disk backend's."""
        return self.keyed._groups is None

    # -- the plain store
    def get(self, key, default=None):
        return self._plain.get(key, default)

    def put(self, key, value):
        _check_key(key, "state.put")
        _check_value(key, value, "state.put")
        self._plain[key] = value

    def delete(self, key):
        """Remove ``key`` (no error if absent)."""
        self._plain.pop(key, None)

    def items(self):
        """``(key, value)`` pairs of the plain store (a list: safe to modify meanwhile)."""
        return list(self._plain.items())

    def __contains__(self, key):
        return key in self._plain

    def __len__(self):
        return len(self._plain)

    def __repr__(self):
        return f"<State {len(self._plain)} plain entries, {self.keyed!r}>"

    # -- snapshots
    def _doc(self, plain=True, groups=None):
        kg = self.keyed._groups
        sel = sorted(kg) if groups is None else sorted(g for g in groups if g in kg)
        sk = self.system_keyed._groups
        ssel = sorted(sk) if groups is None else sorted(g for g in groups if g in sk)
        return {"format": _FORMAT, "version": FORMAT_VERSION, "key_groups": self.key_groups.n_groups,
                "plain": [[k, v] for k, v in self._plain.items()] if plain else [],
                "keyed": [[g, [[k, v] for k, v in kg[g].items()]] for g in sel],
                "system": [[k, v] for k, v in self.system.items()] if plain else [],
                "system_keyed": [[g, [[k, v] for k, v in sk[g].items()]] for g in ssel]}

    def snapshot(self):
        """The whole state as bytes (msgpack, versioned). Raises :class:`StateTypeError`
        naming the key, its key group and the offending object if a value cannot be encoded."""
        if self.on_disk:
            from .diskstate import dump_base
            return b"".join(dump_base(self.keyed.view(), self.key_groups.n_groups, *self.encode_rest()))
        return self._encode(self._doc())

    def encode_rest(self):
        """``(plain, system, system_keyed)`` packed: what a base holds besides the keyed
        store (the disk backend writes its keyed store from the database)."""
        sk = self.system_keyed._groups
        return (self._encode([[k, v] for k, v in self._plain.items()]),
                self._encode([[k, v] for k, v in self.system.items()]),
                self._encode([[g, [[k, v] for k, v in sk[g].items()]] for g in sorted(sk)]))

    def _encode(self, doc):
        try:
            return _packb(doc)
        except (TypeError, ValueError, OverflowError) as e:
            self._explain(e)
            raise StateTypeError(f"state snapshot failed: {e}") from e

    def _explain(self, err):
        def check(where, key, value):
            bad = _find_bad(key)
            if bad:
                raise StateTypeError(f"state snapshot: {where} key {key!r}: the key{_at(bad[0])} is "
                                     f"{bad[1]}") from err
            bad = _find_bad(value)
            if bad:
                path, reason = bad
                raise StateTypeError(
                    f"state snapshot: {where} key {key!r}: the value{_at(path)} is {reason} (put() checks "
                    f"only a value's top-level type; this one is nested or was changed after put)") from err

        for k, v in self._plain.items():
            check("plain", k, v)
        for g, d in sorted(self.system_keyed._groups.items()):
            for k, v in d.items():
                check(f"windows and timers (group {g}) of", k, v)
        for g, d in sorted((self.keyed._groups or {}).items()):  # (disk: checked at its flush)
            for k, v in d.items():
                check(f"keyed (group {g})", k, v)

    @classmethod
    def restore(cls, data, groups=None, plain=None, key_groups=None, owned_groups=None):
        """A State from ``snapshot()`` bytes.

        ``groups``: restore only these key groups (a rescale: a new task restores its
        groups from each old task that held some). ``plain``: whether to restore the
        plain store; by default only when ``groups`` is None, because plain state
        belongs to one task and copying it into every new task that takes some of the
        old task's groups would duplicate it (a rescale gives old task i's plain state
        to new task i, and must not drop a task that has some). ``key_groups``: the
        expected number of groups (by default the snapshot's); a different number is an
        error, as the key-to-group mapping would change. ``owned_groups``: as in
        :class:`State` (defaults to ``groups``).
        """
        doc = _load_doc(data)
        if doc["version"] != FORMAT_VERSION:
            raise StateFormatError(
                f"this state snapshot is a delta on checkpoint {doc.get('parent')!r}, not a full one: "
                f"resolve its chain first (CheckpointStore.load, bittern.api.deltas.resolve)")
        n = doc["key_groups"]
        if key_groups is not None:
            expect = key_groups.n_groups if isinstance(key_groups, KeyGroups) else key_groups
            if expect != n:
                raise StateFormatError(
                    f"the state snapshot was taken with {n} key groups, but {expect} are configured "
                    f"(bittern.state.key.groups): the number of key groups is fixed for a topology's "
                    f"lifetime")
        if plain is None:
            plain = groups is None
        if owned_groups is None and groups is not None:
            owned_groups = groups
        st = cls(KeyGroups(n), owned_groups)
        if plain:
            for k, v in doc["plain"]:
                st._plain[k] = v
            for k, v in doc.get("system", ()):
                st.system[k] = v
        want = None if groups is None else set(groups)
        for store, entries in ((st.keyed, doc["keyed"]), (st.system_keyed, doc.get("system_keyed", ()))):
            for g, pairs in entries:
                if want is not None and g not in want:
                    continue
                if pairs:
                    store._groups[g] = {k: v for k, v in pairs}
        return st

    def split_by_groups(self):
        """``{group: bytes}``: one snapshot per non-empty key group, holding only that
        group's keyed entries (no plain state), for shipping groups to new owners."""
        return {g: self._encode(self._doc(plain=False, groups=[g])) for g in self.keyed.groups()}

    def merge(self, *others):
        """Fold other states (State objects or snapshot bytes) into this one, in place,
        and return self. Raises :class:`StateConflictError` if two hold the same key
        group or the same plain key (a rescale plan gave something to two owners)."""
        for other in others:
            if not isinstance(other, State):
                other = State.restore(other, plain=True)
            if other.key_groups != self.key_groups:
                raise StateConflictError(f"cannot merge a state of {other.key_groups.n_groups} key groups "
                                         f"into one of {self.key_groups.n_groups}")
            if self.on_disk or other.on_disk:
                if other.on_disk or other.keyed._groups:
                    raise StateConflictError("merge: a disk-backed keyed store is loaded from checkpoint "
                                             "files (instance/rescale.py), not merged")
            both = set(self.keyed._groups or ()) & set(other.keyed._groups)
            if both:
                raise StateConflictError(f"both states hold key groups {sorted(both)}")
            dup = [k for k in other._plain if k in self._plain]
            if dup:
                raise StateConflictError(f"both states hold the plain keys {dup!r}")
            owned = self.keyed.owned_groups
            if owned is not None:
                foreign = [g for g in other.keyed._groups if g not in owned]
                if foreign:
                    raise StateOwnershipError(f"merge: key groups {sorted(foreign)} are not owned by this task")
            self._plain.update(other._plain)
            for g, d in other.keyed._groups.items():
                self.keyed._groups[g] = dict(d)
            for g, d in other.system_keyed._groups.items():
                self.system_keyed._groups.setdefault(g, {}).update(d)
            if other.system:
                self.system_merged.append(dict(other.system))
        return self


def _load_doc(data):
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StateFormatError(f"a state snapshot is bytes, got {_type_name(data)}")
    try:
        doc = _unpackb(data)
    except StateFormatError:
        raise
    except Exception as e:
        raise StateFormatError(f"not a state snapshot (msgpack: {e})") from e
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        raise StateFormatError("not a state snapshot (no bittern-state header)")
    check_doc(doc)
    return doc


def check_doc(doc):
    """Raise :class:`StateFormatError` unless ``doc`` (a decoded snapshot) is a base
    (version 1) or a delta (version 2) this Bittern reads."""
    v = doc.get("version")
    if isinstance(v, bool) or not isinstance(v, int) or v > DELTA_VERSION or v < 1:
        raise StateFormatError(f"state snapshot format version {v!r} is not supported (this Bittern reads "
                               f"versions 1..{DELTA_VERSION}; was it written by a newer one?)")
    if v == FORMAT_VERSION:
        if not isinstance(doc.get("key_groups"), int) or not isinstance(doc.get("plain"), list) \
                or not isinstance(doc.get("keyed"), list):
            raise StateFormatError("corrupt state snapshot: missing key_groups/plain/keyed")
    elif not isinstance(doc.get("key_groups"), int) or not isinstance(doc.get("parent"), int) \
            or not isinstance(doc.get("plain"), list) or not isinstance(doc.get("changed"), list) \
            or not isinstance(doc.get("deleted"), list):
        raise StateFormatError("corrupt state delta: missing key_groups/parent/plain/changed/deleted")
