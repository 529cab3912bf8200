"""Storm Trident's rules for idempotent updates of a store without transactions.

A store that cannot take part in a two-phase commit (a key-value service, a
cache) can still be updated exactly once per transaction id if every value is
stored together with the id of the transaction that last changed it:

* ``TxidValue(value, txid)`` (Trident's *transactional* state): an update with
  txid *t* is skipped when the stored txid is already *t*: it is a replay of an
  update that was applied. Correct when a replayed *t* carries exactly the same
  updates as the first attempt.
* ``OpaqueValue(curr, prev, txid)`` (Trident's *opaque* state): the value before
  transaction *t* is kept as ``prev``; an update with the stored txid *t* is
  recomputed from ``prev``, so a replay of *t* whose contents changed replaces
  the first attempt's effect instead of adding to it.

Both require txids to be applied in increasing order per key (an update with a
txid below the stored one raises ``TxidOrderError``: it means two writers or a
coordinator that went backwards).

In Bittern the txid is the checkpoint id. The natural use is inside a
``TransactionalSink``: stage updates per checkpoint, make them durable in
``_pre_commit``, and apply them to the store in ``_commit`` with txid = n. A crash
in the middle of ``_commit`` is repaired by ``recover`` running ``_commit(n)``
again with the same durable updates; ``TxidValue`` skips the keys already done.
Applying updates eagerly (at write time, txid = the checkpoint being written)
needs ``OpaqueValue`` and a coordinator that reuses ids after a rollback.

The store is anything with ``get(key)`` (None when missing) and ``put(key, value)``,
or a ``dict``/``MutableMapping``. Records are stored as they are; wrap a store that
needs bytes or JSON in ``EncodedStore``. Example::

    store = {}
    TxidValue.apply(store, "clicks", 7, lambda v: (v or 0) + 3)   # applied: 3 @ 7
    TxidValue.apply(store, "clicks", 7, lambda v: (v or 0) + 3)   # replay: skipped
    OpaqueValue.apply(store, "views", 7, lambda v: (v or 0) + 2)  # 2 (prev None) @ 7
    OpaqueValue.apply(store, "views", 7, lambda v: (v or 0) + 5)  # replay changed: 5 @ 7
"""
from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any, NamedTuple

from ..errors import BitternError


class TxidOrderError(BitternError):
    """An update carried a txid below the one already stored for its key."""


class Applied(NamedTuple):
    """``apply``'s answer: the record now stored, and whether this call changed it."""

    record: Any
    applied: bool


def _get(store, key):
    return store.get(key)


def _put(store, key, value):
    put = getattr(store, "put", None)
    if put is not None:
        put(key, value)
    elif isinstance(store, MutableMapping):
        store[key] = value
    else:
        raise TypeError(f"store {store!r} has neither put(key, value) nor item assignment")


def _check_txid(txid):
    if isinstance(txid, bool) or not isinstance(txid, int):
        raise TypeError(f"txid must be an integer, got {txid!r}")


class TxidValue(NamedTuple):
    value: Any
    txid: int

    @classmethod
    def next(cls, stored, txid, update_fn):
        """The record after applying ``update_fn`` under ``txid`` to ``stored`` (None
        when the key is missing), and whether it changed. Pure."""
        _check_txid(txid)
        if stored is None:
            return Applied(cls(update_fn(None), txid), True)
        stored = cls(*stored)
        if stored.txid == txid:
            return Applied(stored, False)
        if stored.txid > txid:
            raise TxidOrderError(f"update with txid {txid} after txid {stored.txid} was stored")
        return Applied(cls(update_fn(stored.value), txid), True)

    @classmethod
    def apply(cls, store, key, txid, update_fn):
        """Apply ``update_fn(old_value_or_None)`` to ``store[key]`` once per txid."""
        result = cls.next(_get(store, key), txid, update_fn)
        if result.applied:
            _put(store, key, result.record)
        return result


class OpaqueValue(NamedTuple):
    curr: Any
    prev: Any
    txid: int

    @classmethod
    def next(cls, stored, txid, update_fn):
        """Like ``TxidValue.next``; a repeated txid is recomputed from ``prev``."""
        _check_txid(txid)
        if stored is None:
            return Applied(cls(update_fn(None), None, txid), True)
        stored = cls(*stored)
        if stored.txid == txid:
            record = cls(update_fn(stored.prev), stored.prev, txid)
        elif stored.txid > txid:
            raise TxidOrderError(f"update with txid {txid} after txid {stored.txid} was stored")
        else:
            record = cls(update_fn(stored.curr), stored.curr, txid)
        return Applied(record, record != stored)

    @classmethod
    def apply(cls, store, key, txid, update_fn):
        """Apply ``update_fn`` to ``store[key]``: on top of ``curr`` for a new txid, on
        top of ``prev`` for a repeated one."""
        result = cls.next(_get(store, key), txid, update_fn)
        if result.applied:
            _put(store, key, result.record)
        return result

    @property
    def value(self):
        return self.curr


class DictStore:
    """The example store: a dict behind ``get``/``put``, counting the puts."""

    def __init__(self, data=None):
        self.data = dict(data or {})
        self.puts = 0

    def get(self, key):
        return self.data.get(key)

    def put(self, key, value):
        self.puts += 1
        self.data[key] = value


class EncodedStore:
    """A store of encoded records over one of raw values (JSON text by default):
    records are written as ``encode(list(record))`` and read back as lists, which
    ``TxidValue``/``OpaqueValue`` accept."""

    def __init__(self, inner, encode=json.dumps, decode=json.loads):
        self.inner, self.encode, self.decode = inner, encode, decode

    def get(self, key):
        raw = _get(self.inner, key)
        return None if raw is None else self.decode(raw)

    def put(self, key, record):
        _put(self.inner, key, self.encode(list(record)))
