"""A running stream manager taking a rewritten plan on SIGHUP (see streammgr/stmgr.py).

What may change under a live container (peers' tcp endpoints and CURVE keys, the
topology master's endpoint, the keys the tcp port admits) is decided first by the pure
:func:`streammgr.planfile.plan_changes`; this mixin then closes and reconnects the
sockets that moved, keeping the instances, their pending tuples and the queues.
"""
from __future__ import annotations

import copy
import logging

import zmq

from bittern import curve

from .planfile import load_plan, plan_changes

log = logging.getLogger("bittern.stmgr")


class PlanReload:
    """Mixed into :class:`streammgr.stmgr.StreamManager`, whose sockets and state it uses."""

    def reload(self):
        """Re-read the plan file and apply what may change under a running container:
        peers' tcp endpoints and CURVE public keys, the topology master's endpoint, the
        keys the tcp port admits. Returns True if the topology master socket was
        replaced (the caller heartbeats at once). A plan that changes what this process
        is built on (containers, packing, its own endpoints or keys) is refused and
        logged, and the current plan stays in force."""
        if self.plan_path is None:
            log.error("SIGHUP: this stream manager was started without a plan path; nothing to reload")
            return False
        try:
            new = load_plan(self.plan_path)
        except Exception as e:  # noqa: BLE001 - a bad file must not take the container down
            log.error("SIGHUP: cannot read the plan %s (%s: %s); keeping the current plan",
                      self.plan_path, type(e).__name__, e)
            return False
        # Decide everything before touching a socket: a plan refused here changes nothing.
        ch = plan_changes(self.plan, new, self.container, self.table.peers, self.keys,
                          self.auth.allowed if self.auth is not None else None)
        conflicts, moved, tm_moved, allowed, new_keys = ch.conflicts, ch.moved, ch.tm_moved, ch.allowed, ch.keys
        if conflicts:
            log.error("SIGHUP: refused the plan %s: it changes %s, which a running stream manager "
                      "cannot take (the container must be restarted); keeping the current plan",
                      self.plan_path, "; ".join(conflicts))
            return False
        if new.topology.to_dict() != self.plan.topology.to_dict() or new.config != self.plan.config:
            log.warning("SIGHUP: the plan's topology definition or config changed; that takes a "
                        "restart, only endpoints and keys are applied now")
        if not moved and not tm_moved and allowed is None and not self.fence.superseded(new.placed):
            log.info("SIGHUP: plan %s reloaded, nothing to change", self.plan_path)
            return False
        if allowed is not None:
            # First, as it checks every key (each new peer key is in this set) and changes
            # nothing if one is bad. New handshakes only: a connection that is up stays up
            # (a key the plan dropped belongs to a peer that moved: its connection is gone).
            try:
                self.auth.allow(allowed)
            except curve.CurveError as e:
                log.error("SIGHUP: refused the plan %s: %s; keeping the current plan", self.plan_path, e)
                return False
            log.info("SIGHUP: the tcp port now admits the CURVE keys of containers %s",
                     sorted(c for c, k in new_keys.items() if c != self.container and k.get("public")))
        # Adopt the new endpoints and keys; the rest of the plan stays as this process was built.
        plan = copy.copy(self.plan)
        plan.stmgrs, plan.tmaster = new.stmgrs, new.tmaster
        if new_keys is not None:
            plan.keys = new_keys
        if hasattr(new, "hosts"):
            plan.hosts = new.hosts
        self.plan, self.keys = plan, new_keys
        for c in self.fence.update(new.placed):  # fencing: older copies of moved peers are refused now
            self.peer_ids.forget(c)
            log.info("SIGHUP: container %d is at assignment version %d now", c, self.fence.version(c))
        for c in moved:
            # Batches still in the old sockets' pipes (up to SNDHWM each) are lost with them;
            # those the stream manager queued itself (self.queues) stay queued under
            # ("p", c) and go to the new socket. At-least-once replays what was lost: the
            # spouts' tuples time out and are emitted again.
            for d in (self.peers, self.peer_ctrl):
                d.pop(c).close(linger=0)
            self._connect_peer(c)
            log.info("SIGHUP: peer container %d now at %s", c, plan.stmgrs[c]["tcp"])
        if moved and (self.bp.active or self._announced_off < 3):
            self.announce(self.bp.active)  # a new peer has not heard whether we are in backpressure
        if tm_moved:
            self.reconnect_tm(f"SIGHUP: topology master now at {plan.tmaster}")
        return tm_moved

    def reconnect_tm(self, why):
        """A new connection to the topology master, and registration on it."""
        if self._poller is not None:
            self._poller.unregister(self.tm)
        self.tm.close(linger=0)
        self._connect_tm()
        if self._poller is not None:
            self._poller.register(self.tm, zmq.POLLIN)
        log.info("%s; registering with it", why)
        self.register_with_tm()
