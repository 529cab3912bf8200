"""Fencing by assignment version: two copies of a container never both feed the topology.

In cluster mode nimbus moves the containers of a supervisor it lost (its ZooKeeper
session expired) to live ones, under a new assignment version. The old copies may
still be running: a host that froze (SIGSTOP, a VM paused, a long GC) and resumed, or
a supervisor that hung while its children kept going. Each container therefore
carries a fencing token, the assignment version it was *placed at* (``since`` in
``assignments/NAME``, ``RunPlan.placed``): a container that moves gets the new version,
one that stays keeps its own.

* Its stream manager's identities carry the token (``s<C>@<V>``, ``c<C>@<V>``:
  bittern/wire.py), so the newer copy of a moved container never collides with the
  older one on a peer's or the topology master's ROUTER; those ROUTERs set
  ``ROUTER_HANDOVER``, which then only ever hands an identity from a connection of a
  copy to a later connection of the *same* copy (a restarted process, a reconnect),
  whose version was already checked by construction.
* Every receiver checks the token of what it reads (:meth:`Fence.check`) against the
  version it knows for that container: its plan's, raised to the newest it has seen
  from an authenticated peer of that container (a stale copy never presents a newer
  version than the live one, so what is newer is the live one, and learning it early
  fences the old copy before this container's plan is rewritten).
* What comes from an older copy is dropped and counted; the topology master answers
  it ``FENCED``, and the copy's stream manager stops its instances and exits with
  ``bittern.proc.EXIT_FENCED`` (its supervisor does not restart it).
* The topology master of an old copy of container 0 learns it from ZooKeeper: it
  reads the assignment every few seconds and before recording a checkpoint complete
  (streammgr/tmaster.py), and a newer placement of container 0 fences it.

Pure: no sockets, no clock.
"""
from __future__ import annotations

from bittern.wire import parse_stmgr_identity

ACCEPT, OLDER, NEWER, UNKNOWN = "accept", "older", "newer", "unknown"


class Fence:
    """The version known for each container, and the verdict on a peer's token."""

    def __init__(self, placed, containers):
        """``placed``: ``RunPlan.placed`` (None in local mode: every token is 0);
        ``containers``: the plan's containers."""
        self.known = {int(c): int((placed or {}).get(c, 0)) for c in containers}

    def version(self, container):
        return self.known.get(container)

    def check(self, container, placed):
        """The verdict on a message from ``container`` with token ``placed``:
        ACCEPT (the version known), NEWER (newer than known: now known, and the
        version before it is fenced from now on), OLDER (a stale copy: drop it),
        UNKNOWN (not a container of this plan)."""
        have = self.known.get(container)
        if have is None:
            return UNKNOWN
        if placed == have:
            return ACCEPT
        if placed < have:
            return OLDER
        self.known[container] = placed
        return NEWER

    def update(self, placed):
        """A rewritten plan (SIGHUP): adopt its versions, never going back. Returns the
        containers whose version changed."""
        changed = []
        for c, v in (placed or {}).items():
            c, v = int(c), int(v)
            if c in self.known and v > self.known[c]:
                self.known[c] = v
                changed.append(c)
        return sorted(changed)

    def superseded(self, placed_now):
        """The containers whose version in ``placed_now`` (e.g. the assignment read from
        ZooKeeper) is newer than the one known here."""
        return sorted(int(c) for c, v in (placed_now or {}).items()
                      if int(c) in self.known and int(v) > self.known[int(c)])


class PeerIds:
    """Who may talk on a stream manager's tcp port: identity -> ``(container, is control)``
    for the identities of the plan's other containers at the version known, with the
    verdict of :class:`Fence` on the rest. The hot path is one dict lookup."""

    def __init__(self, fence, me):
        self.fence, self.me = fence, me
        self._ok = {}  # identity -> (container, is control): accepted

    def get(self, identity):
        """``(container, is control)`` for an accepted identity, else the verdict
        (OLDER or UNKNOWN)."""
        hit = self._ok.get(identity)
        if hit is not None:
            return hit
        parsed = parse_stmgr_identity(identity)
        if parsed is None or parsed[1] == self.me:
            return UNKNOWN
        kind, c, placed = parsed
        verdict = self.fence.check(c, placed)
        if verdict in (OLDER, UNKNOWN):
            return verdict
        if verdict == NEWER:
            self.forget(c)
        hit = self._ok[identity] = (c, kind == b"c")
        return hit

    def forget(self, container):
        """Drop the accepted identities of ``container`` (its version changed)."""
        for ident in [i for i, (c, _) in self._ok.items() if c == container]:
            del self._ok[ident]
