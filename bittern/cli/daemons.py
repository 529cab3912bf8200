"""``bittern nimbus ARGS...`` and ``bittern supervisor ARGS...``: the cluster daemons.

Each replaces this process with ``python -m nimbus ARGS...`` or ``python -m
supervisor --cluster ARGS...`` (same interpreter), passing the arguments through
unchanged, ``--help`` included. The CLI starts them by module name and never
imports them: a process package stands on ``bittern/``, not the other way round.
"""
from __future__ import annotations

import argparse
import os

from ..proc import module_cmd

DAEMONS = {
    "nimbus": (["nimbus"], "run a nimbus daemon (cluster master): bittern nimbus --help for its options"),
    "supervisor": (["supervisor", "--cluster"],
                   "run a cluster supervisor on this host: bittern supervisor --help for its options"),
}


def add_parsers(sub):
    for verb, (cmd, helptext) in DAEMONS.items():
        # no option of our own (not even -h): everything after the verb is the daemon's
        p = sub.add_parser(verb, help=helptext, add_help=False, prefix_chars="\0")
        p.add_argument("args", nargs=argparse.REMAINDER)
        p.set_defaults(daemon=cmd)


def command(args):
    """The daemon's command line."""
    return module_cmd(*args.daemon, *args.args)


def exec_daemon(args):
    cmd = command(args)
    os.execv(cmd[0], cmd)
