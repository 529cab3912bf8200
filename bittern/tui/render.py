"""What ``bittern top`` draws: rich renderables built only from a metrics document
(``LocalSource.metrics``) or from the rows of ``LocalSource.topologies()``. No I/O and
no clock here, so a fixed snapshot always renders to the same text (see
tests/test_top.py)."""
from __future__ import annotations

from rich import box
from rich.cells import cell_len
from rich.console import Group
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..cli.common import fmt_duration
from .. import topostatus
from ..health_fmt import describe
from ..metrics_fmt import has_event_time, human_bytes, lag, rate, view_watermark, watermark

BLOCKS = "▁▂▃▄▅▆▇█"
STATE_STYLES = {"RUNNING": "bold green", "PAUSED": "bold yellow", "STARTING": "bold cyan",
                "FAILED": "bold red", "DEAD": "bold red", "DEGRADED": "bold red"}
MAIN_KEYS = "1-9 or ↑↓ + enter: tasks of a component   q: quit"
TASK_KEYS = "↑↓: previous/next component   b/esc/←: back   q: quit"
LIST_KEYS = "1-9 or ↑↓ + enter: open a topology   q: quit"


# -- small formatting helpers ------------------------------------------------------------
def sparkline(values, width=None, top=None):
    """One block character per value, scaled to ``top`` (default: the largest value);
    with ``width``, only the last ``width`` values."""
    vals = [max(0.0, float(v or 0)) for v in values]
    if width is not None:
        vals = vals[-width:] if width > 0 else []
    if not vals:
        return ""
    top = max(vals) if top is None else top
    if top <= 0:
        return BLOCKS[0] * len(vals)
    return "".join(BLOCKS[min(7, int(v / top * 8))] for v in vals)


class Spark:
    """A sparkline that takes the width it is given (the newest points win)."""

    def __init__(self, values, style="cyan"):
        self.values = list(values)
        self.style = style

    def __rich_measure__(self, console, options):
        n = max(1, len(self.values))
        return Measurement(min(n, 8), n)

    def __rich_console__(self, console, options):
        yield Text(sparkline(self.values, options.max_width), style=self.style, no_wrap=True)


def ms(value, count=1):
    """A latency in milliseconds; '-' when nothing was measured."""
    if not count:
        return "-"
    if value < 10:
        return f"{value:.3f}"
    if value < 1000:
        return f"{value:.1f}"
    return f"{value:.0f}"


def pct(fraction):
    """A share of the window; capped at 100% (the instances' and the master's clocks
    can make a delta come out a little over the window)."""
    return f"{100 * min(1.0, fraction or 0):.0f}%"


def plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def num(v):
    return rate(v or 0.0)


def state_of(doc):
    phase = doc.get("phase") or "?"
    phase = "PAUSED" if phase == "RUNNING" and not doc.get("active", True) else phase
    return topostatus.shown_state(phase, doc.get("health"))


def component_order(doc):
    """Spouts first, then bolts, each by name: the rows and their numbers (keys 1-9)."""
    comps = doc.get("components") or {}
    return sorted(comps, key=lambda n: (comps[n].get("kind") != "spout", n))


def _capacity(value):
    style = "bold red" if value >= 0.8 else "yellow" if value >= 0.5 else None
    return Text(f"{value:.3f}", style=style or "")


def _bp(fraction):
    return Text(pct(fraction), style="red" if fraction and fraction >= 0.005 else "")


class FitTable:
    """A table that leaves out its least important columns (``drop``, first dropped
    first) rather than squeeze every column to an ellipsis when the width is short."""

    def __init__(self, cols, drop=()):
        self.cols = list(cols)  # headers; a leading '<' aligns the column left
        self.drop = list(drop)
        self.rows = []

    def add_row(self, *cells, style=None):
        self.rows.append(([c if isinstance(c, Text) else Text(str(c)) for c in cells], style))

    def _widths(self):
        return [max([cell_len(col.lstrip("<"))] + [r[0][i].cell_len for r in self.rows])
                for i, col in enumerate(self.cols)]

    def _keep(self, max_width):
        widths = dict(zip(self.cols, self._widths()))
        keep = list(self.cols)
        for name in self.drop:
            if sum(widths[c] for c in keep) + 2 * (len(keep) - 1) <= max_width:
                break
            keep = [c for c in keep if c.lstrip("<") != name]
        return keep

    def __rich_measure__(self, console, options):
        full = sum(self._widths()) + 2 * (len(self.cols) - 1)
        return Measurement(min(full, options.max_width), full)

    def __rich_console__(self, console, options):
        keep = self._keep(options.max_width)
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
        for col in keep:
            t.add_column(col.lstrip("<"), justify="left" if col.startswith("<") else "right", no_wrap=True,
                         overflow="ellipsis", header_style="bold")
        idx = [self.cols.index(c) for c in keep]
        for cells, style in self.rows:
            t.add_row(*(cells[i] for i in idx), style=style)
        yield t


def _table(cols, drop=()):
    return FitTable(cols, drop)


def _footer(keys):
    return Text(keys, style="dim")


# -- the topology view -------------------------------------------------------------------
def header(doc, warning=None):
    """State, uptime, containers, tasks, reliability mode, backpressure."""
    state = state_of(doc)
    t = Text()
    t.append(str(doc.get("topology")), "bold")
    t.append("  ")
    t.append(state, STATE_STYLES.get(state, "bold yellow"))
    t.append(f"  up {fmt_duration(doc.get('uptime_secs') or 0)}")
    t.append(f"  {plural(doc.get('containers', 0), 'container')}")
    t.append(f"  {plural(len(doc.get('tasks') or {}), 'task')}")
    t.append(f"  {doc.get('reliability')}")
    t.append("  backpressure ")
    if doc.get("backpressure"):
        on = [c for c, s in sorted((doc.get("stmgrs") or {}).items()) if s.get("backpressure")]
        t.append("ON", "bold red")
        if on:
            t.append(f" (container {', '.join(on)})", "red")
    else:
        t.append("off", "green")
    errors = doc.get("errors") or 0
    t.append(f"  {plural(errors, 'error')}", "bold red" if errors else "")
    body = [t]
    if topostatus.degraded(doc.get("health")):  # why, and since when (bittern/topostatus.py)
        body.append(Text(topostatus.describe(doc), style="bold red"))
    if warning:
        body.append(Text(f"! {warning}", style="bold yellow"))
    return Panel(Group(*body), title="bittern top", title_align="left", box=box.ROUNDED,
                 subtitle=f"rates and latencies over window {doc.get('window')}", subtitle_align="right",
                 border_style="yellow" if warning else "blue")


def components_table(doc, cursor=None):
    """One row per component: what Storm's UI shows, plus CPU and memory."""
    t = _table(["#", "<component", "<kind", "par", "emit/s", "exec/s", "ack/s", "fail/s",
                "exec ms", "compl ms", "capacity", "bp", "bp time", "cpu %", "rss"],
               drop=["bp time", "kind", "fail/s", "rss", "cpu %", "ack/s", "bp", "compl ms"])
    comps = doc.get("components") or {}
    for i, name in enumerate(component_order(doc)):
        c = comps[name]
        spout = c.get("kind") == "spout"
        mark = "▸" if i == cursor else " "
        t.add_row(f"{mark}{i + 1}", Text(name, style="bold" if i == cursor else ""), c.get("kind") or "?",
                  str(c.get("tasks", 0)), num(c.get("emit_rate")), num(c.get("execute_rate")),
                  num(c.get("ack_rate")), num(c.get("fail_rate")),
                  "-" if spout else ms(c.get("execute_latency_ms", 0), c.get("execute_latency_count")),
                  ms(c.get("complete_latency_ms", 0), c.get("complete_latency_count")) if spout else "-",
                  "-" if spout else _capacity(c.get("capacity") or 0.0),
                  _bp(c.get("backpressure_fraction")), f"{(c.get('backpressure_ms') or 0) / 1000:.1f}s",
                  f"{c.get('cpu_percent') or 0:.0f}", human_bytes(c.get("rss_bytes")),
                  style="reverse" if i == cursor else None)
    return t


def event_time(doc):
    """Event time of the components that have it (None when none has): how far each
    has got (a bolt's input watermark, a spout's output), its slowest task's lag, and
    the tuples that came late; numbered as in the component table."""
    comps = doc.get("components") or {}
    rows = [(i, name) for i, name in enumerate(component_order(doc)) if has_event_time(comps[name])]
    if not rows:
        return None
    t = _table(["#", "<component", "watermark", "lag s", "late", "too late", "late/s", "bad ts",
                "win open", "win fired"], drop=["late/s", "bad ts", "win fired", "win open"])
    for i, name in rows:
        c = comps[name]
        t.add_row(f" {i + 1}", name, watermark(view_watermark(c)), lag(c.get("watermark_lag_secs")),
                  str(c.get("late") or 0), _unplaced(c.get("too_late")), num(c.get("late_rate")),
                  _unplaced(c.get("bad_timestamps")), _opt(c.get("open_windows")),
                  str(c.get("windows_fired") or 0))
    return Group(Text(""), Text("event time", style="bold"), t)


def _unplaced(n):
    """A count of tuples event time could not place (too late, a bad timestamp): red
    when not zero, since they left every window."""
    return Text(str(n or 0), style="red" if n else "")


def _opt(v):
    return "-" if v is None else str(v)


def stmgrs_table(doc):
    t = _table(["<process", "pid", "<backpressure", "bp time", "queued", "dropped", "cpu %", "rss"],
               drop=["dropped", "bp time", "queued"])
    for c, s in sorted((doc.get("stmgrs") or {}).items(), key=lambda kv: int(kv[0])):
        bp = Text("ON", style="bold red") if s.get("backpressure") else Text("off", style="green")
        t.add_row(f"stmgr {c}" + ("" if s.get("alive", True) else " (silent)"), str(s.get("pid") or "-"),
                  bp, f"{s.get('backpressure_secs') or 0:.1f}s", human_bytes(s.get("queued_bytes")),
                  str(s.get("dropped") or 0), f"{s.get('cpu_percent') or 0:.0f}",
                  human_bytes(s.get("rss_bytes")))
    tm = doc.get("tmaster")
    if tm:
        t.add_row("tmaster", str(tm.get("pid") or "-"), "", "", "", "", f"{tm.get('cpu_percent') or 0:.0f}",
                  human_bytes(tm.get("rss_bytes")))
    return t


def throughput(doc):
    """Sparklines of the topology's throughput (spouts' emits, bolts' executes)."""
    series = doc.get("throughput") or []
    span = f"last {fmt_duration(series[0].get('ago_secs') or 0)}" if series else "no samples yet"
    g = Table.grid(padding=(0, 2), expand=True)
    g.add_column(no_wrap=True)
    g.add_column(justify="right", no_wrap=True)
    g.add_column(justify="right", no_wrap=True)
    g.add_column(ratio=1, no_wrap=True)
    for label, key, style in (("spouts emitted/s", "emit_rate", "cyan"),
                              ("bolts executed/s", "execute_rate", "magenta")):
        vals = [p.get(key) or 0.0 for p in series]
        g.add_row(label, f"now {num(vals[-1] if vals else 0)}", f"max {num(max(vals, default=0))}",
                  Spark(vals, style))
    return Group(Text(""), Text(f"throughput ({span})", style="bold"), g)


def tasks_table(doc, component):
    """One row per task of ``component``; spouts and bolts show different columns."""
    spout = (doc.get("components") or {}).get(component, {}).get("kind") == "spout"
    if spout:
        cols = ["task", "ctr", "pid", "emit/s", "ack/s", "fail/s", "compl ms", "p99 ms", "pending",
                "bp", "bp time", "cpu %", "rss"]
    else:
        cols = ["task", "ctr", "pid", "emit/s", "exec/s", "ack/s", "fail/s", "exec ms", "p99 ms",
                "capacity", "bp", "bp time", "cpu %", "rss"]
    tasks = {tid: v for tid, v in (doc.get("tasks") or {}).items() if v.get("component") == component}
    et = any(has_event_time(v) for v in tasks.values())
    if et:  # how far each task has got, how far behind the wall clock, what it could not place
        cols += ["watermark", "lag s", "bad ts" if spout else "late"]
    t = _table(cols, drop=["bp time", "ctr", "bad ts", "late", "fail/s", "rss", "cpu %", "p99 ms", "ack/s",
                           "pending", "watermark"])
    for tid in sorted(tasks, key=int):
        v = tasks[tid]
        row = [str(tid), str(v.get("container", "-")), str(v.get("pid") or "-"), num(v.get("emit_rate"))]
        if spout:
            n = v.get("complete_latency_count")
            row += [num(v.get("ack_rate")), num(v.get("fail_rate")), ms(v.get("complete_latency_ms", 0), n),
                    ms(v.get("complete_latency_p99_ms", 0), n), str(v.get("pending") or 0)]
        else:
            n = v.get("execute_latency_count")
            row += [num(v.get("execute_rate")), num(v.get("ack_rate")), num(v.get("fail_rate")),
                    ms(v.get("execute_latency_ms", 0), n), ms(v.get("execute_latency_p99_ms", 0), n),
                    _capacity(v.get("capacity") or 0.0)]
        row += [_bp(v.get("backpressure_fraction")), f"{(v.get('backpressure_ms') or 0) / 1000:.1f}s",
                f"{v.get('cpu_percent') or 0:.0f}", human_bytes(v.get("rss_bytes"))]
        if et:
            row += [watermark(view_watermark(v, "spout" if spout else "bolt")), lag(v.get("watermark_lag_secs")),
                    _unplaced(v.get("bad_timestamps")) if spout else str(v.get("late") or 0)]
        t.add_row(*row)
    return t


def component_summary(name, c):
    """Two lines: the component's totals, then its latencies (and capacity or pending)."""
    kind = c.get("kind") or "?"
    top = Text()
    top.append(name, "bold")
    top.append(f" ({kind}, {plural(c.get('tasks', 0), 'task')})  emitted {c.get('emitted', 0)}  "
               f"executed {c.get('executed', 0)}  acked {c.get('acked', 0)}  failed {c.get('failed', 0)}  "
               f"timed out {c.get('timed_out', 0)}  errors {c.get('errors', 0)}")
    lat = Text()
    which = "complete" if kind == "spout" else "execute"
    n = c.get(f"{which}_latency_count")
    lat.append(f"{which} latency ms: avg {ms(c.get(f'{which}_latency_ms', 0), n)}  "
               f"p50 {ms(c.get(f'{which}_latency_p50_ms', 0), n)}  p99 {ms(c.get(f'{which}_latency_p99_ms', 0), n)}")
    if kind == "spout":
        lat.append(f"   pending {c.get('pending', 0)}")
    else:
        lat.append("   capacity ")
        lat.append_text(_capacity(c.get("capacity") or 0.0))
    lat.append(f"   backpressure {pct(c.get('backpressure_fraction'))} of the window, "
               f"{(c.get('backpressure_ms') or 0) / 1000:.1f}s in all")
    if not has_event_time(c):
        return Group(top, lat)
    return Group(top, lat, event_time_summary(c))


def event_time_summary(c):
    """Two lines of a component's event time: its watermarks (the minimum over its
    tasks) and lag (the maximum); then its windows, timers and the tuples event time
    could not place."""
    marks = Text("event time: watermark ")
    if c.get("kind") != "spout":
        marks.append(f"input {watermark(c.get('input_watermark'))}  ")
    marks.append(f"output {watermark(c.get('output_watermark'))}   lag {lag(c.get('watermark_lag_secs'))}s")
    counts = Text()
    if c.get("open_windows") is not None or c.get("windows_fired"):
        counts.append(f"windows open {_opt(c.get('open_windows'))}, fired {c.get('windows_fired') or 0}   ")
    if c.get("timers_fired"):
        counts.append(f"timers fired {c.get('timers_fired')}   ")
    if c.get("kind") != "spout":
        counts.append(f"late {c.get('late') or 0}  too late ")
        counts.append_text(_unplaced(c.get("too_late")))
        counts.append("  ")
    counts.append("bad timestamps ")
    counts.append_text(_unplaced(c.get("bad_timestamps")))
    return Group(marks, counts)


HEALTH_DECISIONS = 4  # the last decisions of the health manager shown under the stream managers
OUTCOME_STYLES = {"PENDING": "cyan", "HELPED": "green", "FELL_SHORT": "yellow", "DID_NOT_HELP": "bold red", "FAILED": "bold red",
                  "BLACKLISTED": "yellow", "REPORTED": "yellow", "UNKNOWN": "dim", "INTERRUPTED": "dim"}


def health(doc, limit=HEALTH_DECISIONS):
    """The health manager's last decisions (only when it is on: ``healthmgr`` in the doc)."""
    hm = doc.get("healthmgr")
    if not isinstance(hm, dict):
        return None
    title = Text("health manager", style="bold")
    if hm.get("in_flight") is not None:
        title.append(f"  carrying out #{hm['in_flight']}", "cyan")
    elif hm.get("pending"):
        title.append(f"  judging #{(hm['pending'] or {}).get('id')}", "cyan")
    bl = hm.get("blacklist") or []
    if bl:
        title.append("  blacklisted: " + ", ".join(f"{b.get('diagnosis')} {b.get('component')}" for b in bl),
                     "yellow")
    lines = [Text(""), title]
    decisions = (hm.get("decisions") or [])[-limit:]
    if not decisions:
        lines.append(Text("no decisions yet", style="dim"))
    for d in decisions:
        lines.append(Text(describe(d), style=OUTCOME_STYLES.get(d.get("outcome"), ""), no_wrap=True,
                          overflow="ellipsis"))
    return Group(*lines)


def render(doc, selected=None, cursor=0, warning=None, can_back=False, live=True):
    """The view of one topology: the component table, or (``selected``) the tasks of
    one component. ``cursor`` is the highlighted row; ``warning`` a line shown in the
    header (e.g. the topology master is not answering and the data is old); ``live``
    False leaves out the keys (a single frame printed to a pipe)."""
    order = component_order(doc)
    if selected is not None and selected not in order:
        warning = (warning + "; " if warning else "") + f"component {selected!r} is not in this topology"
        selected = None
    parts = [header(doc, warning)]
    if selected is None:
        parts.append(components_table(doc, cursor if order and live else None))
        et = event_time(doc)
        if et is not None:
            parts.append(et)
        parts += [throughput(doc), Text(""), stmgrs_table(doc)]
        hm = health(doc)
        if hm is not None:
            parts.append(hm)
        keys = MAIN_KEYS + ("   b/esc: list" if can_back else "")
    else:
        parts += [component_summary(selected, doc["components"][selected]), Text(""),
                  tasks_table(doc, selected), throughput(doc)]
        keys = TASK_KEYS
    if live:
        parts += [Text(""), _footer(keys)]
    return Group(*parts)


def render_gone(name, row=None, last_doc=None, last_seen_secs=None, interval=1.0, reason=None,
                can_back=False, live=True):
    """The topology is not running: say so plainly, and that we keep looking.
    ``row`` is its entry in ``LocalSource.topologies()`` if it still has one."""
    state = (row or {}).get("state")
    if row is None or state in ("DEAD", "FAILED"):
        title = Text(f"topology {name} is gone", style="bold red")
        if row is None:
            detail = "It is not in the state directory: it was killed, or never submitted."
        else:
            detail = f"Its state is {state}: nothing runs it (`bittern kill {name}` cleans it up)."
    else:
        title = Text(f"topology {name} is not answering (state {state})", style="bold yellow")
        detail = "Its topology master is starting or restarting."
    body = [title, Text(detail)]
    if reason:
        body.append(Text(str(reason), style="dim"))
    if last_doc is not None:
        seen = f"{fmt_duration(last_seen_secs)} ago" if last_seen_secs is not None else "earlier"
        body.append(Text(f"Last seen {seen}: {state_of(last_doc)}, {len(last_doc.get('tasks') or {})} tasks "
                         f"in {last_doc.get('containers', 0)} containers, up "
                         f"{fmt_duration(last_doc.get('uptime_secs') or 0)}."))
    if live:
        body.append(Text(f"Checking again every {interval:g}s; it shows again as soon as it runs."))
    parts = [Panel(Group(*body), title="bittern top", title_align="left", box=box.ROUNDED,
                   border_style="red" if title.style == "bold red" else "yellow")]
    if live:
        parts.append(_footer("q: quit" + ("   b/esc: list" if can_back else "")))
    return Group(*parts)


# -- the list of topologies ---------------------------------------------------------------
def render_list(rows, cursor=0, home=None, live=True):
    """``bittern top`` without a name: the topologies of this state directory."""
    rows = sorted(rows, key=lambda r: r["name"])
    where = f" in {home}" if home else ""
    title = Text(f"{len(rows)} topolog{'y' if len(rows) == 1 else 'ies'}{where}", style="bold")
    parts = [Panel(title, title="bittern top", title_align="left", box=box.ROUNDED, border_style="blue")]
    if not rows:
        parts.append(Text("no topologies running", style="bold"))
    else:
        t = _table(["#", "<name", "<state", "containers", "tasks", "uptime", "<reliability"],
                   drop=["reliability", "containers"])
        for i, r in enumerate(rows):
            mark = "▸" if i == cursor and live else " "
            state = r.get("state") or "?"
            t.add_row(f"{mark}{i + 1}", Text(r["name"], style="bold" if i == cursor else ""),
                      Text(state, style=STATE_STYLES.get(state, "yellow")), str(r.get("containers", 0)),
                      str(r.get("tasks", 0)), fmt_duration(r.get("uptime_secs") or 0),
                      str(r.get("reliability") or "-"), style="reverse" if i == cursor and live else None)
        parts.append(t)
    if live:
        parts += [Text(""), _footer(LIST_KEYS if rows else "q: quit")]
    return Group(*parts)
