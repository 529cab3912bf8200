"""Timers per key, on event time or processing time (MillWheel's timers, Flink's timer
service), as a pure structure: the caller says what time it is.

A timer is ``(kind, key, ts, tag)``: ``kind`` "event" (fires once the input watermark
reaches ``ts``: every tuple stamped before ``ts`` has arrived) or "processing" (fires
once the wall clock reaches ``ts``); ``tag`` None for a user's timer, or the window
operator's own marker. Setting a timer that is already set does nothing, so each fires
once. Due timers come out in timestamp order (ties: the order they were set).
Under EFFECTIVELY_ONCE the timers are keyed state: :meth:`by_key` gives them per key
for the checkpoint and :meth:`load` puts them back after a restore.
"""
from __future__ import annotations

import heapq
import itertools

EVENT = "event"
PROCESSING = "processing"
KINDS = (EVENT, PROCESSING)


class TimerQueue:
    def __init__(self):
        self._heaps = {EVENT: [], PROCESSING: []}
        # (kind, key, ts, tag) set and not yet fired or deleted -> the sequence number of its
        # heap entry (a timer deleted and set again leaves a stale entry in the heap)
        self._live = {}
        self._seq = itertools.count()

    def set(self, kind, key, ts, tag=None):
        """Set a timer; False if the same one is already set."""
        ident = (kind, key, ts, tag)
        if ident in self._live:
            return False
        seq = self._live[ident] = next(self._seq)
        heapq.heappush(self._heaps[kind], (ts, seq, key, tag))
        return True

    def delete(self, kind, key, ts, tag=None):
        """Forget a timer (no error if it is not set)."""
        self._live.pop((kind, key, ts, tag), None)

    def is_set(self, kind, key, ts, tag=None):
        return (kind, key, ts, tag) in self._live

    def pop_due(self, kind, now):
        """The next due timer of ``kind`` as ``(ts, key, tag)``, removed, or None."""
        heap, live = self._heaps[kind], self._live
        while heap and heap[0][0] <= now:
            ts, seq, key, tag = heapq.heappop(heap)
            ident = (kind, key, ts, tag)
            if live.get(ident) == seq:
                del live[ident]
                return ts, key, tag
        return None

    def next_due(self, kind):
        """The earliest live timer's time of ``kind``, or None."""
        heap, live = self._heaps[kind], self._live
        while heap:
            ts, seq, key, tag = heap[0]
            if live.get((kind, key, ts, tag)) == seq:
                return ts
            heapq.heappop(heap)
        return None

    def pending(self, key=None):
        """Live timers as sorted ``(kind, key, ts, tag)`` (of one key if given)."""
        items = [t for t in self._live if key is None or t[1] == key]
        return sorted(items, key=lambda t: (t[2], t[0], repr(t[1]), repr(t[3])))

    def __len__(self):
        return len(self._live)

    def by_key(self):
        """``{key: [[kind, ts, tag], ...]}`` in the order they were set."""
        out = {}
        for heap_kind, heap in self._heaps.items():
            for ts, seq, key, tag in sorted(heap, key=lambda e: e[1]):
                if self._live.get((heap_kind, key, ts, tag)) == seq:
                    out.setdefault(key, []).append([heap_kind, ts, tag])
        return out

    def load(self, key, entries):
        for kind, ts, tag in entries:
            self.set(kind, key, ts, tuple(tag) if isinstance(tag, list) else tag)

    def clear(self):
        for h in self._heaps.values():
            h.clear()
        self._live.clear()
