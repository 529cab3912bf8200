"""The timer queue (bittern/time/timers.py): due timers in timestamp order (ties in the
order they were set), a timer set twice fires once, delete, event and processing
timers independent, and the per-key form a checkpoint keeps (by_key / load)."""
from __future__ import annotations

import random

import msgpack
import pytest

from bittern.time.timers import EVENT, PROCESSING, TimerQueue


def drain(q, kind, now):
    out = []
    while True:
        t = q.pop_due(kind, now)
        if t is None:
            return out
        out.append(t)


def test_due_in_timestamp_order_ties_in_set_order():
    q = TimerQueue()
    for key, ts in [("a", 5), ("b", 3), ("c", 5), ("d", 1), ("e", 3), ("f", 5)]:
        assert q.set(EVENT, key, ts) is True
    assert drain(q, EVENT, 4) == [(1, "d", None), (3, "b", None), (3, "e", None)]
    assert q.pop_due(EVENT, 4.999) is None
    assert drain(q, EVENT, 5) == [(5, "a", None), (5, "c", None), (5, "f", None)]
    assert len(q) == 0 and q.next_due(EVENT) is None


def test_due_is_inclusive_and_not_before():
    q = TimerQueue()
    q.set(EVENT, None, 10.0)
    assert q.pop_due(EVENT, 9.999) is None
    assert q.next_due(EVENT) == 10.0
    assert q.pop_due(EVENT, 10.0) == (10.0, None, None)


def test_set_twice_fires_once():
    q = TimerQueue()
    assert q.set(EVENT, "k", 7) is True
    assert q.set(EVENT, "k", 7) is False
    assert q.set(EVENT, "k", 7, tag=("w", 1)) is True  # another tag: another timer
    assert len(q) == 2 and q.is_set(EVENT, "k", 7) and q.is_set(EVENT, "k", 7, ("w", 1))
    assert drain(q, EVENT, 100) == [(7, "k", None), (7, "k", ("w", 1))]
    # fired: it can be set again, and fires again
    assert q.set(EVENT, "k", 7) is True
    assert drain(q, EVENT, 100) == [(7, "k", None)]


def test_delete():
    q = TimerQueue()
    q.set(EVENT, "a", 1)
    q.set(EVENT, "b", 2)
    q.set(EVENT, "c", 3)
    q.delete(EVENT, "b", 2)
    q.delete(EVENT, "zz", 9)  # not set: no error
    q.delete(PROCESSING, "a", 1)  # the other kind: not this one
    assert not q.is_set(EVENT, "b", 2) and len(q) == 2
    assert q.pending() == [(EVENT, "a", 1, None), (EVENT, "c", 3, None)]
    assert drain(q, EVENT, 10) == [(1, "a", None), (3, "c", None)]


def test_deleted_earliest_is_skipped_by_next_due():
    q = TimerQueue()
    q.set(PROCESSING, "a", 1)
    q.set(PROCESSING, "b", 4)
    q.delete(PROCESSING, "a", 1)
    assert q.next_due(PROCESSING) == 4
    assert q.pop_due(PROCESSING, 3) is None


def test_delete_then_set_again_fires_once_in_its_new_place():
    """A timer deleted and set again fires once, and ties come in the order of the last
    set (not the deleted entry's place)."""
    q = TimerQueue()
    q.set(EVENT, "a", 5)
    q.set(EVENT, "b", 5)
    q.delete(EVENT, "a", 5)
    q.set(EVENT, "a", 5)
    assert q.by_key() == {"a": [[EVENT, 5, None]], "b": [[EVENT, 5, None]]}  # once each
    assert drain(q, EVENT, 5) == [(5, "b", None), (5, "a", None)]
    assert len(q) == 0 and q.next_due(EVENT) is None


def test_event_and_processing_are_independent():
    q = TimerQueue()
    q.set(EVENT, "k", 5)
    q.set(PROCESSING, "k", 5)
    q.set(PROCESSING, "k", 2)
    assert q.next_due(EVENT) == 5 and q.next_due(PROCESSING) == 2
    assert drain(q, EVENT, 100) == [(5, "k", None)]
    assert q.is_set(PROCESSING, "k", 5) and len(q) == 2
    q.delete(EVENT, "k", 2)  # nothing: that one is a processing timer
    assert drain(q, PROCESSING, 100) == [(2, "k", None), (5, "k", None)]


def test_pending_sorted_and_by_key():
    q = TimerQueue()
    q.set(EVENT, "b", 3)
    q.set(PROCESSING, "a", 1)
    q.set(EVENT, "a", 2, tag=("w", 0))
    q.set(EVENT, ("t", 1), 2)
    assert q.pending() == [(PROCESSING, "a", 1, None), (EVENT, "a", 2, ("w", 0)), (EVENT, ("t", 1), 2, None),
                           (EVENT, "b", 3, None)]
    assert q.pending("a") == [(PROCESSING, "a", 1, None), (EVENT, "a", 2, ("w", 0))]
    assert q.pending("none") == []


def test_by_key_load_round_trip_through_msgpack():
    rnd = random.Random(7)
    q = TimerQueue()
    for _ in range(200):
        kind = rnd.choice([EVENT, PROCESSING])
        key = rnd.choice(["a", "b", ("c", 1), 5, None])
        ts = rnd.randint(0, 30) / 2
        tag = rnd.choice([None, ("w", rnd.randint(0, 3)), ("c", 1.5)])
        if rnd.random() < 0.2:
            q.delete(kind, key, ts, tag)
        else:
            q.set(kind, key, ts, tag)
    doc = q.by_key()
    # what a checkpoint does to it: msgpack (tuples come back as lists without the
    # state's extension type: load turns list tags back into tuples)
    wire = msgpack.unpackb(msgpack.packb([[k, v] for k, v in doc.items()]), strict_map_key=False)
    r = TimerQueue()
    for key, entries in wire:
        r.load(tuple(key) if isinstance(key, list) else key, entries)
    assert len(r) == len(q)
    assert r.pending() == q.pending()
    assert r.by_key() == doc
    for kind in (EVENT, PROCESSING):
        a, b = drain(q, kind, 100), drain(r, kind, 100)
        # the same timers; per key in the same order (order across keys of equal ts is
        # not kept by the per-key form)
        assert sorted(a, key=repr) == sorted(b, key=repr)
        for key in {t[1] for t in a}:
            assert [t for t in a if t[1] == key] == [t for t in b if t[1] == key]


def test_clear():
    q = TimerQueue()
    q.set(EVENT, "a", 1)
    q.set(PROCESSING, "a", 1)
    q.clear()
    assert len(q) == 0 and q.pop_due(EVENT, 10) is None and q.pop_due(PROCESSING, 10) is None


@pytest.mark.parametrize("seed", range(5))
def test_random_against_model(seed):
    """A model: a list of (kind, key, ts, tag, set order); due timers are the live ones
    with ts <= now, by (ts, order of their last set)."""
    rnd = random.Random(seed)
    q, live, order, fired = TimerQueue(), {}, 0, {EVENT: [], PROCESSING: []}
    now = {EVENT: 0.0, PROCESSING: 0.0}
    for _ in range(600):
        kind = rnd.choice([EVENT, PROCESSING])
        key = rnd.choice(["a", "b", "c"])
        ts = now[kind] + rnd.randint(0, 6)
        tag = rnd.choice([None, ("w", 1)])
        ident = (kind, key, ts, tag)
        r = rnd.random()
        if r < 0.5:
            added = q.set(*ident)
            assert added == (ident not in live)
            if added:
                live[ident] = order
                order += 1
        elif r < 0.7:
            q.delete(*ident)
            live.pop(ident, None)
        else:
            now[kind] += rnd.randint(0, 3)
            got = drain(q, kind, now[kind])
            due = sorted((t for t in live if t[0] == kind and t[2] <= now[kind]), key=lambda t: (t[2], live[t]))
            assert got == [(t[2], t[1], t[3]) for t in due]
            for t in due:
                del live[t]
            fired[kind] += got
        assert len(q) == len(live)
        nd = min((t[2] for t in live if t[0] == kind), default=None)
        assert q.next_due(kind) == nd
    assert sum(len(v) for v in q.by_key().values()) == len(live)
