"""Which kind of file an instance writes for a checkpoint (incremental checkpoints,
EFFECTIVELY_ONCE): a pure decision, no I/O.

A *delta* (bittern/api/deltas.py) applies to a *parent*: this task's file of an
earlier checkpoint. The parent must be a checkpoint the instance **knows is
complete**, because only complete checkpoints are restore points and kept by the
store; it learns that from CKPT_COMMIT(c) (which every instance receives) and from
RESTORE(m) (m is complete). Checkpoints it saved since the parent and has not yet
heard complete keep their change logs, so the next delta holds the union of the
changes since the parent: whichever of them completes, or none, every delta is
valid on its own parent.

For checkpoint *n* the policy says (:meth:`IncrementalPolicy.plan`):

* ``delta``: write the delta on ``parent`` as it is;
* ``compact``: the chain would grow beyond ``max_deltas`` deltas: the writer thread
  merges the parent's chain with this delta into a new base (``parent`` None: the
  delta is on the empty state, e.g. the first checkpoint after a RESTORE to nothing,
  so it is a base as soon as it is applied to nothing);
* ``full``: a full snapshot of the live state, encoded on the loop (incremental off;
  no known-complete parent after a rescale or a failed write; or too many
  checkpoints unconfirmed, see below).

Why "too many unconfirmed" means full: the store keeps the newest ``keep`` complete
checkpoints and what their files reference. Every checkpoint newer than the parent
that could already be complete is one this task saved since (pending), and nothing
after *n* can complete before *n*'s file is written. So while fewer than ``keep``
are pending, the parent is among the newest ``keep`` complete ones until *n* lands
(and from then on *n* references it): a delta or a compaction never reads or names
a pruned file. With ``keep`` or more pending (checkpoints keep failing elsewhere),
the parent may be gone, and only a full snapshot is safe.
"""
from __future__ import annotations

from dataclasses import dataclass

from bittern.api.state import ChangeLog

DELTA, COMPACT, FULL = "delta", "compact", "full"


@dataclass
class Plan:
    checkpoint_id: int
    kind: str  # DELTA, COMPACT or FULL
    parent: int | None  # what the delta applies to (None: the empty state; FULL: None)
    log: ChangeLog | None  # the union of the change logs since the parent (not for FULL)
    depth: int  # deltas in the chain of the file written (0: a base)


class IncrementalPolicy:
    def __init__(self, max_deltas=8, keep=3, enabled=True):
        """``max_deltas``: deltas in a chain before the next checkpoint is compacted into
        a base (0, or ``enabled`` false: every checkpoint is a full snapshot); ``keep``:
        ``bittern.checkpoint.keep``."""
        self.max_deltas = int(max_deltas) if enabled else 0
        self.keep = max(1, int(keep))
        self.max_pending = self.keep + 8
        self.reset(None, 0, from_empty=True)

    @property
    def enabled(self):
        return self.max_deltas > 0

    def reset(self, parent, depth=0, from_empty=False):
        """RESTORE: the live state is checkpoint ``parent`` (this task's own file there,
        ``depth`` deltas deep), or, with ``parent`` None, the empty state
        (``from_empty``) or something no single file of this task holds (a rescale)."""
        self.parent = parent
        self.depth = depth if parent is not None else 0
        self.from_empty = parent is None and from_empty
        self.pending = {}  # checkpoint id -> (depth, change log), saved since the parent, oldest first

    def plan(self, checkpoint_id, log):
        """The plan for checkpoint ``checkpoint_id``, ``log`` the keyed change log detached
        for it. Records it as pending (its log is kept until a later checkpoint is
        known complete, whatever becomes of this one)."""
        kind, parent, depth = FULL, None, 0
        if self.enabled:
            if self.parent is None:
                if self.from_empty:
                    kind = COMPACT
            elif len(self.pending) < self.keep:
                parent = self.parent
                if self.depth + 1 > self.max_deltas:
                    kind = COMPACT
                else:
                    kind, depth = DELTA, self.depth + 1
        merged = None if kind == FULL else ChangeLog.union([lg for _, lg in self.pending.values()] + [log])
        self.pending[checkpoint_id] = (depth, log)
        if len(self.pending) > self.max_pending:
            # checkpoints keep failing: forget the oldest log (memory stays bounded); a
            # delta on the parent would miss it, so no parent until one completes
            del self.pending[next(iter(self.pending))]
            self.parent, self.depth, self.from_empty = None, 0, False
        return Plan(checkpoint_id, kind, parent, merged, depth)

    def complete(self, checkpoint_id):
        """CKPT_COMMIT: ``checkpoint_id`` is complete. If this task saved it since its
        parent, it becomes the parent. (A commit of anything else, e.g. from before a
        restore, is ignored.)"""
        entry = self.pending.get(checkpoint_id)
        if entry is None:
            return False
        self.parent, self.depth = checkpoint_id, entry[0]
        self.from_empty = False
        self.pending = {c: e for c, e in self.pending.items() if c > checkpoint_id}
        return True

    def failed(self, checkpoint_id):
        """The file of ``checkpoint_id`` could not be written (it will not complete). A
        chain with a lost link would fail every delta after it, so the next checkpoint
        is a full snapshot; until one completes, no parent. (A checkpoint planned before
        this was known may still complete: it is a valid file and becomes the parent.)"""
        if checkpoint_id in self.pending:
            self.parent, self.depth, self.from_empty = None, 0, False
