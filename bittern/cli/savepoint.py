"""``bittern savepoint NAME [--dir D]`` and the savepoint parts of ``kill --savepoint``
and ``submit/run --from-savepoint`` (the format is :mod:`bittern.savepoint`)."""
from __future__ import annotations

import os
import time

from .. import savepoint as sp
from ..api.topology import TopologyDef
from ..checkpoint import CheckpointStore, checkpoint_settings
from ..config import EFFECTIVELY_ONCE
from ..errors import BitternError
from ..wire import Op
from .common import liveness, tm_client

LOCAL_ONLY = ("savepoints are taken and restored in local mode in this version; in cluster mode, "
              "run `bittern savepoint` on a host that shares bittern.checkpoint.dir with the cluster")
WAIT_TRIES = 3  # checkpoint timeouts to wait for the savepoint's checkpoint


def add_parser(sub):
    p = sub.add_parser("savepoint", help="save a running exactly-once topology's state for an upgrade")
    p.add_argument("name")
    p.add_argument("--dir", default=None, metavar="D",
                   help="where to write it (default: $BITTERN_HOME/savepoints/NAME-<time>)")
    p.set_defaults(func=main, local_only=LOCAL_ONLY)


def add_restore_args(p):
    p.add_argument("--from-savepoint", default=None, metavar="D",
                   help="start from the state in savepoint D (exactly once)")
    p.add_argument("--allow-non-restored-state", action="store_true",
                   help="start even if the savepoint holds state of components the topology no longer has")


def main(args, state, home):
    path = take(state, home, args.name, args.dir, say=print)
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
    if conf.get("topology.reliability.mode") != EFFECTIVELY_ONCE:
        raise BitternError(f"topology {name!r} is {conf.get('topology.reliability.mode')}: only an "
                           f"EFFECTIVELY_ONCE topology keeps the checkpoints a savepoint is made of")
    tdef = TopologyDef.from_dict(rec["definition"])
    settings = checkpoint_settings(conf, home=rec.get("home") or home)
    store = CheckpointStore(settings.dir, state, name, settings.keep)
    target = os.path.abspath(target or os.path.join(home, "savepoints", f"{name}-{time.strftime('%Y%m%dT%H%M%S')}"))
    limit = WAIT_TRIES * float(conf["topology.stateful.checkpoint.timeout.secs"]) + \
        float(conf["topology.stateful.checkpoint.interval.seconds"])
    with tm_client(state, name) as tm:
        if quiesce:
            tm.request(Op.DEACTIVATE)
            say(f"{name} deactivated")
        ck = tm.request(Op.GET_METRICS).get("checkpoints") or {}
        mark = max(ck.get("in_flight") or 0, ck.get("last_complete") or 0)
        deadline = time.monotonic() + limit
        while True:
            ck = tm.request(Op.GET_METRICS).get("checkpoints") or {}
            cid = ck.get("last_complete") or 0
            if cid > mark and not ck.get("rolling_back"):
                try:
                    doc = sp.write(store, cid, target, tdef, settings.key_groups)
                    break
                except (OSError, sp.SavepointError) as e:  # pruned meanwhile: take the next one
                    if time.monotonic() >= deadline:
                        raise BitternError(f"savepoint of {name!r}: could not copy checkpoint {cid}: {e}") from None
                    mark = cid
            if time.monotonic() >= deadline:
                raise BitternError(f"savepoint of {name!r}: no checkpoint completed within {limit:g} s "
                                   f"(last complete {ck.get('last_complete')}, waiting for "
                                   f"{ck.get('waiting_for') or 'nothing'})")
            time.sleep(0.2)
    say(f"checkpoint {doc['checkpoint']} saved as a savepoint: "
        f"{sum(1 for c in doc['components'].values() if c['stateful'])} stateful components")
    return target


def prepare_restore(path, tdef, conf, allow_non_restored):
    """Check savepoint ``path`` against the topology about to start (before anything
    starts); returns its manifest."""
    path = os.path.abspath(path)
    if conf.get("topology.reliability.mode") != EFFECTIVELY_ONCE:
        raise sp.SavepointError(f"savepoint {path}: topology {tdef.name!r} is "
                                f"{conf.get('topology.reliability.mode')}; state is restored under "
                                f"EFFECTIVELY_ONCE only")
    doc = sp.read(path)
    sp.check_compatible(doc, path, tdef, conf["bittern.state.key.groups"], allow_non_restored)
    return doc


def restore_into(path, doc, state, home, name, conf, submitted_at):
    """Install the checked savepoint as the new submission's latest complete checkpoint."""
    settings = checkpoint_settings(conf, home=home)
    store = CheckpointStore(settings.dir, state, name, settings.keep)
    store.delete_all()
    cid = sp.install(os.path.abspath(path), doc, store, state)
    state.put(f"{store.meta}/epoch", {"epoch": 0, "submitted_at": submitted_at})
    return cid
