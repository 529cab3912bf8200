"""``bittern``: the command line entry point."""
from __future__ import annotations

import argparse
import sys

from .. import __version__
from ..errors import BitternError
from . import daemons, healthmgr, lifecycle, logs, metrics, rebalance, run, savepoint, serve, submit, top
from .cluster import cluster_urls, dispatch
from .common import state_manager
from .launch import print_error


def parser():
    ap = argparse.ArgumentParser(prog="bittern", description="Storm/Heron-style stream processing in Python")
    ap.add_argument("--version", action="version", version=f"bittern {__version__}")
    ap.add_argument("--home", help="state directory (default: $BITTERN_HOME or ~/.bittern)")
    ap.add_argument("--cluster", metavar="URL[,URL...]",
                    help="send the verb to nimbus at URL (several: the next is tried when one does not "
                         "answer) instead of the local state directory (default: $BITTERN_CLUSTER); the "
                         "token comes from $BITTERN_TOKEN or token_file in cluster.toml")
    sub = ap.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    run.add_parser(sub)
    submit.add_parser(sub)
    lifecycle.add_parsers(sub)
    rebalance.add_parser(sub)
    savepoint.add_parser(sub)
    logs.add_parser(sub)
    metrics.add_parsers(sub)
    top.add_parser(sub)
    healthmgr.add_parser(sub)
    serve.add_parser(sub)
    daemons.add_parsers(sub)
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        if getattr(args, "daemon", None):
            return daemons.exec_daemon(args)
        urls = cluster_urls(args)
        if urls:
            return dispatch(args, urls)
        state = state_manager(args)
        return args.func(args, state, state.home) or 0
    except BitternError as e:
        print_error(e)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
