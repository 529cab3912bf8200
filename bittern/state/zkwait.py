"""How long we wait for ZooKeeper, in two places where kazoo's own answer is wrong.

**The session handshake.** kazoo waits for the answer to its Connect request the whole
session timeout (divided by the number of hosts). A server that accepted the
connection and never answers holds the client there until the session it came to
save has expired on the server. ZooKeeper 3.8 does exactly that to a connection made
while it loads its database on start (ZOOKEEPER-5051: closing it throws before the
socket is closed), so a client of a single restarted server that reconnects at that
moment lost its session: measured, every connection in that window hangs, and the
restart test lost its session in 2 of 33 runs beside two CPU hogs. :class:`Client`
waits at most :func:`handshake_timeout` for any answer while connecting, then drops
the connection and retries, with most of the session still left.

**Calls that must not wait for ZooKeeper to come back** (nimbus's API answers 503).
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

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss
from kazoo.handlers.threading import AsyncResult, KazooTimeoutError, SequentialThreadingHandler
from kazoo.protocol.connection import ConnectionHandler

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


# -- the session handshake ----------------------------------------------------------------
def handshake_timeout(session_timeout):
    """Seconds to wait for the server's answer while connecting: a third of the session
    (as the Java client waits with three servers), so that two hung attempts still leave
    time for a third; never under 2 s (a loaded server answers late) nor over the session."""
    return min(session_timeout, max(session_timeout / 3.0, 2.0))


class _Connection(ConnectionHandler):
    handshake_timeout = None  # seconds; set by Client

    def _invoke(self, timeout, request, xid=None):
        # kazoo calls _invoke only while connecting (the Connect request, then the auth
        # packets), with the session timeout per host as the limit.
        return super()._invoke(min(timeout, self.handshake_timeout), request, xid)


class Client(KazooClient):
    """kazoo's client whose connecting waits at most ``handshake_timeout`` s for an answer
    (module docstring). It swaps in a connection handler of ours before anything starts;
    kazoo has no public hook for that, so this leans on 2.x's ``_connection`` and
    ``_invoke`` (setup.py pins kazoo below 3; tests/test_state_zk.py proves the bound)."""

    def __init__(self, *args, handshake_timeout, **kwargs):
        super().__init__(*args, **kwargs)
        made = self._connection
        self._connection = _Connection(self, made.retry_sleeper, logger=made.logger,
                                       sasl_options=made.sasl_options)
        self._connection.handshake_timeout = float(handshake_timeout)
