"""Groupings, decided in the emitting instance (pure logic, no I/O).

Each subscription of a bolt to a stream gets a *chooser* whose ``choose(values)``
returns the list of destination task ids. Choosers return shared lists: callers
must not mutate them. The stream manager never decodes a tuple: it forwards
batches to the tasks chosen here.
"""
from __future__ import annotations

import random

from bittern.api.topology import load_custom_grouping
from bittern.errors import SchemaError
from bittern.hashing import stable_hash, storm_task_index

_KEY_CACHE_MAX = 1 << 16


class _RoundRobin:
    def __init__(self, tasks):
        self.tasks = list(tasks)
        self._single = [[t] for t in self.tasks]
        self._n = len(self.tasks)
        self._i = random.randrange(self._n)

    def choose(self, values):
        self._i += 1
        return self._single[self._i % self._n]


class ShuffleChooser(_RoundRobin):
    """Even spread: round-robin from a random start (per emitting task)."""


class FieldsChooser:
    """Same key → same task, by stable hash; a bounded cache skips re-hashing hot keys.

    With ``key_groups`` (EFFECTIVELY_ONCE) a key goes to the task that owns its key
    group (``KeyGroups.task_for``), where its keyed state lives; otherwise to
    ``tasks[stable_hash(key) % n]``. Either way the choice is one index into the
    sorted tasks, computed by ``_index`` (the modulo is inlined on the default path).
    """

    def __init__(self, tasks, field_idx, key_groups=None):
        self.tasks = sorted(tasks)
        self._single = [[t] for t in self.tasks]
        self._n = len(self.tasks)
        self._idx = list(field_idx)
        self._one = self._idx[0] if len(self._idx) == 1 else None
        self._cache = {}
        self.key_groups = key_groups
        if key_groups is not None:
            ng, n = key_groups.n_groups, self._n
            self.choose = self._choose_grouped
            self._group_task = [self._single[g * n // ng] for g in range(ng)]

    def task_for(self, key):
        if self.key_groups is not None:
            return self.key_groups.task_for(key, self.tasks)
        return self.tasks[stable_hash(key) % self._n]

    def _choose_grouped(self, values):
        key = values[self._one] if self._one is not None else tuple(values[i] for i in self._idx)
        if type(key) is not str:
            return self._group_task[stable_hash(key) % len(self._group_task)]
        try:
            return self._cache[key]
        except KeyError:
            pass
        out = self._group_task[stable_hash(key) % len(self._group_task)]
        if len(self._cache) >= _KEY_CACHE_MAX:
            self._cache.clear()
        self._cache[key] = out
        return out

    def choose(self, values):
        key = values[self._one] if self._one is not None else tuple(values[i] for i in self._idx)
        if type(key) is not str:
            # Only strings are cached: 1, 1.0 and True are equal dict keys but encode
            # (and so hash) differently, and a cache must not make placement depend on
            # which of them this emitter saw first.
            return self._single[stable_hash(key) % self._n]
        try:
            return self._cache[key]
        except KeyError:
            pass
        out = self._single[stable_hash(key) % self._n]
        if len(self._cache) >= _KEY_CACHE_MAX:
            self._cache.clear()
        self._cache[key] = out
        return out


class StormFieldsChooser:
    """Fields grouping placed as Storm 2 places it (``topology.fields.grouping.hash =
    storm``): the sorted target tasks indexed by ``floorMod(Arrays.deepHashCode(keys),
    n)`` (:func:`bittern.hashing.storm_task_index`), so a key lands on the task of
    the same index as on a Storm cluster. Single string keys are cached."""

    def __init__(self, tasks, field_idx):
        self.tasks = sorted(tasks)
        self._single = [[t] for t in self.tasks]
        self._n = len(self.tasks)
        self._idx = list(field_idx)
        self._cache = {}

    def choose(self, values):
        key = [values[i] for i in self._idx]
        if len(key) != 1 or type(key[0]) is not str:
            return self._single[storm_task_index(key, self._n)]
        try:
            return self._cache[key[0]]
        except KeyError:
            pass
        out = self._single[storm_task_index(key, self._n)]
        if len(self._cache) >= _KEY_CACHE_MAX:
            self._cache.clear()
        self._cache[key[0]] = out
        return out


class AllChooser:
    def __init__(self, tasks):
        self.tasks = sorted(tasks)

    def choose(self, values):
        return self.tasks


class GlobalChooser:
    """Storm's global / Heron's lowest: every tuple to the lowest task id."""

    def __init__(self, tasks):
        self.tasks = [min(tasks)]

    def choose(self, values):
        return self.tasks


class LocalOrShuffleChooser(_RoundRobin):
    """Shuffle among the target tasks in the emitter's own container, if any."""

    def __init__(self, tasks, local_tasks):
        local = [t for t in tasks if t in local_tasks]
        super().__init__(local or tasks)


class PartialKeyChooser:
    """Partial-key grouping (Nasir et al.): two candidate tasks per key by two
    independent hashes; the one this emitter has sent fewer tuples to wins."""

    def __init__(self, tasks, field_idx):
        self.tasks = sorted(tasks)
        self._single = [[t] for t in self.tasks]
        self._n = len(self.tasks)
        self._idx = list(field_idx)
        self._load = [0] * self._n

    def candidates(self, key):
        return stable_hash(key) % self._n, stable_hash(key, 0x9E3779B9) % self._n

    def choose(self, values):
        key = tuple(values[i] for i in self._idx)
        a, b = self.candidates(key)
        i = a if self._load[a] <= self._load[b] else b
        self._load[i] += 1
        return self._single[i]


class CustomChooser:
    def __init__(self, tasks, custom, context, component, stream, where):
        self.tasks = sorted(tasks)
        self._allowed = set(self.tasks)
        self._obj = load_custom_grouping(custom, where=where)
        self._where = where
        prepare = getattr(self._obj, "prepare", None)
        if prepare is not None:
            prepare(context, component, stream, list(self.tasks))

    def choose(self, values):
        out = self._obj.choose_tasks(values)
        if out is None:
            return []
        out = list(out)
        for t in out:
            if t not in self._allowed:
                raise SchemaError(f"{self._where}: custom grouping chose task {t!r}, which is not one of "
                                  f"the target tasks {self.tasks}")
        return out


def make_chooser(grouping, tasks, fields, local_tasks, context=None, component=None, stream=None,
                 where="grouping", key_groups=None, fields_hash="crc32"):
    """The chooser for one subscription. ``fields`` are the stream's declared fields;
    ``key_groups``: a ``KeyGroups`` under EFFECTIVELY_ONCE (fields grouping routes by it);
    ``fields_hash``: ``topology.fields.grouping.hash``."""
    kind = grouping.kind
    if kind in ("shuffle", "none"):
        return ShuffleChooser(tasks)
    if kind == "fields" and fields_hash == "storm" and key_groups is None:
        return StormFieldsChooser(tasks, [fields.index(f) for f in grouping.fields])
    if kind == "fields":
        return FieldsChooser(tasks, [fields.index(f) for f in grouping.fields], key_groups)
    if kind == "partial_key":
        return PartialKeyChooser(tasks, [fields.index(f) for f in grouping.fields])
    if kind == "all":
        return AllChooser(tasks)
    if kind == "global":
        return GlobalChooser(tasks)
    if kind == "local_or_shuffle":
        return LocalOrShuffleChooser(tasks, local_tasks)
    if kind == "custom":
        return CustomChooser(tasks, grouping.custom, context, component, stream, where)
    if kind == "direct":
        return None  # chosen by the emitter with direct_task
    raise ValueError(f"unknown grouping {kind!r}")


class StreamRouter:
    """Routes the tuples of one output stream to the tasks of all its subscribers."""

    def __init__(self, component, stream, fields, direct, choosers, direct_tasks):
        self.component = component
        self.stream = stream
        self.fields = list(fields)
        self.arity = len(self.fields)
        self.direct = direct
        self.choosers = choosers  # for non-direct streams
        self.direct_tasks = set(direct_tasks)  # tasks subscribed with direct grouping
        # the one chooser of a non-direct stream with a single subscriber: the emitter's fast path
        self.only = choosers[0].choose if len(choosers) == 1 and not direct else None

    def route(self, values, direct_task=None):
        if direct_task is not None or self.direct:
            if not self.direct:
                raise SchemaError(f"component {self.component!r}: emit with direct_task on stream "
                                  f"{self.stream!r}, which is not declared direct")
            if direct_task is None:
                raise SchemaError(f"component {self.component!r}: stream {self.stream!r} is direct; "
                                  "emit needs direct_task=")
            if direct_task not in self.direct_tasks:
                raise SchemaError(f"component {self.component!r}: direct_task {direct_task!r} does not "
                                  f"subscribe to stream {self.stream!r} (tasks: {sorted(self.direct_tasks)})")
            return [direct_task]
        if self.only is not None:
            return self.only(values)
        out = []
        for ch in self.choosers:
            out.extend(ch.choose(values))
        return out
