"""``bittern list | activate | deactivate | kill | restart``."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys

from ..cluster_client import NoSuchTopology, topology_path
from .. import config as cfg, topostatus
from ..checkpoint import CheckpointStore, checkpoint_settings
from ..errors import BitternError
from ..proc import pid_alive, signal_pids, stop_pids
from ..wire import Op
from ..monitor import LocalSource, RemoteSource
from .common import fmt_duration, liveness, supervisor_pid, tm_client

# nimbus removes an exactly-once topology's checkpoints once its topology master stopped (up to
# 15 s: nimbus/store.py), before it answers a kill
KILL_STORE_SECS = 25.0
RESTART_LOCAL_ONLY = ("`bittern restart` works in local mode only: nimbus has no restart API (the supervisors "
                      "restart dead processes themselves; to restart a topology, kill and submit it again)")


def add_parsers(sub):
    p = sub.add_parser("list", help="list topologies")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=list_main, remote=list_remote)
    for verb, helptext in (("activate", "resume the spouts of a topology"),
                           ("deactivate", "pause the spouts of a topology (in-flight tuples drain)")):
        p = sub.add_parser(verb, help=helptext)
        p.add_argument("name")
        p.set_defaults(func=activation_main, remote=activation_remote, verb=verb)
    p = sub.add_parser("kill", help="stop every process of a topology and remove its state")
    p.add_argument("name")
    p.add_argument("--timeout", type=float, default=15.0, metavar="S",
                   help="how long to wait for a clean stop before killing")
    p.add_argument("--savepoint", default=None, metavar="D",
                   help="first deactivate it and save its state in savepoint D (exactly once)")
    p.set_defaults(func=kill_main, remote=kill_remote)
    p = sub.add_parser("restart", help="restart a topology's processes (the supervisor starts them again)")
    p.add_argument("name")
    p.add_argument("--container", type=int, default=None, metavar="K", help="only container K")
    p.set_defaults(func=restart_main, local_only=RESTART_LOCAL_ONLY)


def list_main(args, state, home):
    return print_list(args, topostatus.annotate_rows(LocalSource(state).topologies(), state))


def list_remote(args, client):
    return print_list(args, RemoteSource(client).topologies())


def print_list(args, rows):
    rows = [dict(r, uptime=fmt_duration(r["uptime_secs"])) for r in rows]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print("no topologies running")
        return 0
    cols = ["name", "state", "containers", "tasks", "uptime"]
    if any(topostatus.degraded(r.get("health")) and r.get("state") == topostatus.DEGRADED for r in rows):
        cols.append("reason")  # since when, and why (bittern/topostatus.py)
        rows = [dict(r, reason=topostatus.describe(r).partition(" ")[2] if r.get("state") == topostatus.DEGRADED
                     else "-") for r in rows]
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.upper().ljust(widths[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols))
    return 0


def activation_main(args, state, home):
    op = Op.ACTIVATE if args.verb == "activate" else Op.DEACTIVATE
    with tm_client(state, args.name) as client:
        rep = client.request(op)
    missing = rep.get("missing") or []
    print(f"topology {args.name} {'activated' if op == Op.ACTIVATE else 'deactivated'}"
          + (f" (tasks {missing} did not confirm)" if missing else ""))
    return 0


def activation_remote(args, client):
    client.post(topology_path(args.name, args.verb), topology=args.name)
    print(f"topology {args.name} {args.verb}d")
    return 0


def kill_main(args, state, home):
    name = args.name
    if getattr(args, "savepoint", None):
        from .savepoint import take
        path = take(state, home, name, args.savepoint, quiesce=True, say=print)
        print(f"savepoint of {name}: {path}")
    rec = state.topology(name)
    procs = (state.processes(name) or {}).get("procs", {})
    sup = supervisor_pid(state, name)
    if rec is None and not procs and not sup:
        print(f"topology {name} is not running (nothing to kill)")
        return 0
    if sup and pid_alive(sup):
        left = stop_pids([sup], args.timeout)
        if left:
            print(f"warning: supervisor pid {sup} did not stop in {args.timeout:g}s; killed it")
    leftover = stop_pids([p.get("pid") for p in procs.values()], timeout=2.0)
    if rec is not None:
        remove_checkpoints(state, home, name, rec.get("config") or {})
    state.remove_topology(name)
    shutil.rmtree(os.path.join(home, "run", name), ignore_errors=True)
    print(f"topology {name} killed" + (f" (force-killed {leftover})" if leftover else ""))
    return 0


def kill_remote(args, client):
    query = None
    if getattr(args, "savepoint", None):
        from .savepoint import take_remote
        path = take_remote(client, args.name, args.savepoint, quiesce=True, say=print)
        print(f"savepoint of {args.name}: {path}")
        # the next step is a restore under this name: nimbus answers once the old topology
        # master stops answering, so that it writes no checkpoint over the restored one
        query = {"wait": f"{args.timeout:g}"}
    # nimbus answers once the processes are stopped on every host: wait at least --timeout
    try:
        rep = client.request("DELETE", topology_path(args.name), query=query, topology=args.name,
                             timeout=max(client.timeout, args.timeout + 5, KILL_STORE_SECS))
    except NoSuchTopology:
        print(f"topology {args.name} is not running (nothing to kill)")
        return 0
    ckpts = rep.get("checkpoints") if isinstance(rep, dict) else None  # exactly once: nimbus removes them
    print(f"topology {args.name} killed" + (f"; its checkpoints in {ckpts.get('dir')} removed"
                                            if isinstance(ckpts, dict) and ckpts.get("removed") else ""))
    if isinstance(ckpts, dict) and not ckpts.get("removed"):
        print(f"warning: the checkpoints of {args.name} in {ckpts.get('dir')} were not removed: "
              f"{ckpts.get('error')}", file=sys.stderr)
    if isinstance(rep, dict) and rep.get("stopped") is False:
        print(f"warning: the topology master of {args.name} still answered {args.timeout:g}s after the kill; "
              f"nimbus refuses a restore under this name until it is gone", file=sys.stderr)
    return 0


def restart_main(args, state, home):
    rec, phase = liveness(state, args.name)
    if rec is None or phase == "DEAD":
        raise BitternError(f"no topology named {args.name!r} is running")
    procs = (state.processes(args.name) or {}).get("procs", {})
    pids = [p["pid"] for p in procs.values()
            if args.container is None or p.get("container") == args.container]
    if not pids:
        raise BitternError(f"topology {args.name!r} has no container {args.container}")
    signal_pids(pids, signal.SIGTERM)
    print(f"restarting {len(pids)} processes of {args.name}"
          + (f" in container {args.container}" if args.container is not None else ""))
    return 0


def remove_checkpoints(state, home, name, conf):
    """The checkpoint files of a killed topology (its metadata goes with the rest)."""
    try:
        settings = checkpoint_settings(cfg.merge(conf), home)
        CheckpointStore(settings.dir, state, name).delete_all()
    except BitternError as e:  # a bad checkpoint config must not stop a kill
        print(f"warning: checkpoints of {name} not removed: {e}")
