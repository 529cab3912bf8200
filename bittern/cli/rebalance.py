"""``bittern rebalance NAME --parallelism COMP=N [COMP=N ...] [--containers K]``:
change the parallelism of a running topology (bittern/rebalance.py says how)."""
from __future__ import annotations

from ..cluster_client import topology_path
from ..rebalance import RebalanceError, parse_parallelism, rebalance
from .common import check_name, require_running

REBALANCE_SLACK_SECS = 60.0  # on top of two start-ups: quiesce, checkpoint, rollback


def add_parser(sub):
    p = sub.add_parser("rebalance", help="change the parallelism of a running topology's components")
    p.add_argument("name")
    p.add_argument("--parallelism", "-p", nargs="+", default=[], metavar="COMP=N",
                   help="the new number of tasks of COMP (components not named keep theirs)")
    p.add_argument("--containers", type=int, default=None, metavar="K",
                   help="the new number of containers (stream managers)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the outcome")
    p.set_defaults(func=main, remote=remote_main)


def _say(args):
    return (lambda line: None) if args.quiet else (lambda line: print(line, flush=True))


def _done(doc):
    par = ", ".join(f"{c}={n}" for c, n in sorted((doc.get("parallelism") or {}).items()))
    print(f"topology {doc['name']} rebalanced: {doc['tasks']} tasks in {doc['containers']} container(s) "
          f"({par}) in {doc.get('took_secs', 0):.1f}s")
    return 0


def main(args, state, home):
    check_name(args.name)
    par = parse_parallelism(args.parallelism)
    require_running(state, args.name)  # a dead supervisor is named as such, not timed out on
    return _done(rebalance(state, args.name, par, args.containers, say=_say(args)))


def remote_main(args, client):
    par = parse_parallelism(args.parallelism)
    if not par and args.containers is None:
        raise RebalanceError("nothing to change: give --parallelism COMPONENT=N and/or --containers K")
    doc = client.post(topology_path(args.name, "rebalance"), {"parallelism": par, "containers": args.containers},
                      topology=args.name, timeout=max(client.timeout, 2 * 60.0 + REBALANCE_SLACK_SECS))
    return _done(doc)
