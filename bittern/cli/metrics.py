"""``bittern metrics NAME`` (one snapshot, for scripts) and ``bittern errors NAME``."""
from __future__ import annotations

import json
import time

from .. import topostatus
from ..monitor import LocalSource, RemoteSource
from ..metrics_fmt import has_event_time, human_bytes, json_safe, lag, rate, refused, view_watermark, watermark


def add_parsers(sub):
    p = sub.add_parser("metrics", help="print one snapshot of a topology's metrics")
    p.add_argument("name")
    p.add_argument("--window", default="1m", choices=["interval", "1m", "10m", "all"],
                   help="window for rates and latencies (default 1m)")
    p.add_argument("--json", action="store_true", help="the whole document as JSON")
    p.set_defaults(func=metrics_main, remote=metrics_remote)
    p = sub.add_parser("errors", help="show the recent exceptions of a topology's components")
    p.add_argument("name")
    p.add_argument("--component", help="only this component")
    p.add_argument("-n", "--limit", type=int, default=10)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=errors_main, remote=errors_remote)


def metrics_main(args, state, home):
    return show_metrics(args, LocalSource(state))


def metrics_remote(args, client):
    return show_metrics(args, RemoteSource(client))


def show_metrics(args, src):
    try:
        doc = src.metrics(args.name, args.window)
    finally:
        src.close()
    if args.json:  # strict JSON, by the HTTP API's convention (a finished watermark is "inf")
        print(json.dumps(json_safe(doc), indent=1, sort_keys=True, allow_nan=False))
        return 0
    print(format_metrics(doc))
    return 0


def format_metrics(doc):
    """The snapshot as text: a header line, then one row per component (pure, for tests)."""
    phase = topostatus.shown_state(doc["phase"], doc.get("health"))
    lines = [f"topology {doc['topology']}: {phase}{'' if doc['active'] else ' (PAUSED)'}, "
             f"{doc['reliability']}, {doc['containers']} container(s), up {doc['uptime_secs']:.0f}s, "
             f"backpressure {'ON' if doc['backpressure'] else 'off'}; window {doc['window']}"]
    if topostatus.degraded(doc.get("health")):
        lines.append(topostatus.describe(doc))
    turned_away = refused(doc)  # control traffic dropped or refused at the topology's ports
    if turned_away is not None:
        lines.append(turned_away)
    cols = ["component", "tasks", "emitted", "executed", "acked", "failed", "emit/s", "exec/s",
            "exec ms", "complete ms", "capacity", "bp %", "cpu %", "rss"]
    # event time only when some component has it: its watermark (a bolt's input, a
    # spout's output), its slowest task's lag, and its late tuples
    event_time = any(has_event_time(c) for c in doc["components"].values())
    if event_time:
        cols += ["watermark", "lag s", "late", "too late"]
    rows = []
    for name, c in doc["components"].items():
        rows.append([name, c["tasks"], c["emitted"], c["executed"], c["acked"], c["failed"],
                     rate(c["emit_rate"]), rate(c["execute_rate"]), f"{c['execute_latency_ms']:.3f}",
                     f"{c['complete_latency_ms']:.1f}" if c["kind"] == "spout" else "-",
                     f"{c['capacity']:.2f}", f"{100 * c['backpressure_fraction']:.0f}",
                     f"{c['cpu_percent']:.0f}", human_bytes(c["rss_bytes"])])
        if event_time:
            rows[-1] += [watermark(view_watermark(c)), lag(c.get("watermark_lag_secs")),
                         c.get("late") or 0, c.get("too_late") or 0]
    widths = [max(len(str(x)) for x in [col] + [r[i] for r in rows]) for i, col in enumerate(cols)]
    lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cols, widths))))
    for r in rows:
        lines.append("  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w)
                               for i, (x, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def errors_main(args, state, home):
    return show_errors(args, LocalSource(state))


def errors_remote(args, client):
    return show_errors(args, RemoteSource(client))


def show_errors(args, src):
    try:
        errs = src.errors(args.name, args.component, args.limit)
    finally:
        src.close()
    if args.json:
        print(json.dumps(errs, indent=1))
        return 0
    if not errs:
        print(f"no errors in topology {args.name}")
        return 0
    for e in errs:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.get("time") or 0))
        who = e.get("component") if e.get("task") is None else f"{e.get('component')}[task {e.get('task')}]"
        times = ""
        if (e.get("count") or 1) > 1:  # one record for a run of the same error (the topology master's)
            first = time.strftime("%H:%M:%S", time.localtime(e.get("first_time") or 0))
            times = f" ({e['count']} times since {first})"
        print(f"--- {when} {who} in {e.get('where')}: {e.get('error')}{times}")
        print((e.get("traceback") or "").rstrip())
    return 0
