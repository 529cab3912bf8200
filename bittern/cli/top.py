"""``bittern top [NAME]``: the live terminal view of a topology (or, without a name,
of the running topologies).

The drawing is in :mod:`bittern.tui.render` (pure: a metrics document in, a rich
renderable out); :class:`Top` below holds what is shown and what keys do to it, and
:func:`run_live` is the thin loop around them: fetch every ``--interval`` seconds,
redraw, and react to keys at once. With stdout not a terminal it prints one frame.
"""
from __future__ import annotations

import errno
import os
import signal
import sys
import time

from rich.console import Group
from rich.text import Text

from .. import topostatus
from ..errors import BitternError
from ..metrics_fmt import WINDOWS, refused, refused_counts
from ..monitor import LocalSource, RemoteSource, TopologyGone
from ..tui.keys import KeyReader, NoKeys
from ..tui.render import FitTable, component_order, render, render_gone, render_list

BACK = ("esc", "b", "B", "left", "h", "backspace")
OPEN = ("enter", "right", "l")
UP = ("up", "k")
DOWN = ("down", "j")


def add_parser(sub):
    p = sub.add_parser("top", help="live view of a topology's metrics (without NAME: the topologies)")
    p.add_argument("name", nargs="?", help="the topology (default: list the running topologies)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="seconds between refreshes (default 1.0)")
    p.add_argument("--window", default="interval", choices=WINDOWS,
                   help="window for rates and latencies: 'interval' (default) is the latest metrics "
                        "report of each task (every topology.metrics.interval.secs), so the view is "
                        "live; the sparkline shows the last minutes")
    p.add_argument("--once", action="store_true",
                   help="print one frame and exit (what happens anyway when stdout is not a terminal)")
    p.set_defaults(func=main, remote=remote_main)


class Top:
    """What the live view shows and what the keys do to it; no terminal here."""

    def __init__(self, source, name=None, window="interval", interval=1.0, home=None,
                 clock=time.monotonic):
        self.src = source
        self.name = name
        self.from_list = name is None
        self.mode = "list" if name is None else "topology"
        self.window = window
        self.interval = interval
        self.home = home
        self.clock = clock
        self.rows = []
        self.list_cursor = 0
        self.quit = False
        self._reset()

    def _reset(self):
        self.doc = None  # the last document received
        self.doc_at = None
        self.problem = None  # None, ("gone", why) or ("silent", why)
        self.row = None  # the topology's row in topologies() when it is not answering
        self.selected = None  # component whose tasks are shown
        self.cursor = 0

    # -- data ------------------------------------------------------------------------------
    def _rows(self):
        try:
            rows = self.src.topologies()
            if getattr(self.src, "state", None) is not None:  # local mode: the masters' health
                topostatus.annotate_rows(rows, self.src.state)
            self.rows = sorted(rows, key=lambda r: r["name"])
        except (BitternError, OSError, ValueError, KeyError):
            pass  # a state file caught mid-write: keep the last rows
        self.list_cursor = min(self.list_cursor, max(0, len(self.rows) - 1))
        return self.rows

    def refresh(self):
        if self.mode == "list":
            self._rows()
            return
        try:
            doc = self.src.metrics(self.name, self.window)
        except TopologyGone as e:
            self.problem = ("gone", str(e))
        except BitternError as e:  # e.g. the topology master restarts and does not answer yet
            self.problem = ("silent", str(e))
        else:
            self.doc, self.doc_at, self.problem, self.row = doc, self.clock(), None, None
            self.cursor = min(self.cursor, max(0, len(doc.get("components") or {}) - 1))
            return
        self.row = next((r for r in self._rows() if r["name"] == self.name), None)

    def view(self, live=True):
        """The renderable to show now (``live`` False: one frame for a pipe, no keys)."""
        if self.mode == "list":
            return render_list(self.rows, self.list_cursor, self.home, live=live)
        age = None if self.doc_at is None else self.clock() - self.doc_at
        if self.problem and (self.problem[0] == "gone" or self.doc is None):
            why = self.problem[1] if self.problem[0] == "silent" else None
            return render_gone(self.name, self.row, self.doc, age, self.interval, why,
                               can_back=self.from_list, live=live)
        warning = None
        if self.problem:
            warning = f"not answering ({self.problem[1]}); this data is {age:.0f}s old"
        view = render(self.doc, self.selected, self.cursor, warning, can_back=self.from_list, live=live)
        return view if self.selected is not None else with_refused(view, self.doc)

    # -- keys ------------------------------------------------------------------------------
    def on_key(self, key):
        """Apply a key; returns None (nothing changed), 'draw' or 'fetch' (fetch now)."""
        if key in ("q", "Q", "eof"):
            self.quit = True
            return "draw"
        if self.mode == "list":
            return self._list_key(key)
        order = component_order(self.doc) if self.doc and not self.problem else []
        if key in BACK:
            if self.selected is not None:
                self.selected = None
                return "draw"
            if self.from_list:
                self.mode, self.name = "list", None
                self._reset()
                return "fetch"
            return None
        if not order:
            return None
        if key.isdigit() and 1 <= int(key) <= len(order):
            self.cursor = int(key) - 1
            self.selected = order[self.cursor]
            return "draw"
        if key in UP or key in DOWN:
            self.cursor = (self.cursor + (-1 if key in UP else 1)) % len(order)
            if self.selected is not None:
                self.selected = order[self.cursor]
            return "draw"
        if key in OPEN and self.selected is None:
            self.selected = order[min(self.cursor, len(order) - 1)]
            return "draw"
        return None

    def _list_key(self, key):
        if not self.rows:
            return None
        if key in UP or key in DOWN:
            self.list_cursor = (self.list_cursor + (-1 if key in UP else 1)) % len(self.rows)
            return "draw"
        pick = None
        if key.isdigit() and 1 <= int(key) <= len(self.rows):
            pick = int(key) - 1
        elif key in OPEN:
            pick = self.list_cursor
        if pick is None:
            return None
        self.list_cursor = pick
        self.mode, self.name = "topology", self.rows[pick]["name"]
        self._reset()
        return "fetch"


def with_refused(view, doc):
    """The topology's view with a line under its process table: what the stream
    managers' and the topology master's ports refused and dropped as malformed (red
    when any)."""
    line = refused(doc)
    if line is None:
        return view
    parts = list(view.renderables)
    at = max((i for i, r in enumerate(parts) if isinstance(r, FitTable)), default=len(parts) - 1) + 1
    parts.insert(at, Text(line, style="red" if any(refused_counts(doc)) else "dim"))
    return Group(*parts)


def run_live(top, console=None, stdin=None):
    """Redraw every ``top.interval`` seconds and at once after a key, until 'q'."""
    from rich.console import Console
    from rich.live import Live

    if console is None:  # full screen follows the terminal's real size, not an exported COLUMNS/LINES
        console = Console(_environ={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")})
    stdin = stdin or sys.stdin
    keys = KeyReader(stdin) if stdin.isatty() else NoKeys()
    old = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}  # restore the terminal
    try:
        with keys, Live(console=console, screen=True, auto_refresh=False, transient=True,
                        redirect_stdout=False, redirect_stderr=False) as live:
            next_fetch = 0.0
            draw = True
            while not top.quit:
                if time.monotonic() >= next_fetch:
                    top.refresh()
                    next_fetch = time.monotonic() + top.interval
                    draw = True
                if draw:
                    live.update(top.view(), refresh=True)
                    draw = False
                for key in keys.read(next_fetch - time.monotonic()):
                    action = top.on_key(key)
                    if action == "fetch":
                        next_fetch = 0.0
                    draw = draw or action is not None
                    if top.quit:
                        break
    except KeyboardInterrupt:
        pass
    except OSError as e:  # the terminal went away under us (a closed pty answers EIO)
        if e.errno not in (errno.EIO, errno.EPIPE, errno.EBADF):
            raise
        return 1
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def view_timeout(args):
    """A short timeout: a master that does not answer must not freeze the view for long."""
    if args.interval <= 0:
        raise BitternError("--interval must be positive")
    return min(3.0, max(1.0, 2 * args.interval))


def main(args, state, home):
    return show(args, LocalSource(state, timeout=view_timeout(args)), home)


def remote_main(args, client):
    client.timeout = view_timeout(args)
    return show(args, RemoteSource(client), client.url)


def show(args, src, where):
    """Run the view over ``src``; ``where`` (state directory or nimbus URL) titles the list."""
    from rich.console import Console

    top = Top(src, args.name, args.window, args.interval, where)
    try:
        if args.once or not sys.stdout.isatty():
            top.refresh()
            width = None if os.environ.get("COLUMNS") or sys.stdout.isatty() else 120
            Console(width=width).print(top.view(live=False))
            return 1 if top.mode == "topology" and top.problem else 0
        return run_live(top)
    finally:
        src.close()
