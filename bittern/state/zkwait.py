"""Calls that must not wait for ZooKeeper to come back (nimbus's API answers 503).

kazoo (2.11) queues a call made while it reconnects, and its synchronous API then
waits for the answer with no limit: until the server is back, however long that
takes. Daemons' own loops may well wait like that; an HTTP request must not. Inside
:func:`impatient` (per thread), a ZooKeeper operation (see ``ZkStateManager._retry``)

- fails at once with :class:`Unreachable` when kazoo has no live connection, instead
  of retrying until the command retry's deadline;
- waits at most ``bound`` seconds for any answer, then fails with ``ConnectionLoss``
  (which the retry turns into the check above).

A call abandoned that way stays in kazoo's queue and is sent once the connection is
back, before any later call (the queue is first in, first out); only the narrow race
of a connection lost between the check and the call leaves one behind.
"""
from __future__ import annotations

import contextlib
import threading

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss
from kazoo.handlers.threading import AsyncResult, KazooTimeoutError, SequentialThreadingHandler

_local = threading.local()


class Unreachable(ConnectionClosedError):
    """No live ZooKeeper connection, in a call that must not wait for one. kazoo's retry
    passes ConnectionClosedError through at once instead of retrying it."""


def bound():
    """Seconds this thread's ZooKeeper calls may wait for an answer; None: no limit."""
    return getattr(_local, "bound", None)


@contextlib.contextmanager
def impatient(secs):
    prev = bound()
    _local.bound = float(secs)
    try:
        yield
    finally:
        _local.bound = prev


class _Result(AsyncResult):
    def get(self, block=True, timeout=None):
        secs = bound()
        if not (block and timeout is None and secs is not None):
            return super().get(block, timeout)
        try:
            return super().get(True, secs)
        except KazooTimeoutError:
            raise ConnectionLoss(f"no answer from ZooKeeper within {secs:g}s") from None


class Handler(SequentialThreadingHandler):
    """kazoo's threading handler whose results honour :func:`impatient`."""

    def async_result(self):
        return _Result(self)
