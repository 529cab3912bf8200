"""``python -m streammgr --plan PLAN --container C``: run a container's stream manager."""
import argparse
import sys

from bittern import logs
from bittern.runplan import RunPlan

from .stmgr import StreamManager


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m streammgr")
    ap.add_argument("--plan", required=True)
    ap.add_argument("--container", type=int, required=True)
    a = ap.parse_args(argv)
    plan = RunPlan.load(a.plan)
    logs.setup(f"{plan.name} stmgr-{a.container}")
    StreamManager(plan, a.container).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
