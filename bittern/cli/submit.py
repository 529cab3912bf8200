"""``bittern submit FILE``: start a topology detached and return once it runs.

In cluster mode the file is validated here exactly as in local mode, its code is
packed (:mod:`bittern.archive`) and sent to nimbus, which answers once the
topology runs on the cluster."""
from __future__ import annotations

import base64
import os
import sys
import time

from .. import archive
from ..cluster_client import API, topology_path
from ..compat.flux import add_flux_args, flux_options
from .launch import StartupError, launch, prepare
from .savepoint import add_restore_args

SUBMIT_SLACK_SECS = 30.0  # on top of bittern.startup.timeout.secs: scheduling, code transfer


def add_parser(sub):
    p = sub.add_parser("submit", help="start a topology in the background")
    p.add_argument("file", help="topology file (.py, or a Storm Flux .yaml)")
    p.add_argument("--name", help="topology name (default: the builder's name or the file name)")
    p.add_argument("--deactivated", action="store_true", help="start with the spouts deactivated")
    p.add_argument("--config", action="append", default=[], metavar="K=V", help="override a config key")
    p.add_argument("--wait", type=float, default=1.0, metavar="S",
                   help="after start-up, watch S seconds for failures of the first tuples")
    add_restore_args(p)
    add_flux_args(p)
    p.set_defaults(func=main, remote=remote_main)


def warn(message):
    print(message, file=sys.stderr)


def main(args, state, home):
    flux_options(args)
    tdef, conf, proc, status = launch(state, home, args.file, args.name, args.config,
                                      deactivated=args.deactivated, detached=True, grace=args.wait,
                                      warn=warn, savepoint=args.from_savepoint,
                                      allow_non_restored=args.allow_non_restored_state)
    ntasks = sum(c.par for c in tdef.components.values())
    print(f"topology {tdef.name} submitted: {ntasks} tasks in {conf['topology.stmgrs']} container(s), "
          f"{'PAUSED' if args.deactivated else 'RUNNING'} (supervisor pid {proc.pid})")
    return 0


def submit_body(tdef, conf, code, deactivated):
    """The JSON body of ``POST /api/v1/topologies`` (docs/CLUSTER.md)."""
    return {"name": tdef.name, "definition": tdef.to_dict(), "config": conf, "deactivated": bool(deactivated),
            "archive": base64.b64encode(code.data).decode("ascii"), "digest": code.digest, "entry": code.entry}


def remote_main(args, client):
    flux_options(args)
    tdef, conf = prepare(args.file, args.name, args.config, warn)
    code = archive.build(args.file)
    for path, why in code.skipped:
        warn(f"warning: {path} is left out of the code sent to the cluster ({why})")
    timeout = conf["bittern.startup.timeout.secs"] + SUBMIT_SLACK_SECS
    body = submit_body(tdef, conf, code, args.deactivated)
    if args.from_savepoint:  # nimbus reads, checks and installs it (a path on its host: nimbus/savepoints.py)
        body["savepoint"] = {"path": os.path.abspath(args.from_savepoint),
                             "allow_non_restored_state": bool(args.allow_non_restored_state)}
    rep = client.post(f"{API}/topologies", body, topology=tdef.name, timeout=timeout)
    restored = (rep or {}).get("restored") if isinstance(rep, dict) else None
    if restored:
        warn(f"starting from savepoint {restored['savepoint']} (checkpoint {restored['checkpoint']} of "
             f"{restored['topology']!r})")
    watch(client, tdef.name, args.wait)
    ntasks = sum(c.par for c in tdef.components.values())
    print(f"topology {tdef.name} submitted to {client.url}: {ntasks} tasks in {conf['topology.stmgrs']} "
          f"container(s), {'PAUSED' if args.deactivated else 'RUNNING'} "
          f"(code {code.digest[:12]}, {len(code.data)} bytes)")
    return 0


def watch(client, name, secs):
    """Watch a just-started topology for ``secs`` seconds; raise if it fails."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        doc = client.get(topology_path(name), topology=name)
        if doc.get("state") == "FAILED":
            err = doc.get("error")
            err = err if isinstance(err, dict) else {"error": err}
            raise StartupError({"error": err.get("error") or f"topology {name!r} failed right after start-up "
                                                               f"(see `bittern errors {name}`)",
                                "traceback": err.get("traceback")})

