"""Streams and groupings: how a component declares outputs and subscribes to inputs.

Names follow heronpy / streamparse: ``Stream(fields, name, direct)``,
``Grouping.SHUFFLE``, ``Grouping.fields("word")``, ``Grouping.custom(...)``.
A grouping is a small serialisable description; the code that chooses tasks
from it lives in :mod:`bittern.routing`.
"""
from __future__ import annotations

import base64
import pickle
from dataclasses import dataclass, field

from ..errors import TopologyError

DEFAULT_STREAM = "default"


@dataclass(frozen=True)
class Stream:
    """An output stream: its field names, name, and whether it is direct."""

    fields: tuple = ()
    name: str = DEFAULT_STREAM
    direct: bool = False

    def __init__(self, fields=(), name=DEFAULT_STREAM, direct=False):
        if isinstance(fields, str):
            fields = (fields,)
        fields = tuple(fields or ())
        for f in fields:
            if not isinstance(f, str) or not f:
                raise TopologyError(f"stream {name!r}: field names must be non-empty strings, got {f!r}")
        if len(set(fields)) != len(fields):
            raise TopologyError(f"stream {name!r}: duplicate field names in {list(fields)}")
        if not isinstance(name, str) or not name:
            raise TopologyError(f"stream name must be a non-empty string, got {name!r}")
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "direct", bool(direct))

    def to_dict(self):
        return {"fields": list(self.fields), "direct": self.direct}


@dataclass(frozen=True)
class GroupingSpec:
    """One grouping. ``kind`` is one of :data:`KINDS`; ``fields`` for fields/partial-key;
    ``custom`` holds a class path or a pickled grouping object."""

    kind: str
    fields: tuple = ()
    custom: dict = field(default=None, compare=False, hash=False)

    def to_dict(self):
        d = {"type": self.kind}
        if self.fields:
            d["fields"] = list(self.fields)
        if self.custom is not None:
            d["custom"] = self.custom
        return d

    @staticmethod
    def from_dict(d):
        return GroupingSpec(d["type"], tuple(d.get("fields", ())), d.get("custom"))

    def __repr__(self):
        if self.fields:
            return f"Grouping.{self.kind}({', '.join(map(repr, self.fields))})"
        return f"Grouping.{self.kind.upper()}"


KINDS = ("shuffle", "fields", "all", "global", "none", "direct",
         "local_or_shuffle", "custom", "partial_key")


def _field_names(fields):
    if len(fields) == 1 and isinstance(fields[0], (list, tuple)):
        fields = tuple(fields[0])
    if not fields:
        raise TopologyError("a fields grouping needs at least one field name")
    for f in fields:
        if not isinstance(f, str) or not f:
            raise TopologyError(f"grouping field names must be non-empty strings, got {f!r}")
    return tuple(fields)


class Grouping:
    """Grouping constants and constructors, as in heronpy and streamparse."""

    SHUFFLE = GroupingSpec("shuffle")
    ALL = GroupingSpec("all")
    GLOBAL = GroupingSpec("global")
    LOWEST = GLOBAL  # Heron's name for global grouping
    NONE = GroupingSpec("none")
    DIRECT = GroupingSpec("direct")
    LOCAL_OR_SHUFFLE = GroupingSpec("local_or_shuffle")

    @staticmethod
    def fields(*fields):
        """Tuples with equal values of ``fields`` go to the same task (stable hash)."""
        return GroupingSpec("fields", _field_names(fields))

    @staticmethod
    def partial_key(*fields):
        """Partial-key grouping: each key has two candidate tasks; the less loaded wins."""
        return GroupingSpec("partial_key", _field_names(fields))

    @staticmethod
    def custom(grouping):
        """A custom grouping: a class, an instance, or a ``"module.Class"`` path of an
        object with ``prepare(context, component, stream, target_tasks)`` and
        ``choose_tasks(values)``."""
        if isinstance(grouping, str):
            mod, _, qual = grouping.rpartition(".") if ":" not in grouping else grouping.partition(":")
            if not mod or not qual:
                raise TopologyError(f"custom grouping {grouping!r} must be 'module.Class'")
            return GroupingSpec("custom", custom={"class": f"{mod}:{qual}"})
        if isinstance(grouping, type):
            _check_custom(grouping)
            return GroupingSpec("custom", custom={"class": f"{grouping.__module__}:{grouping.__qualname__}"})
        _check_custom(type(grouping))
        try:
            blob = pickle.dumps(grouping)
        except Exception as e:  # noqa: BLE001 - reported to the user with the cause
            raise TopologyError(f"custom grouping {grouping!r} cannot be pickled: {e}") from None
        return GroupingSpec("custom", custom={"pickle": base64.b64encode(blob).decode()})

    @staticmethod
    def is_grouping(obj):
        return isinstance(obj, GroupingSpec)


def _check_custom(cls):
    for meth in ("choose_tasks",):
        if not callable(getattr(cls, meth, None)):
            raise TopologyError(f"custom grouping {cls.__qualname__} has no method {meth}(values)")
