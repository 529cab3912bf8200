"""``bittern savepoint NAME [--dir D]`` and the savepoint parts of ``kill --savepoint``
and ``submit/run --from-savepoint`` (the format and the logic are :mod:`bittern.savepoint`).

In local mode the CLI takes and installs savepoints itself. In cluster mode it asks
the leader nimbus (``POST /api/v1/topologies/NAME/savepoint``; a submission's body
names the savepoint), which copies them from and to ``bittern.checkpoint.dir`` and
writes the checkpoint metadata in ZooKeeper (nimbus/savepoints.py): the directory
``D`` is then a path on the nimbus host, normally on the same shared storage."""
from __future__ import annotations

import os

from .. import config as cfg, savepoint as sp
from ..api.topology import TopologyDef
from ..checkpoint import CheckpointStore, checkpoint_settings
from ..cluster_client import topology_path
from ..errors import BitternError
from ..wire import Op
from .common import liveness, tm_client

SAVEPOINT_SLACK_SECS = 30.0  # on top of the checkpoint wait: deactivating, copying the files


def add_parser(sub):
    p = sub.add_parser("savepoint", help="save a running exactly-once topology's state for an upgrade")
    p.add_argument("name")
    p.add_argument("--dir", default=None, metavar="D",
                   help="where to write it (default: $BITTERN_HOME/savepoints/NAME-<time>; in cluster mode "
                        "<bittern.checkpoint.dir>/_savepoints/NAME-<time>, a path on the nimbus host)")
    p.set_defaults(func=main, remote=remote_main)


def add_restore_args(p):
    p.add_argument("--from-savepoint", default=None, metavar="D",
                   help="start from the state in savepoint D (exactly once; in cluster mode a path the "
                        "nimbus host reads)")
    p.add_argument("--allow-non-restored-state", action="store_true",
                   help="start even if the savepoint holds state of components the topology no longer has")


def main(args, state, home):
    path = take(state, home, args.name, args.dir, say=print)
    print(f"savepoint of {args.name}: {path}")
    return 0


def remote_main(args, client):
    path = take_remote(client, args.name, args.dir, say=print)
    print(f"savepoint of {args.name}: {path}")
    return 0


def take(state, home, name, target=None, quiesce=False, say=lambda line: None):
    """A savepoint of running topology ``name`` in ``target``: the first checkpoint
    that completes after this call (after the spouts are deactivated, with
    ``quiesce``, so that it holds everything the topology took in)."""
    rec, phase = liveness(state, name)
    if rec is None or phase == "DEAD":
        raise BitternError(f"no topology named {name!r} is running")
    conf = rec.get("config") or {}
    sp.require_exactly_once(name, conf)
    tdef = TopologyDef.from_dict(rec["definition"])
    settings = checkpoint_settings(conf, home=rec.get("home") or home)
    store = CheckpointStore(settings.dir, state, name, settings.keep)
    target = os.path.abspath(target or os.path.join(home, "savepoints", sp.default_name(name)))
    with tm_client(state, name) as tm:
        deactivate = (lambda: tm.request(Op.DEACTIVATE)) if quiesce else None
        sp.take(tm, store, tdef, conf, settings.key_groups, target, deactivate=deactivate, say=say)
    return target


def take_remote(client, name, target=None, quiesce=False, say=lambda line: None):
    """:func:`take` in cluster mode: the leader nimbus takes it (``target``: a path on
    its host; None for its default). Returns the savepoint's path."""
    doc = client.get(topology_path(name), topology=name)  # its config: how long to wait
    wait = sp.wait_limit(cfg.merge(doc.get("config") or {})) + SAVEPOINT_SLACK_SECS
    body = {"dir": os.path.abspath(target) if target else None, "deactivate": bool(quiesce)}
    rep = client.post(topology_path(name, "savepoint"), body, topology=name, timeout=max(client.timeout, wait))
    if quiesce:
        say(f"{name} deactivated")
    say(f"checkpoint {rep['checkpoint']} saved as a savepoint: {len(rep.get('stateful') or [])} stateful "
        f"components")
    return rep["path"]


def prepare_restore(path, tdef, conf, allow_non_restored):
    """Check savepoint ``path`` against the topology about to start (before anything
    starts); returns its manifest."""
    return sp.check_restore(os.path.abspath(path), tdef, conf, allow_non_restored)


def restore_into(path, doc, state, home, name, conf, submitted_at):
    """Install the checked savepoint as the new submission's latest complete checkpoint."""
    settings = checkpoint_settings(conf, home=home)
    store = CheckpointStore(settings.dir, state, name, settings.keep)
    return sp.install_fresh(path, doc, store, state, submitted_at)
