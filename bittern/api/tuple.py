"""The tuple a bolt receives: ``id, component, stream, task, values``.

It is a named tuple (as in pystorm and heronpy), so it is cheap to create on the
hot path, unpacks like one, and also answers ``tup["field"]`` by field name.
"""
from __future__ import annotations

from collections import namedtuple

TICK_COMPONENT = "__system"
TICK_STREAM = "__tick"

# (component, stream) -> {field: index}; filled by the runtime from the topology.
_SCHEMAS: dict = {}


class Tuple(namedtuple("Tuple", "id component stream task values")):
    __slots__ = ()

    def __getitem__(self, key):
        if isinstance(key, str):
            try:
                return self.values[_SCHEMAS[(self.component, self.stream)][key]]
            except KeyError:
                fields = list(_SCHEMAS.get((self.component, self.stream), {}))
                raise KeyError(f"tuple from {self.component!r} stream {self.stream!r} has no field "
                               f"{key!r} (fields: {fields})") from None
        return tuple.__getitem__(self, key)

    @property
    def is_tick(self):
        return self.stream == TICK_STREAM and self.component == TICK_COMPONENT

    @property
    def is_heartbeat(self):
        return self.stream == "__heartbeat"


def register_schema(component, stream, fields):
    _SCHEMAS[(component, stream)] = {f: i for i, f in enumerate(fields)}


def tick_tuple(freq):
    return Tuple(None, TICK_COMPONENT, TICK_STREAM, -1, [freq])
