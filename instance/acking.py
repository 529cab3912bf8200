"""Storm's acker algorithm as pure state machines (no I/O, no clocks of their own).

Every edge of a tuple tree gets a random 64-bit id. A root's value is the XOR of
the edge ids it has seen: the spout XORs in the edges it emits, each bolt's ack
XORs out the edge it consumed and in the edges it emitted anchored to it. Every
id appears exactly twice, so the value is zero exactly when the tree is done.

One difference from Storm, for speed: an edge belongs to a *run*, the tuples a task
emits under one root toward one destination task, one after another in one batch
(a sentence's words). The run's edge is created once, by the ack of the input that
started the run, and consumed once, by the ack of the run's last tuple at the
receiver (``BoltInstance.ack`` counts them down). Each tuple of a run is covered
until it is acked: before the run's edge is created, by the edge of the input that
creates it; after, by the run's edge. So the tree completes exactly when Storm's
would, with one edge id drawn, sent and folded per run instead of per tuple. A
failed tuple's run never completes (its tree is failed already).

And an ack may travel inside a run: a bolt whose input is a run of its own (a spout's
tuple) XORs that input's whole ack (the input's edge and its children's edges) into
the edge of a run it emitted under the same root, while that run's batch is unsent,
and sends no ack message. The receiver's ack of the run delivers it. This only delays
the input's ack, and its edge stays outstanding until the run is acked, so the run's
tuples stay covered: the tree still completes exactly when every tuple is acked, with
one ack entry per tree reaching the spout in word count instead of two. (Folding only
the children's edges would not be safe: the run's edge would cancel out.)

Where the tracker lives: each spout task tracks its own roots (a root id carries
its spout task in its top 16 bits, so acks are routed to it like data, by task,
and the stream manager forwards them without decoding). Sharding by root is then
sharding by spout task, the spout learns of completion without another hop, and
the stream manager stays a byte mover; the cost is XOR work in the spout process,
which the bolt side keeps small by folding all acks of one root in a batch into
one entry (:class:`AckBuffer`). Heron keeps this table in its C++ stream manager;
in Python, a stream manager that decodes every ack would be the bottleneck of the
whole container.
"""
from __future__ import annotations

import random
from itertools import chain

ROOT_TASK_SHIFT = 48
_RAND48 = (1 << ROOT_TASK_SHIFT) - 1
_getrandbits = random.getrandbits


def new_edge():
    """A random non-zero 64-bit edge id: 63 random bits and the low bit set (cheaper
    than testing for zero, and the hot paths inline the same expression)."""
    return _getrandbits(64) | 1


def new_root(task):
    """A root id that names the spout task that tracks it."""
    return (task << ROOT_TASK_SHIFT) | (_getrandbits(48) or 1)


def root_task(root):
    return root >> ROOT_TASK_SHIFT


ACKED, FAILED = "acked", "failed"


class RootTracker:
    """The spout side: one entry per root in flight, in insertion order (oldest first).

    Entries are ``[xor, tup_id, stream, started, registered]``. An ack may arrive
    before the spout registered the root (it cannot here, but the algorithm allows
    it): the value is kept and completed by the registration.
    """

    def __init__(self):
        self.entries = {}
        self.inflight = 0  # registered trees not yet acked, failed or expired

    def __len__(self):
        return self.inflight

    def register(self, root, xor, tup_id, stream, now):
        """The spout emitted a tuple tree rooted at ``root`` whose edges XOR to ``xor``.
        Returns ``(ACKED, tup_id, stream, started)`` if the tree is already complete."""
        e = self.entries.get(root)
        if e is None:
            if xor == 0:
                return ACKED, tup_id, stream, now
            self.entries[root] = [xor, tup_id, stream, now, True]
            self.inflight += 1
            return None
        e[0] ^= xor
        e[1], e[2], e[3], e[4] = tup_id, stream, now, True
        self.inflight += 1
        return self._settle(root, e)

    def ack(self, root, value, now):
        """Fold an ack value in; returns the outcome if the tree completed."""
        e = self.entries.get(root)
        if e is None:
            self.entries[root] = [value, None, None, now, False]
            return None
        e[0] ^= value
        return self._settle(root, e)

    def ack_many(self, flat, now, out):
        """Fold a batch of acks (``[root, xor, root, xor, ...]``) in; the outcomes of the
        trees that completed are appended to ``out``. (``ack`` in a loop, inlined: this
        runs once per tree per acking bolt.)"""
        entries = self.entries
        done = 0
        for i in range(0, len(flat), 2):
            root = flat[i]
            e = entries.get(root)
            if e is None:
                entries[root] = [flat[i + 1], None, None, now, False]
                continue
            x = e[0] ^ flat[i + 1]
            if x == 0 and e[4]:
                del entries[root]
                done += 1
                out.append((ACKED, e[1], e[2], e[3]))
            else:
                e[0] = x
        self.inflight -= done

    def fail(self, root):
        """A bolt failed a tuple of this tree: the spout's ``fail`` is due, once."""
        e = self.entries.pop(root, None)
        if e is None or not e[4]:
            return None
        self.inflight -= 1
        return FAILED, e[1], e[2], e[3]

    def _settle(self, root, e):
        if e[0] == 0 and e[4]:
            del self.entries[root]
            self.inflight -= 1
            return ACKED, e[1], e[2], e[3]
        return None

    def expire(self, cutoff):
        """Remove the trees started before ``cutoff``; returns the registered ones
        as ``(FAILED, tup_id, stream, started)`` (their spout ``fail`` is due)."""
        out = []
        entries = self.entries
        while entries:
            root = next(iter(entries))
            e = entries[root]
            if e[3] >= cutoff:
                break
            del entries[root]
            if e[4]:
                self.inflight -= 1
                out.append((FAILED, e[1], e[2], e[3]))
        return out


    def drop_unregistered(self, cutoff):
        """Forget acks for roots never registered here since before ``cutoff``: late acks
        of trees that already failed. (``expire`` does this too; this is for spouts that
        run without message timeouts.)"""
        stale = [r for r, e in self.entries.items() if not e[4] and e[3] < cutoff]
        for r in stale:
            del self.entries[r]
        return len(stale)


class AckBuffer:
    """The bolt side: acks and fails waiting to go to their spout tasks. Acks of one
    root are folded together, so a batch carries one entry per root. ``acks`` is one
    ``{root: xor}`` for every spout task (the bolt's loops fold straight into it); it is
    split by spout task when drained."""

    def __init__(self):
        self.acks = {}  # root -> xor
        self.fails = {}  # spout task -> set(root)
        self.count = 0

    def ack(self, root, value):
        acks = self.acks
        acks[root] = acks.get(root, 0) ^ value
        self.count += 1

    def fold(self, values, n):
        """Fold ``{root: xor}`` (the acks of ``n`` tuples, already folded per root) in."""
        acks = self.acks
        get = acks.get
        for root, value in values.items():
            acks[root] = get(root, 0) ^ value
        self.count += n

    def fail(self, root):
        task = root >> ROOT_TASK_SHIFT
        self.fails.setdefault(task, set()).add(root)
        self.count += 1

    def __bool__(self):
        return self.count > 0

    def drain(self):
        """``{spout task: [acks as flat [root, xor, ...], fails as [root, ...]]}`` and reset."""
        acks = self.acks
        out = {}
        if acks:
            tasks = {root >> ROOT_TASK_SHIFT for root in acks}
            if len(tasks) == 1:  # the common case: one spout task
                out[tasks.pop()] = [list(chain.from_iterable(acks.items())), []]
            else:
                for root, value in acks.items():
                    e = out.get(root >> ROOT_TASK_SHIFT)
                    if e is None:
                        out[root >> ROOT_TASK_SHIFT] = e = [[], []]
                    e[0] += (root, value)
        for task, roots in self.fails.items():
            out.setdefault(task, [[], []])[1] = list(roots)
        self.acks, self.fails, self.count = {}, {}, 0
        return out
