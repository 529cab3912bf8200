"""Reading a stream manager's run plan, and what of a new plan it can take live.

A stream manager reads its plan at start and again on SIGHUP (:class:`Hangup`),
when a supervisor rewrote it because other containers moved. :func:`plan_conflicts`
is the rule for what a running stream manager can take (new peer and topology
master endpoints, new peer keys) and what it cannot (another set of containers or
tasks, another packing, its own endpoints or keys): pure, so it is tested alone.
"""
from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field

from bittern.runplan import RunPlan


def plan_keys(plan):
    """The plan's CURVE keys as ``{container: {"public", "secret"}}``, or None (local mode)."""
    keys = getattr(plan, "keys", None)
    if not keys:
        return None
    return {int(c): k for c, k in keys.items()}


def load_plan(path):
    """The run plan at ``path``, with its CURVE keys even where RunPlan does not carry them."""
    plan = RunPlan.load(path)
    if getattr(plan, "keys", None) is None:
        with open(path) as f:
            keys = json.load(f).get("keys")
        if keys:
            plan.keys = {int(c): k for c, k in keys.items()}
    return plan


class Hangup:
    """SIGHUP as a flag. The handler only records the request; the main loop acts on it
    (SignalWaker's wakeup fd, which every signal writes to, wakes its poll)."""

    def __init__(self):
        self.pending = False

    def install(self):
        signal.signal(signal.SIGHUP, self._handle)

    def _handle(self, signum, frame):
        self.pending = True

    def take(self):
        pending, self.pending = self.pending, False
        return pending


HANGUP = Hangup()  # signal handlers are per process: so is this


def plan_conflicts(old, new, container):
    """What differs between two plans that a running stream manager of ``container``
    cannot take: a list of readable differences, empty if ``new`` can be applied live."""
    out = []
    if new.name != old.name:
        out.append(f"topology name {old.name!r} -> {new.name!r}")
    if set(new.stmgrs) != set(old.stmgrs) or set(new.packing.containers) != set(old.packing.containers):
        out.append(f"containers {sorted(set(old.stmgrs) | set(old.packing.containers))} -> "
                   f"{sorted(set(new.stmgrs) | set(new.packing.containers))}")
    otc, ntc = old.packing.task_container, new.packing.task_container
    if set(otc) != set(ntc):
        out.append(f"tasks {sorted(otc)} -> {sorted(ntc)}")
    moved = [f"{t}: {otc[t]}->{ntc[t]}" for t in sorted(set(otc) & set(ntc)) if otc[t] != ntc[t]]
    if moved:
        out.append("packing (task: container) " + ", ".join(moved[:10]) + (" ..." if len(moved) > 10 else ""))
    ocomp, ncomp = old.packing.task_component, new.packing.task_component
    recast = [t for t in sorted(set(ocomp) & set(ncomp))
              if (ocomp[t], old.packing.task_index.get(t)) != (ncomp[t], new.packing.task_index.get(t))]
    if recast:
        out.append(f"packing (component or index of tasks {recast[:10]})")
    mine_old, mine_new = old.stmgrs.get(container) or {}, new.stmgrs.get(container) or {}
    for ep in sorted(set(mine_old) | set(mine_new)):
        if mine_old.get(ep) != mine_new.get(ep):
            out.append(f"this container's own {ep} endpoint {mine_old.get(ep)} -> {mine_new.get(ep)}")
    okeys, nkeys = plan_keys(old), plan_keys(new)
    if (okeys is None) != (nkeys is None):
        out.append("CURVE " + ("off -> on" if okeys is None else "on -> off"))
    elif okeys is not None:
        if (okeys.get(container) or {}) != (nkeys.get(container) or {}):
            out.append("this container's own CURVE keys")
        missing = [c for c in new.stmgrs if c != container and not (nkeys.get(c) or {}).get("public")]
        if missing:
            out.append(f"no CURVE public key for container(s) {missing}")
    return out


@dataclass
class PlanChanges:
    """What a reload would do: refused if ``conflicts``; else the peers to reconnect,
    whether the topology master moved, the CURVE keys the tcp port admits from now on
    (None: unchanged) and the plan's keys."""
    conflicts: list = field(default_factory=list)
    moved: list = field(default_factory=list)
    tm_moved: bool = False
    allowed: set = None
    keys: dict = None


def plan_changes(old, new, container, peers, keys, allowed_now):
    """Compare the running plan ``old`` with ``new`` for the stream manager of
    ``container`` (its ``peers``, its current ``keys`` and admitted key set)."""
    out = PlanChanges()
    try:
        out.conflicts = plan_conflicts(old, new, container)
        if out.conflicts:
            return out
        out.keys = new_keys = plan_keys(new)
        out.moved = [c for c in peers
                     if new.stmgrs[c]["tcp"] != old.stmgrs[c]["tcp"]
                     or (new_keys is not None and new_keys[c]["public"] != keys[c]["public"])]
        for c in out.moved:
            if not str(new.stmgrs[c]["tcp"]).startswith("tcp://"):
                out.conflicts.append(f"container {c}'s tcp endpoint {new.stmgrs[c]['tcp']!r}")
        # (the topology master's CURVE server key is container 0's: a new key is a new server)
        out.tm_moved = new.tmaster != old.tmaster or (
            new_keys is not None and keys is not None and new_keys[0]["public"] != keys[0]["public"])
        if out.tm_moved and not str(new.tmaster).startswith("tcp://"):
            out.conflicts.append(f"the topology master endpoint {new.tmaster!r}")
        if allowed_now is not None:
            allowed = {k["public"] for c, k in new_keys.items() if c != container and k.get("public")}
            out.allowed = None if allowed == allowed_now else allowed
    except Exception as e:  # noqa: BLE001 - a malformed plan must not take the container down
        out.conflicts = [f"something it cannot read ({type(e).__name__}: {e})"]
    return out
