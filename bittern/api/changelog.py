"""The change log of a keyed store (``state.keyed``): what was put and deleted since a
checkpoint last detached it, so that the checkpoint writes only that (a delta,
:mod:`bittern.api.deltas`). ``KeyedState.put`` / ``delete`` write into it directly
(bittern/api/state.py); a checkpoint detaches it (``KeyedState.detach_log``) and the
instance keeps the detached logs of checkpoints not yet known complete
(instance/incremental.py), joined with :meth:`ChangeLog.union`.
"""
from __future__ import annotations


class _Deleted:
    __slots__ = ()

    def __repr__(self):
        return "DELETED"


#: The value a change log holds for a key deleted since it was detached.
DELETED = _Deleted()


class ChangeLog:
    """What a keyed store's puts and deletes did since its log was last detached:
    ``groups`` is ``{group: {key: value put, or DELETED}}`` (the last thing done to each
    key wins: a delete after a put makes it deleted, a put after a delete changed);
    ``deleted_in`` the groups holding a DELETED (a group without one is encoded as it
    is, without a pass over its entries)."""

    __slots__ = ("groups", "deleted_in")

    def __init__(self, groups=None, deleted_in=None):
        self.groups = {} if groups is None else groups
        self.deleted_in = set() if deleted_in is None else deleted_in

    def __bool__(self):
        return bool(self.groups)

    def __len__(self):
        return sum(len(d) for d in self.groups.values())

    def __repr__(self):
        return f"<ChangeLog {len(self)} keys in {len(self.groups)} groups>"

    def changes(self):
        """``(changed, deleted)``: ``{group: set of keys}`` each."""
        changed, deleted = {}, {}
        for g, d in self.groups.items():
            if g in self.deleted_in:
                ch = {k for k, v in d.items() if v is not DELETED}
                de = {k for k, v in d.items() if v is DELETED}
            else:
                ch, de = set(d), set()
            if ch:
                changed[g] = ch
            if de:
                deleted[g] = de
        return changed, deleted

    @classmethod
    def union(cls, logs):
        """One log for several consecutive ones, oldest first (later entries win). The
        logs are not changed; a single log is returned as it is."""
        logs = [lg for lg in logs if lg]
        if not logs:
            return cls()
        if len(logs) == 1:
            return logs[0]
        out = cls()
        for lg in logs:
            for g, d in lg.groups.items():
                have = out.groups.get(g)
                if have is None:
                    out.groups[g] = dict(d)
                else:
                    have.update(d)
            out.deleted_in |= lg.deleted_in
        return out
