"""Where a batch goes, and what waits to be sent (pure logic, no sockets).

The stream manager never decodes a data tuple: a batch arrives tagged with its
destination task, and :class:`RoutingTable` says whether that task lives in this
container (deliver to the instance's socket) or in another (forward to that
container's stream manager). :class:`OutQueues` holds batches that a socket
would not take yet, and counts their bytes: the measure backpressure works on.
"""
from __future__ import annotations

from collections import deque

from bittern import wire

LOCAL, PEER, UNKNOWN = "local", "peer", "unknown"


class RoutingTable:
    def __init__(self, task_container, container):
        self.container = container
        self.update(task_container)

    def update(self, task_container):
        self.task_container = dict(task_container)
        self._route = {}
        for task, c in self.task_container.items():
            if c == self.container:
                self._route[task] = (LOCAL, wire.instance_identity(task))
            else:
                self._route[task] = (PEER, c)

    def route(self, task):
        """``(LOCAL, identity)``, ``(PEER, container)`` or ``(UNKNOWN, None)``."""
        return self._route.get(task, (UNKNOWN, None))

    @property
    def local_tasks(self):
        return sorted(t for t, c in self.task_container.items() if c == self.container)

    @property
    def peers(self):
        return sorted({c for c in self.task_container.values() if c != self.container})


class OutQueues:
    """Batches waiting per destination key, with byte counts per key and in total."""

    def __init__(self):
        self._q = {}
        self._bytes = {}
        self.total_bytes = 0

    def push(self, key, frames, size):
        q = self._q.get(key)
        if q is None:
            self._q[key] = q = deque()
            self._bytes[key] = 0
        q.append((frames, size))
        self._bytes[key] += size
        self.total_bytes += size

    def has(self, key):
        return key in self._q

    def keys(self):
        return list(self._q)

    def bytes(self, key):
        return self._bytes.get(key, 0)

    def peek(self, key):
        return self._q[key][0][0]

    def pop(self, key):
        q = self._q[key]
        _, size = q.popleft()
        self._bytes[key] -= size
        self.total_bytes -= size
        if not q:
            del self._q[key]
            del self._bytes[key]

    def drop(self, key):
        """Discard everything queued for ``key``; returns how many batches."""
        q = self._q.pop(key, None)
        if q is None:
            return 0
        self.total_bytes -= self._bytes.pop(key)
        return len(q)

    def __bool__(self):
        return bool(self._q)
