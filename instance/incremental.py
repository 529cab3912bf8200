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

Rebase mode (``rebase=True``, the disk backend). A compaction writes checkpoint *n*'s
own file as a base, so *n* completes only once the base is written, and the
checkpoints after *n* wait behind it on the writer thread: with a disk-backed store
of millions of keys that scan outlasts the checkpoint timeout. In rebase mode a
chain that would grow beyond ``max_deltas`` is not compacted: *n* is written as a
plain delta on its parent (``depth`` beyond ``max_deltas`` for a while) and the plan
says ``rebase``: the caller writes a base of the same state in the background and
replaces *n*'s file with it (instance/ckptwriter.py), then calls :meth:`rebased`, after
which *n* (the parent already, or still pending) is the start of every chain through
it (later deltas on *n* have depth 1...). Every checkpoint whose chain is still too
long asks again (the caller keeps at most one rebase in flight). The cases with no
parent are as without rebase mode: ``compact`` with parent None (the first
checkpoint from the empty state) and ``full`` (a rescale, a failed write) write a
base as *n*'s own file. But "too many unconfirmed" (below) is a delta on the parent
too in rebase mode, not a full snapshot: there a full snapshot is a base on the
writer thread, and when checkpoints time out (a barrier slower than the timeout)
each one would be another scan of the database queued behind the last, holding its
view, so none could complete again even once the barriers are fast (seen at 10M
keys under load: the writer never idle, RSS climbing past 500 MB). The delta is safe
all the same: the store keeps every checkpoint that a kept or in-flight file names
as its parent, ``save`` refuses a delta whose parent's file is missing (a failed
write: the next checkpoint is a full snapshot) and ``mark_complete`` a chain with a
missing link, so a parent pruned after all costs a full snapshot, never a restore
point that cannot be read.

Why "too many unconfirmed" means full: the store keeps the newest ``keep`` complete
checkpoints and what their files reference. Every checkpoint newer than the parent
that could already be complete is one this task saved since (pending), and nothing
after *n* can complete before *n*'s file is written. So while fewer than ``keep``
are pending, the parent is among the newest ``keep`` complete ones until *n* lands
(and from then on *n* references it): a delta or a compaction never reads or names
a pruned file. With ``keep`` or more pending (checkpoints keep failing elsewhere),
the parent may be gone, so a full snapshot is written (not in rebase mode: above).
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
    rebase: bool = False  # rebase mode: a base of this checkpoint is to replace its delta, off the chain


class IncrementalPolicy:
    def __init__(self, max_deltas=8, keep=3, enabled=True, rebase=False):
        """``max_deltas``: deltas in a chain before the next checkpoint is compacted into
        a base (0, or ``enabled`` false: every checkpoint is a full snapshot); ``keep``:
        ``bittern.checkpoint.keep``; ``rebase``: rebase mode (see the module docstring)."""
        self.max_deltas = int(max_deltas) if enabled else 0
        self.keep = max(1, int(keep))
        self.max_pending = self.keep + 8
        self.rebase = bool(rebase)
        self.reset(None, 0, from_empty=True)

    @property
    def enabled(self):
        return self.max_deltas > 0

    @property
    def depth(self):
        """Deltas in the parent's chain (0: the parent is a base, or there is none)."""
        return max(0, len(self.links) - 1)

    def reset(self, parent, depth=0, from_empty=False):
        """RESTORE: the live state is checkpoint ``parent`` (this task's own file there,
        ``depth`` deltas deep), or, with ``parent`` None, the empty state
        (``from_empty``) or something no single file of this task holds (a rescale)."""
        self.parent = parent
        # the parent's chain, base first (None: a link whose id is not known here)
        self.links = () if parent is None else (None,) * max(0, depth) + (parent,)
        self.from_empty = parent is None and from_empty
        self.pending = {}  # checkpoint id -> (its chain's links, change log), saved since the parent, oldest first

    def plan(self, checkpoint_id, log):
        """The plan for checkpoint ``checkpoint_id``, ``log`` the keyed change log detached
        for it. Records it as pending (its log is kept until a later checkpoint is
        known complete, whatever becomes of this one)."""
        kind, parent, rebase = FULL, None, False
        if self.enabled:
            if self.parent is None:
                if self.from_empty:
                    kind = COMPACT
            elif len(self.pending) < self.keep or self.rebase:
                parent, kind = self.parent, DELTA
                if self.depth + 1 > self.max_deltas:
                    if self.rebase:
                        rebase = True  # a delta all the same: its base is written beside it
                    else:
                        kind = COMPACT
        links = self.links + (checkpoint_id,) if kind == DELTA else (checkpoint_id,)
        merged = None if kind == FULL else ChangeLog.union([lg for _, lg in self.pending.values()] + [log])
        self.pending[checkpoint_id] = (links, log)
        if len(self.pending) > self.max_pending:
            # checkpoints keep failing: forget the oldest log (memory stays bounded); a
            # delta on the parent would miss it, so no parent until one completes
            del self.pending[next(iter(self.pending))]
            self.parent, self.links, self.from_empty = None, (), False
        return Plan(checkpoint_id, kind, parent, merged, len(links) - 1, rebase)

    def complete(self, checkpoint_id):
        """CKPT_COMMIT: ``checkpoint_id`` is complete. If this task saved it since its
        parent, it becomes the parent. (A commit of anything else, e.g. from before a
        restore, is ignored.)"""
        entry = self.pending.get(checkpoint_id)
        if entry is None:
            return False
        self.parent, self.links = checkpoint_id, entry[0]
        self.from_empty = False
        self.pending = {c: e for c, e in self.pending.items() if c > checkpoint_id}
        return True

    def failed(self, checkpoint_id):
        """The file of ``checkpoint_id`` could not be written (it will not complete). A
        chain with a lost link would fail every delta after it, so the next checkpoint
        is a full snapshot; until one completes, no parent. (A checkpoint planned before
        this was known may still complete: it is a valid file and becomes the parent.)"""
        if checkpoint_id in self.pending:
            self.parent, self.links, self.from_empty = None, (), False

    def rebased(self, checkpoint_id):
        """Rebase mode: ``checkpoint_id``'s file was replaced by a base of the same state.
        Every chain through it now starts there: its depth is 0 (the parent's, or its
        own while pending) and a chain on it is as deep as the links after it. (A
        checkpoint in no chain here, e.g. one already left behind, changes nothing.)"""
        def cut(links):
            return links[links.index(checkpoint_id):] if checkpoint_id in links else links
        self.links = cut(self.links)
        self.pending = {c: (cut(links), lg) for c, (links, lg) in self.pending.items()}
