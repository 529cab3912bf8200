"""``python -m instance --plan PLAN --task T``: run one task (started by the supervisor)."""
import argparse
import os
import sys

from bittern import logs
from bittern.console import ConsoleWriter, console_path
from bittern.runplan import RunPlan

from .bolt import BoltInstance
from .spout import SpoutInstance


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m instance")
    ap.add_argument("--plan", required=True)
    ap.add_argument("--task", type=int, required=True)
    a = ap.parse_args(argv)
    plan = RunPlan.load(a.plan)
    comp = plan.packing.task_component[a.task]
    logs.setup(f"{plan.name} {comp}[{a.task}]")
    sys.stdout = ConsoleWriter(console_path(plan.home, plan.name), f"{comp}[{a.task}] ", sys.stdout)
    container = plan.packing.task_container[a.task]
    kind = plan.topology.components[comp].kind
    inst = (SpoutInstance if kind == "spout" else BoltInstance)(plan, a.task)
    inst.work_dir = os.path.dirname(os.path.abspath(a.plan))  # (local to the host: the disk backend's scratch)
    return inst.run(plan.stmgrs[container])


if __name__ == "__main__":
    sys.exit(main())
