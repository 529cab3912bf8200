"""``bittern logs NAME [COMPONENT [TASK]]``: show a topology's process logs.

In cluster mode the files come from nimbus (``GET /api/v1/topologies/NAME/logs``
lists them, ``?file=F`` returns one, proxied from the supervisor that has it)."""
from __future__ import annotations

import os
import re
import signal
import sys
import time

from ..cluster_client import topology_path
from ..errors import BitternError
from ..logs import log_dir


def add_parser(sub):
    p = sub.add_parser("logs", help="show the logs of a topology's processes")
    p.add_argument("name")
    p.add_argument("component", nargs="?", help="a component, or tmaster / stmgr / supervisor / console")
    p.add_argument("task", nargs="?", type=int)
    p.add_argument("--component", dest="component_opt", metavar="C", help="same as the COMPONENT argument")
    p.add_argument("--task", dest="task_opt", type=int, metavar="T", help="same as the TASK argument")
    p.add_argument("-n", "--lines", "--tail", dest="lines", type=int, default=100,
                   help="last N lines of each log (0: all)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.set_defaults(func=main, remote=remote_main)


def wanted(args):
    """``(component, task)`` from the arguments or the options."""
    component = args.component_opt or args.component
    task = args.task_opt if args.task_opt is not None else args.task
    return component, task


def matches(filename, component, task):
    """Whether the log file ``filename`` (``COMPONENT[-TASK].log``) is one asked for."""
    stem = os.path.basename(filename)[:-4]
    m = re.match(r"^(.*)-(\d+)$", stem)
    comp, num = (m.group(1), int(m.group(2))) if m else (stem, None)
    return (not component or comp == component) and (task is None or num == task)


def select(ldir, component, task):
    try:
        files = sorted(f for f in os.listdir(ldir) if f.endswith(".log"))
    except FileNotFoundError:
        return None
    return [os.path.join(ldir, f) for f in files if matches(f, component, task)]


def no_match(name, component, task, available):
    what = (component or "task") + (f" task {task}" if task is not None else "")
    return BitternError(f"topology {name!r} has no log for {what} (logs: {', '.join(sorted(available))})")


def tail(path, n):
    """``(lines, end)``: the last ``n`` lines of ``path`` (all with ``n`` 0) and the byte
    offset they end at, read in one go, so that following from ``end`` misses nothing."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.decode(errors="replace").splitlines(keepends=True)
    return (lines[-n:] if n else lines), len(data)


def read_new(path, pos):
    """``(text, new position)``: what ``path`` gained since byte ``pos`` (from its start
    again if it shrank: truncated or replaced); a line still being written waits."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size < pos:
            pos = 0
        f.seek(pos)
        data = f.read()
    cut = data.rfind(b"\n") + 1
    return data[:cut].decode(errors="replace"), pos + cut


def stop_on_ctrl_c():
    """A follow ends on Ctrl-C (SIGINT) however it was started. A shell script that runs
    a command in the background hands it SIGINT ignored, and Python then leaves it
    ignored: a follow started that way (``nohup ... &``, a CI job) could be stopped
    only by SIGTERM. ``bittern run`` and ``serve`` install their own handlers likewise."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main(args, state, home):
    component, task = wanted(args)
    ldir = log_dir(home, args.name)
    files = select(ldir, component, task)
    if files is None:
        raise BitternError(f"no logs for topology {args.name!r} under {ldir}")
    if not files:
        raise no_match(args.name, component, task, os.listdir(ldir))
    pos = {}
    for path in files:
        if len(files) > 1:
            print(f"==> {os.path.basename(path)} <==")
        lines, pos[path] = tail(path, args.lines)
        sys.stdout.writelines(lines)
    if args.follow:
        sys.stdout.flush()
        stop_on_ctrl_c()
        try:
            while True:
                time.sleep(0.5)
                for p in files:
                    data, pos[p] = read_new(p, pos[p])
                    if data:
                        sys.stdout.write(data)
                        sys.stdout.flush()
        except KeyboardInterrupt:
            pass
    return 0


# -- cluster mode -------------------------------------------------------------------------
def listed_files(listing):
    """The file names in nimbus's log listing, ``{"topology": NAME, "containers": {"0":
    ["tmaster.log", ...]}}``; any nesting of lists and dicts is read, and an entry may
    be a name or ``{"file": name, ...}``."""
    if isinstance(listing, str):
        return [listing]
    if isinstance(listing, dict):
        if isinstance(listing.get("file"), str):
            return [listing["file"]]
        listing = [v for v in listing.values() if isinstance(v, (list, dict))]
    if isinstance(listing, list):
        return sorted({f for item in listing for f in listed_files(item)})
    return []


def remote_main(args, client):
    component, task = wanted(args)
    path = topology_path(args.name, "logs")
    available = listed_files(client.get(path, topology=args.name))
    if not available:
        raise BitternError(f"no logs for topology {args.name!r} on the cluster ({client.url})")
    files = [f for f in available if f.endswith(".log") and matches(f, component, task)]
    if not files:
        raise no_match(args.name, component, task, available)
    seen = {}
    for f in files:
        text = client.get(path, query={"file": f}, topology=args.name, text=True)
        seen[f] = len(text)
        if len(files) > 1:
            print(f"==> {f} <==")
        lines = text.splitlines(keepends=True)
        sys.stdout.writelines(lines[-args.lines:] if args.lines else lines)
    sys.stdout.flush()
    if args.follow:
        stop_on_ctrl_c()
        try:
            while True:
                time.sleep(1.0)
                for f in files:
                    text = client.get(path, query={"file": f}, topology=args.name, text=True)
                    # shorter than before: the file was started afresh (its process restarted)
                    new = text[seen[f]:] if len(text) >= seen[f] else text
                    seen[f] = len(text)
                    if new:
                        sys.stdout.write(new)
                        sys.stdout.flush()
        except KeyboardInterrupt:
            pass
    return 0
