"""``bittern submit FILE``: start a topology detached and return once it runs."""
from __future__ import annotations

import sys

from .launch import launch


def add_parser(sub):
    p = sub.add_parser("submit", help="start a topology in the background")
    p.add_argument("file", help="topology file (.py)")
    p.add_argument("--name", help="topology name (default: the builder's name or the file name)")
    p.add_argument("--deactivated", action="store_true", help="start with the spouts deactivated")
    p.add_argument("--config", action="append", default=[], metavar="K=V", help="override a config key")
    p.add_argument("--wait", type=float, default=1.0, metavar="S",
                   help="after start-up, watch S seconds for failures of the first tuples")
    p.set_defaults(func=main)


def main(args, state, home):
    tdef, conf, proc, status = launch(state, home, args.file, args.name, args.config,
                                      deactivated=args.deactivated, detached=True, grace=args.wait,
                                      warn=lambda m: print(m, file=sys.stderr))
    ntasks = sum(c.par for c in tdef.components.values())
    print(f"topology {tdef.name} submitted: {ntasks} tasks in {conf['topology.stmgrs']} container(s), "
          f"{'PAUSED' if args.deactivated else 'RUNNING'} (supervisor pid {proc.pid})")
    return 0
