"""Placing containers on supervisors' slots, and the assignment document (pure logic).

Nimbus decides where every container runs; supervisors only carry it out. A slot
is one container on one supervisor, and its ports follow from the slot number
(docs/CLUSTER.md), so an assignment is a complete physical plan: every endpoint
is known before any process starts, and a supervisor needs nothing but the
assignment to build the run plan of its containers.
"""
from __future__ import annotations

from bittern.errors import BitternError


class NoSlots(BitternError):
    """Not enough free slots on the live supervisors (the topology waits for some)."""


def slot_ports(base_port, slot):
    """``(stream manager port, topology master port)`` of a slot."""
    return base_port + 2 * slot, base_port + 2 * slot + 1


def used_slots(assignments, skip=None):
    """``{(supervisor id, slot)}`` held by the assignments (``{name: doc}``), except ``skip``'s."""
    used = set()
    for name, asg in assignments.items():
        if name == skip or not asg:
            continue
        for where in (asg.get("containers") or {}).values():
            used.add((where["supervisor"], where["slot"]))
    return used


def free_slots(supervisors, used):
    """``{supervisor id: [free slot numbers, ascending]}`` of the live supervisors."""
    out = {}
    for sid, sup in supervisors.items():
        out[sid] = [s for s in range(int(sup.get("slots", 0))) if (sid, s) not in used]
    return out


def place(containers, supervisors, used, keep=None):
    """Place ``containers`` (ids) on free slots: ``{container: {supervisor, host, slot}}``.

    ``keep`` holds placements that stay as they are (containers on live supervisors
    when only some moved). Each new container goes to the supervisor with the most
    free slots (ties: fewest containers of this topology already there, then id),
    which spreads a topology over the hosts. Raises :class:`NoSlots` naming how many
    were needed and how many are free.
    """
    keep = dict(keep or {})
    free = free_slots(supervisors, used | {(w["supervisor"], w["slot"]) for w in keep.values()})
    todo = [c for c in sorted(containers) if c not in keep]
    available = sum(len(v) for v in free.values())
    if len(todo) > available:
        live = ", ".join(sorted(supervisors)) or "none"
        raise NoSlots(f"{len(todo)} container(s) need a slot and {available} are free "
                      f"(live supervisors: {live})")
    out = dict(keep)
    for c in todo:
        mine = {}
        for w in out.values():
            mine[w["supervisor"]] = mine.get(w["supervisor"], 0) + 1
        sid = min((s for s in free if free[s]), key=lambda s: (-len(free[s]), mine.get(s, 0), s))
        slot = free[sid].pop(0)
        out[c] = {"supervisor": sid, "host": supervisors[sid]["host"], "slot": slot}
    return out


def endpoints(placement, supervisors):
    """``(tmaster endpoint, {container: {"tcp": endpoint}})`` of a placement."""
    stmgrs = {}
    tmaster = None
    for c, w in sorted(placement.items()):
        base = int(supervisors[w["supervisor"]]["base_port"])
        sport, tport = slot_ports(base, w["slot"])
        stmgrs[c] = {"tcp": f"tcp://{w['host']}:{sport}"}
        if c == 0:
            tmaster = f"tcp://{w['host']}:{tport}"
    return tmaster, stmgrs


def assignment(packing, placement, supervisors, version, keys=None, since=None):
    """The ``assignments/NAME`` document (docs/CLUSTER.md). Each container records
    ``since``, the version it was placed where it is (``since``: ``{container: version}``
    of the containers that stay; the others are placed at ``version``): the fencing token
    its processes carry (streammgr/fencing.py), so an older copy of a moved container is
    told apart from the newer one."""
    tmaster, stmgrs = endpoints(placement, supervisors)
    since = since or {}
    doc = {"version": version, "packing": packing.to_dict(),
           "containers": {str(c): dict(w, base_port=int(supervisors[w["supervisor"]]["base_port"]),
                                       since=int(since.get(c, version)))
                          for c, w in sorted(placement.items())},
           "tmaster": tmaster, "stmgrs": {str(c): e for c, e in stmgrs.items()}}
    if keys is not None:
        doc["keys"] = {str(c): k for c, k in keys.items()}
    return doc


def stranded(asg, live):
    """The containers of an assignment whose supervisor is not in ``live``."""
    return sorted(int(c) for c, w in (asg.get("containers") or {}).items() if w["supervisor"] not in live)


def kept_placement(asg, live):
    """The placements of an assignment on live supervisors, as ``{container: {...}}``."""
    return {int(c): {"supervisor": w["supervisor"], "host": w["host"], "slot": w["slot"]}
            for c, w in (asg.get("containers") or {}).items() if w["supervisor"] in live}


def container_keys(containers, placement, supervisors, old=None):
    """The CURVE keys of an assignment: ``{container: {"public", "sealed", "to"}}``. A
    container's secret never sits in ZooKeeper in the clear: it is sealed to the public
    key of the supervisor that runs it (bittern/curve.py ``seal``). A container that
    stays on the supervisor it had in ``old`` (the previous assignment's keys) keeps its
    keypair; one placed anew gets a fresh one, so the copy it left behind holds a key
    that nobody admits any more. Raises ValueError naming a supervisor without a key."""
    from bittern import curve
    old = {int(c): k for c, k in (old or {}).items()}
    keys = {}
    for c in containers:
        sup = placement[c]["supervisor"]
        prev = old.get(c) or {}
        if prev.get("to") == sup and prev.get("sealed") and prev.get("public"):
            keys[c] = prev
            continue
        recipient = (supervisors.get(sup) or {}).get("public_key")
        if not recipient:
            raise ValueError(f"supervisor {sup!r} published no public key (an older release?): "
                             f"container {c}'s key cannot be sealed to it")
        public, secret = curve.generate()
        keys[c] = {"public": public, "sealed": curve.seal(secret, recipient), "to": sup}
    return keys
