"""``python -m streammgr --plan PLAN --container C``: run a container's stream manager.

SIGTERM stops it; SIGHUP makes it re-read PLAN (same path) and apply new peer and
topology master endpoints (see StreamManager.reload).
"""
import argparse
import sys

from bittern import logs
from bittern.proc import EXIT_FENCED

from .planfile import HANGUP, load_plan
from .stmgr import StreamManager


def main(argv=None):
    # First: a SIGHUP from here on is only recorded, and a plan read after it is the
    # rewritten one anyway (the main loop's reload is then a no-op). One that comes
    # before this line, while the interpreter starts, kills the process: the
    # supervisor restarts it, on the rewritten plan.
    HANGUP.install()
    ap = argparse.ArgumentParser(prog="python -m streammgr")
    ap.add_argument("--plan", required=True)
    ap.add_argument("--container", type=int, required=True)
    a = ap.parse_args(argv)
    plan = load_plan(a.plan)
    logs.setup(f"{plan.name} stmgr-{a.container}")
    sm = StreamManager(plan, a.container, plan_path=a.plan)
    sm.run()
    return EXIT_FENCED if sm.fenced_by is not None else 0


if __name__ == "__main__":
    sys.exit(main())
