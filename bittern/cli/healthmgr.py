"""``bittern healthmgr NAME``: what the health manager of a topology decided and why.

The topology master puts its health manager's state and last decisions in the
metrics document (``healthmgr``), so this works wherever ``bittern metrics`` does:
locally and through nimbus (``--cluster``).
"""
from __future__ import annotations

import json

from ..monitor import LocalSource, RemoteSource
from ..errors import BitternError
from ..health_fmt import describe


def add_parser(sub):
    p = sub.add_parser("healthmgr", help="the health manager's decisions for a topology (symptoms, "
                                         "diagnosis, action, outcome)")
    p.add_argument("name")
    p.add_argument("-n", "--limit", type=int, default=20, help="the last N decisions (default 20)")
    p.add_argument("--json", action="store_true", help="the health manager's state and decisions as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="each decision's symptoms and evidence")
    p.set_defaults(func=main, remote=remote_main)


def main(args, state, home):
    return show(args, LocalSource(state))


def remote_main(args, client):
    return show(args, RemoteSource(client))


def show(args, src):
    try:
        doc = src.metrics(args.name, "interval")
    finally:
        src.close()
    hm = doc.get("healthmgr")
    if hm is None:
        if args.json:
            print(json.dumps({"enabled": False, "decisions": []}))
            return 0
        print(f"topology {args.name}: the health manager is off (topology.healthmgr.enabled = false)")
        return 0
    decisions = (hm.get("decisions") or [])[-max(1, args.limit):]
    if args.json:
        print(json.dumps({**hm, "decisions": decisions}, indent=1, sort_keys=True))
        return 0
    print(format_status(args.name, hm))
    if not decisions:
        print("no decisions yet")
    for d in decisions:
        print(describe(d))
        if args.verbose:
            for s in d.get("symptoms") or ():
                print(f"    symptom {s.get('kind')} {s.get('component') or ''}"
                      f"{'' if s.get('task') is None else ' task %s' % s['task']}: "
                      f"{json.dumps(s.get('evidence'), sort_keys=True)}")
            comp = (d.get("evidence") or {}).get("component")
            if comp:
                print(f"    evidence {json.dumps(comp, sort_keys=True)}")
            if d.get("outcome_evidence"):
                print(f"    outcome {json.dumps(d['outcome_evidence'], sort_keys=True)}")
    return 0


def format_status(name, hm):
    if not isinstance(hm, dict):
        raise BitternError("the health manager's state is not readable")
    parts = [f"topology {name}: health manager on, a round every {hm.get('interval_secs', 0):g}s"]
    if hm.get("in_flight") is not None:
        parts.append(f"decision #{hm['in_flight']} being carried out")
    elif hm.get("pending"):
        parts.append(f"decision #{hm['pending'].get('id')} waiting to be judged")
    bl = hm.get("blacklist") or []
    if bl:
        parts.append("blacklisted: " + ", ".join(f"{b['diagnosis']} {b['component']}" for b in bl))
    missing = hm.get("missing") or {}
    if missing:
        parts.append("not measured: " + ", ".join(sorted(missing)))
    return "; ".join(parts)
