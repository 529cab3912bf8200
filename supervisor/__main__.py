"""``python -m supervisor --local NAME``: supervise a topology on this machine."""
import argparse
import sys

from bittern import logs
from bittern.state import LocalStateManager, default_home

from .local import LocalSupervisor


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m supervisor")
    ap.add_argument("--local", metavar="NAME", required=True, help="topology to run on this machine")
    ap.add_argument("--home", default=None)
    ap.add_argument("--detached", action="store_true",
                    help="outlive the process that started us (bittern submit)")
    a = ap.parse_args(argv)
    home = a.home or default_home()
    logs.setup(f"{a.local} supervisor")
    LocalSupervisor(LocalStateManager(home), a.local, home, detached=a.detached).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
