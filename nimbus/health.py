"""Nimbus without ZooKeeper: an API call answers 503 at once, naming ZooKeeper.

Every nimbus call reads or writes ZooKeeper, and the state manager holds an operation
through a disconnection until the server is back (kazoo queues it): a request made
while ZooKeeper is away would block that long. So the API asks first whether the
connection is up (:func:`unreachable`); a read runs :func:`impatient`, so one that
raced the loss fails at once too; and a request that lost the connection half-way
(:func:`is_zk_failure`) is a 503 as well.
"""
from __future__ import annotations

import contextlib


def unreachable(state):
    """A one-line reason when ``state`` (the ZooKeeper state manager) has no live
    connection now; None when it has one (or is not a ZooKeeper state manager)."""
    if getattr(state, "connected", True):
        return None
    return message(state)


def impatient(state):
    """A context in which this thread's ZooKeeper calls fail at once without a connection
    (bittern/state/zkwait.py), for a state manager that has one."""
    fn = getattr(state, "impatient", None)
    return fn() if fn is not None else contextlib.nullcontext()


def message(state):
    hosts = getattr(state, "hosts", None) or "?"
    return (f"ZooKeeper at {hosts} is unreachable: nimbus can neither read nor change the cluster's state "
            "until it is back (running topologies go on); try again shortly")


def is_zk_failure(exc):
    """True when ``exc`` is a ZooKeeper operation that failed for want of a connection."""
    try:
        from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
        from kazoo.retry import RetryFailedError
    except ImportError:  # pragma: no cover - nimbus always has kazoo
        return False
    return isinstance(exc, (ConnectionClosedError, ConnectionLoss, SessionExpiredError, RetryFailedError))
