"""The topology master's side of fencing (see streammgr/fencing.py for the rule).

Mixed into :class:`streammgr.tmaster.TopologyMaster`:

* every message of a stream manager is checked (:meth:`TmFencing.admit`): its identity
  must be a stream manager identity of the container the message names, at the version
  known for it (or newer: then known from now on); an older copy is answered
  ``FENCED`` and nothing it says is acted on. What the topology master sends to a
  container goes to the identity it registered with.
* in cluster mode, the assignment in ZooKeeper is the authority: it is read every
  :data:`CHECK_SECS` and before anything is written there (the status document, a
  checkpoint recorded complete), unless it was read less than :data:`CHECK_SECS` ago
  (``time.monotonic``, which keeps counting while a frozen host is stopped, so a copy
  that resumes reads it before its first write). If container 0 was placed anew since
  this copy was, this topology master is the old copy: it tells the stale stream
  managers that registered with it ``FENCED``, writes nothing more and exits with
  ``bittern.proc.EXIT_FENCED``. If another container was placed anew, its older copy
  is fenced at once. While the assignment cannot be read (ZooKeeper unreachable),
  writes wait: the status is written once a read succeeds.
"""
from __future__ import annotations

import logging

from bittern import wire
from bittern.runplan import placed_versions
from bittern.wire import Op

from .fencing import NEWER, OLDER, Fence

log = logging.getLogger("bittern.tmaster")

CHECK_SECS = 2.0


class TmFencing:
    def _init_fencing(self):
        plan = self.plan
        self.fence = Fence(plan.placed, plan.packing.containers)
        self.placed = plan.placed_at(0)
        self.fenced_by = None  # the assignment version that fenced this copy
        self._fence_zk = plan.placed is not None and bool(plan.state_url)
        self._fence_valid_until = float("-inf")
        self._status_dirty = False

    # -- stream managers -----------------------------------------------------------------
    def stmgr_ident(self, c):
        reg = self.stmgrs.get(c)
        return reg["identity"] if reg and reg.get("identity") else wire.stmgr_identity(c, self.fence.version(c) or 0)

    def admit(self, identity, msg):
        """True if a message from ``identity`` may be acted on (see the module docstring)."""
        parsed = wire.parse_stmgr_identity(identity)
        c = msg.get("container")
        if parsed is None or parsed[0] != b"s" or parsed[1] != c:
            log.warning("message from %r claiming container %.20r dropped: not that container's stream "
                        "manager identity", identity[:24], c)
            return False
        verdict = self.fence.check(c, parsed[2])
        if verdict == OLDER:
            self._send(identity, Op.FENCED, container=c, placed=parsed[2], newer=self.fence.version(c))
            if msg.get("op") == Op.STMGR_REGISTER:
                log.warning("stream manager of container %s at version %s refused: container %s runs at "
                            "version %s; told it is fenced", c, parsed[2], c, self.fence.version(c))
            return False
        if verdict == NEWER:
            log.info("container %s is at version %s now", c, parsed[2])
            old = self.stmgrs.pop(c, None)
            if old and old.get("identity") and old["identity"] != identity:
                self._send(old["identity"], Op.FENCED, container=c, newer=parsed[2])
        elif verdict != "accept":
            return False
        return True

    # -- the assignment (cluster mode) ------------------------------------------------------
    def fence_ok(self, now, force=False):
        """True if this copy may write to ZooKeeper now: the assignment, read within
        :data:`CHECK_SECS` (or now, with ``force``), does not place container 0 anew.
        False while it cannot be read, and for good once fenced."""
        if self.fenced_by is not None:
            return False
        if not self._fence_zk or (not force and now < self._fence_valid_until):
            return True
        if not getattr(self.state, "connected", True):
            return False
        try:
            asg = self.state.assignment(self.name)
        except Exception as e:  # noqa: BLE001 - ZooKeeper went away: writes wait for the next read
            log.warning("cannot read the assignment of %s to check this copy is current: %s", self.name, e)
            return False
        if asg is None:  # killed (its processes are being stopped): nothing to fence against
            self._fence_valid_until = now + CHECK_SECS
            return True
        placed = placed_versions(asg)
        self.admit_container_keys(asg.get("keys"))  # a container placed anew has a new key (tmauth.py)
        newer = self.fence.superseded(placed)
        if placed.get(0, 0) > self.placed:
            self._fenced(placed)
            return False
        for c in newer:
            self.fence.update({c: placed[c]})
            old = self.stmgrs.get(c)
            if old is not None and wire.parse_stmgr_identity(old.get("identity") or b"s0")[2] < placed[c]:
                self._send(old["identity"], Op.FENCED, container=c, newer=placed[c])
                del self.stmgrs[c]
            log.info("container %s was placed anew at version %s: its older copy is fenced", c, placed[c])
        self._fence_valid_until = now + CHECK_SECS
        return True

    def _fenced(self, placed):
        self.fenced_by = placed.get(0)
        log.error("topology master of %s fenced: container 0 was placed anew at assignment version %s (this "
                  "copy: %s); telling the old stream managers and exiting", self.name, placed.get(0),
                  self.placed)
        for c, reg in self.stmgrs.items():
            ident = reg.get("identity")
            parsed = wire.parse_stmgr_identity(ident) if ident else None
            if parsed is not None and parsed[2] < placed.get(c, 0):
                self._send(ident, Op.FENCED, container=c, placed=parsed[2], newer=placed.get(c))
        self.stopping = True

    def flush_status(self, now):
        """Check the assignment if due; write the status document if it changed and this
        copy is current."""
        if self.fence_ok(now) and self._status_dirty:
            self._status_dirty = False
            self._put_status()
