"""``bittern logs NAME [COMPONENT [TASK]]``: show a topology's process logs."""
from __future__ import annotations

import os
import re
import sys
import time

from ..errors import BitternError
from ..logs import log_dir


def add_parser(sub):
    p = sub.add_parser("logs", help="show the logs of a topology's processes")
    p.add_argument("name")
    p.add_argument("component", nargs="?", help="a component, or tmaster / stmgr / supervisor / console")
    p.add_argument("task", nargs="?", type=int)
    p.add_argument("-n", "--lines", type=int, default=100, help="last N lines of each log (0: all)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.set_defaults(func=main)


def select(ldir, component, task):
    try:
        files = sorted(f for f in os.listdir(ldir) if f.endswith(".log"))
    except FileNotFoundError:
        return None
    out = []
    for f in files:
        stem = f[:-4]
        m = re.match(r"^(.*)-(\d+)$", stem)
        comp, num = (m.group(1), int(m.group(2))) if m else (stem, None)
        if component and comp != component:
            continue
        if task is not None and num != task:
            continue
        out.append(os.path.join(ldir, f))
    return out


def tail(path, n):
    with open(path, errors="replace") as f:
        lines = f.readlines()
    return lines[-n:] if n else lines


def main(args, state, home):
    ldir = log_dir(home, args.name)
    files = select(ldir, args.component, args.task)
    if files is None:
        raise BitternError(f"no logs for topology {args.name!r} under {ldir}")
    if not files:
        what = args.component + (f" task {args.task}" if args.task is not None else "")
        raise BitternError(f"topology {args.name!r} has no log for {what} "
                           f"(logs: {', '.join(sorted(os.listdir(ldir)))})")
    for path in files:
        if len(files) > 1:
            print(f"==> {os.path.basename(path)} <==")
        sys.stdout.writelines(tail(path, args.lines))
    if args.follow:
        pos = {p: os.path.getsize(p) for p in files}
        try:
            while True:
                time.sleep(0.5)
                for p in files:
                    with open(p, errors="replace") as f:
                        f.seek(pos[p])
                        data = f.read()
                        pos[p] = f.tell()
                    if data:
                        sys.stdout.write(data)
                        sys.stdout.flush()
        except KeyboardInterrupt:
            pass
    return 0
