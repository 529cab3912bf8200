"""The web UI's pages as HTML, from the JSON API's documents (pure: no I/O).

Every value that comes from the API (names, states, error texts, tracebacks, log lines)
goes through :func:`e` (HTML-escaped, quotes too); nothing is put into a script. The
pages work without JavaScript: each one is real tables with ``<th>`` headers; the script
(static/app.js) only adds the graph, the charts, live updates and the actions. The
``<main>`` element (``id="live"``) is what a live update replaces (``?fragment=1``)."""
from __future__ import annotations

import html
import json
import re
import time
from urllib.parse import quote

from .. import metrics_fmt
from ..cli.common import fmt_duration
from ..health_fmt import describe

BUSY = 0.8  # capacity at which a bolt is shown as busy (Storm's UI turns it red at 0.8)
WARM = 0.5
BP_SHOWN = 0.005  # a share of the window in backpressure worth showing


def e(value):
    """``value`` as HTML text (every character that means something in HTML escaped)."""
    return html.escape("" if value is None else str(value), quote=True)


def q(value):
    """``value`` as one URL path segment."""
    return quote(str(value), safe="")


def num(v, digits=1):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def ms(v, count=1):
    return "-" if not count or not isinstance(v, (int, float)) else (f"{v:.3f}" if v < 10 else f"{v:.1f}")


def pct(v):
    return "-" if not isinstance(v, (int, float)) else f"{100 * min(1.0, max(0.0, v)):.0f}%"


def duration(secs):
    return fmt_duration(secs) if isinstance(secs, (int, float)) else "-"


def human_bytes(n):
    return metrics_fmt.human_bytes(n) if isinstance(n, (int, float)) else "-"


def status_of(view):
    """``(word, css class)`` of a component or task: the word is the non-colour signal
    (the class only colours it)."""
    bp = view.get("backpressure_fraction") or 0
    cap = view.get("capacity") or 0
    if bp >= BP_SHOWN:
        return "backpressure", "st-bp"
    if view.get("kind") != "spout" and cap >= BUSY:
        return "busy", "st-busy"
    if view.get("kind") != "spout" and cap >= WARM:
        return "warm", "st-warm"
    return "ok", "st-ok"


def table(caption, headers, rows, cls="data"):
    """A table with a caption and ``<th scope=col>`` headers; ``rows`` are lists of
    already-escaped cell HTML (the first cell is a row header)."""
    tid = "t-" + re.sub(r"[^a-z0-9]+", "-", caption.lower()).strip("-")
    out = [f'<table class="{cls}" id="{e(tid)}" data-live="1"><caption>{e(caption)}</caption><thead><tr>']
    out += [f'<th scope="col">{e(h)}</th>' for h in headers]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>" + "".join((f'<th scope="row">{c}</th>' if i == 0 else f"<td>{c}</td>")
                                    for i, c in enumerate(row)) + "</tr>")
    if not rows:
        out.append(f'<tr><td colspan="{len(headers)}">none</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def link(href, text):
    return f'<a href="{e(href)}">{e(text)}</a>'


# -- the frame --------------------------------------------------------------------------------
def page(title, body, *, ctx, crumbs=(), data=None):
    """A whole page. ``ctx``: ``mode`` (local/cluster), ``signed_in``, ``actions``
    (whether the server takes actions), ``version``. ``data``: attributes for the
    script (``data-*`` on ``<body>``: the page kind, topology, component)."""
    attrs = {"mode": ctx["mode"], "signed-in": "1" if ctx["signed_in"] else "0",
             "actions": "1" if ctx["actions"] else "0", **(data or {})}
    battrs = " ".join(f'data-{k}="{e(v)}"' for k, v in attrs.items())
    nav = [link("/ui/", "Topologies")]
    if ctx["mode"] == "cluster":
        nav.append(link("/ui/cluster", "Cluster"))
    trail = " / ".join(link(h, t) if h else e(t) for h, t in crumbs)
    signin = signin_box(ctx)
    v = f"?v={e(ctx['static'])}" if ctx.get("static") else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{e(title)} - Bittern</title>"
            '<link rel="icon" href="data:,">'  # (no request for /favicon.ico on every page)
            f'<link rel="stylesheet" href="/ui/static/vendor/uPlot.min.css{v}">'
            f'<link rel="stylesheet" href="/ui/static/app.css{v}">'
            # (app.js first: it asks for the page's data while the libraries are still run)
            f'<script src="/ui/static/app.js{v}" defer></script>'
            f'<script src="/ui/static/vendor/dagre.min.js{v}" defer></script>'
            f'<script src="/ui/static/vendor/uPlot.iife.min.js{v}" defer></script>'
            f"</head><body {battrs}>"
            '<a class="skip" href="#live">Skip to content</a>'
            f'<header><nav aria-label="main"><strong>Bittern</strong> {" | ".join(nav)}</nav>'
            f'<p class="crumbs">{trail}</p>'
            '<p id="status" role="status" aria-live="polite"></p></header>'
            f'{signin}<main id="live" tabindex="-1"><h1>{e(title)}</h1>{body}</main>'
            f'<footer>bittern {e(ctx.get("version", ""))} &middot; {e(ctx["mode"])} mode'
            f'{_footer_actions(ctx)}</footer>'
            "</body></html>\n")


def _footer_actions(ctx):
    if ctx.get("standby") is not None:
        return " &middot; a standby nimbus (actions on the leader)"
    return " &middot; actions enabled" if ctx["actions"] else " &middot; read-only"


def signin_box(ctx):
    hidden = " hidden" if ctx["signed_in"] else ""
    return (f'<section id="signin" aria-labelledby="signin-h"{hidden}><h2 id="signin-h">Sign in</h2>'
            '<p>This server needs its API token. It stays in this tab only (sessionStorage) and is sent '
            'in an <code>Authorization</code> header, never in a URL or a cookie.</p>'
            '<form id="signin-form" autocomplete="off"><label for="token">API token</label> '
            '<input id="token" name="token" type="password" required> '
            '<button type="submit">Sign in</button></form>'
            '<noscript><p>Without JavaScript: <a href="/ui/login">sign in with the browser\'s password '
            'dialog</a> (any user name, the token as password).</p></noscript></section>')


def signed_out(what):
    return f'<p class="note">Sign in to see {e(what)}.</p>'


def problem(status, message):
    return f'<p class="error" role="alert">{e(status)}: {e(message)}</p>'


# -- pages ------------------------------------------------------------------------------------
def topology_list(rows):
    body = []
    for r in rows:
        name = r.get("name")
        body.append([link(f"/ui/topologies/{q(name)}", name), e(r.get("state")), e(r.get("containers")),
                     e(r.get("tasks")), e(duration(r.get("uptime_secs"))), e(r.get("reliability")),
                     e(r.get("reason") or "")])
    return table("Topologies", ["name", "state", "containers", "tasks", "uptime", "reliability", "reason"], body)


def cluster(doc, zookeeper):
    """The cluster page: nimbuses, supervisors with their slots, ZooKeeper."""
    used = {}
    for t in (doc.get("assignments") or {}).values():
        for c in (t.get("containers") or {}).values():
            used[c.get("supervisor")] = used.get(c.get("supervisor"), 0) + 1
    nimbuses = [[e(n.get("url")), "leader" if n.get("leader") else "standby",
                 "yes" if n.get("url") == doc.get("this") else "", e(n.get("host") or "")]
                for n in sorted(doc.get("nimbuses") or [], key=lambda n: (not n.get("leader"), str(n.get("url"))))]
    sups = []
    for s in doc.get("supervisors") or []:
        slots = s.get("slots") or 0
        n = used.get(s.get("id"), s.get("used"))
        sups.append([e(s.get("id")), e(s.get("host")), e(slots), e(n if n is not None else "-"),
                     e(slots - n if isinstance(n, int) and isinstance(slots, int) else "-"),
                     e(s.get("log_url") or "")])
    zk = [["ZooKeeper", e(zookeeper)]]
    return (table("ZooKeeper", ["service", "status"], zk)
            + table("Nimbus", ["url", "role", "this one", "host"], nimbuses)
            + table("Supervisors", ["id", "host", "slots", "used", "free", "log server"], sups))


def components_of(plan):
    return {c.get("name"): c for c in ((plan or {}).get("logical_plan") or {}).get("components") or []}


def grouping_text(g):
    g = g or {}
    kind = g.get("type") or "?"
    return f"{kind}({', '.join(map(str, g['fields']))})" if g.get("fields") else str(kind)


def edges(plan, metrics):
    """``[(from, to, stream, grouping text, rate)]``: the rate is the sending component's
    transfer rate over the window (per-stream rates are not measured)."""
    comps = (metrics or {}).get("components") or {}
    out = []
    for name, c in sorted(components_of(plan).items()):
        for i in c.get("inputs") or []:
            src = i.get("component")
            view = comps.get(src) or {}
            rate = view.get("transfer_rate", view.get("emit_rate"))
            out.append((src, name, i.get("stream") or "default", grouping_text(i.get("grouping")), rate))
    return out


def graph_data(plan, metrics):
    """What the script draws (nodes and edges), as JSON for a ``data-graph`` attribute."""
    comps = (metrics or {}).get("components") or {}
    nodes = []
    for name, c in sorted(components_of(plan).items()):
        view = dict(comps.get(name) or {}, kind=c.get("kind"))
        word, _ = status_of(view)
        nodes.append({"id": name, "kind": c.get("kind"), "par": c.get("par"),
                      "capacity": view.get("capacity"), "bp": view.get("backpressure_fraction"),
                      "rate": view.get("execute_rate") if c.get("kind") != "spout" else view.get("emit_rate"),
                      "status": word})
    return {"nodes": nodes, "edges": [{"from": a, "to": b, "stream": s, "grouping": g, "rate": r}
                                      for a, b, s, g, r in edges(plan, metrics)]}


def summary(name, plan, m):
    rows = [["state", e(state_word(plan, m))], ["active", "yes" if m.get("active") else "no"],
            ["uptime", e(duration(m.get("uptime_secs")))], ["reliability", e(m.get("reliability"))],
            ["containers", e(m.get("containers"))], ["tasks", e(len(m.get("tasks") or {}))],
            ["backpressure", "YES" if m.get("backpressure") else "no"], ["errors", e(m.get("errors"))],
            ["window", e(m.get("window"))]]
    return table(f"Topology {name}", ["what", "value"], rows, cls="summary")


def state_word(plan, m):
    state = (plan or {}).get("state") or m.get("phase")
    return "PAUSED" if state == "RUNNING" and m.get("active") is False else state


def component_rows(name, plan, m):
    comps = m.get("components") or {}
    rows = []
    for c in sorted(components_of(plan).values(), key=lambda c: (c.get("kind") != "spout", c.get("name"))):
        cn = c.get("name")
        v = dict(comps.get(cn) or {}, kind=c.get("kind"))
        word, cls = status_of(v)
        spout = c.get("kind") == "spout"
        rows.append([link(f"/ui/topologies/{q(name)}/components/{q(cn)}", cn), e(c.get("kind")),
                     e(v.get("tasks", c.get("par"))), e(num(v.get("emit_rate"))), e(num(v.get("execute_rate"))),
                     e(num(v.get("ack_rate"))), e(num(v.get("fail_rate"))),
                     "-" if spout else e(ms(v.get("execute_latency_ms"), v.get("execute_latency_count"))),
                     e(ms(v.get("complete_latency_ms"), v.get("complete_latency_count"))) if spout else "-",
                     "-" if spout else e(num(v.get("capacity"), 3)), e(pct(v.get("backpressure_fraction"))),
                     f'<span class="{cls}">{e(word)}</span>', e(v.get("errors", 0))])
    return table("Components", ["component", "kind", "tasks", "emit/s", "exec/s", "ack/s", "fail/s",
                                "exec ms", "complete ms", "capacity", "backpressure", "status", "errors"], rows)


def edge_table(plan, m):
    rows = [[e(a), e(b), e(s), e(g), e(num(r))] for a, b, s, g, r in edges(plan, m)]
    return table("Streams (edges)", ["from", "to", "stream", "grouping", "rate/s (sender)"], rows)


def stmgr_table(m):
    rows = [[e(c), "yes" if s.get("alive") else "NO", "YES" if s.get("backpressure") else "no",
             e(human_bytes(s.get("queued_bytes"))), e(s.get("dropped")), e(num(s.get("cpu_percent"), 0)),
             e(human_bytes(s.get("rss_bytes")))] for c, s in sorted((m.get("stmgrs") or {}).items(),
                                                                   key=lambda kv: int(kv[0]))]
    return table("Stream managers", ["container", "alive", "backpressure", "queued", "dropped", "cpu %", "rss"],
                 rows)


def health_table(m, limit=20):
    hm = m.get("healthmgr")
    if hm is None:
        return '<h2>Health manager</h2><p>Off (topology.healthmgr.enabled = false).</p>'
    rows = []
    for d in reversed([d for d in (hm.get("decisions") or []) if isinstance(d, dict)][-limit:]):
        diag = d.get("diagnosis") if isinstance(d.get("diagnosis"), dict) else {"kind": d.get("diagnosis")}
        action = d.get("action") if isinstance(d.get("action"), dict) else {"kind": d.get("action")}
        at = d.get("at")
        try:
            text = describe(dict(d, diagnosis=diag, action=action))
        except (TypeError, ValueError, AttributeError):  # an entry of another shape: shown raw
            text = json.dumps(d, sort_keys=True, default=str)
        rows.append([e(d.get("id", "")), e(time.strftime("%H:%M:%S", time.localtime(at))
                                          if isinstance(at, (int, float)) else "-"),
                     e(f"{diag.get('kind') or ''} {diag.get('component') or ''}".strip()),
                     e(action.get("kind") or ""), e(d.get("outcome") or ""), f"<pre>{e(text)}</pre>"])
    return table("Health manager decisions", ["#", "time", "diagnosis", "action", "outcome", "details"], rows)


def actions_panel(name, comps, ctx):
    """Buttons and rebalance forms; the script wires them (they need the token in a header)."""
    if not ctx["actions"]:
        return ('<section id="actions"><h2>Actions</h2><p>This server is read-only '
                '(start <code>bittern serve --allow-actions</code> to enable them).</p></section>')
    standby = ctx.get("standby")
    if standby is not None:  # a standby nimbus: the leader takes actions (a 307 the page can't follow)
        where = "no leader is known right now"
        if standby.startswith(("http://", "https://")):
            page = f"{standby.rstrip('/')}/ui/topologies/{q(name)}"
            where = f'<a href="{e(page)}">open this page on the leader</a> ({e(standby)})'
        return (f'<section id="actions"><h2>Actions</h2><p class="standby">This nimbus is a standby: '
                f'actions are taken by the leader; {where}.</p></section>')
    forms = "".join(
        f'<form class="rebalance" data-component="{e(c)}"><label for="par-{e(c)}">{e(c)} tasks</label> '
        f'<input id="par-{e(c)}" name="par" type="number" min="1" max="1000" value="{e(p)}" required> '
        f'<button type="submit">Rebalance {e(c)}</button></form>'
        for c, p in comps)
    return (f'<section id="actions" data-topology="{e(name)}"><h2>Actions</h2>'
            '<noscript><p>Actions need JavaScript: the token travels in a header.</p></noscript>'
            '<p><button type="button" data-action="activate">Activate</button> '
            '<button type="button" data-action="deactivate">Deactivate</button> '
            '<button type="button" data-action="kill" class="danger">Kill</button></p>'
            f'<h3>Rebalance</h3>{forms}<p id="action-result" role="status" aria-live="polite"></p></section>')


def topology(name, plan, m, ctx):
    g = json.dumps(metrics_fmt.json_safe(graph_data(plan, m)), sort_keys=True, allow_nan=False)
    comps = [(c, p.get("par")) for c, p in sorted(components_of(plan).items())]
    links = (f'<p>{link(f"/ui/topologies/{q(name)}/errors", "Errors")} | '
             f'{link(f"/ui/topologies/{q(name)}/logs", "Logs")}</p>')
    return (links + summary(name, plan, m)
            + f'<section aria-labelledby="graph-h"><h2 id="graph-h">Component graph</h2>'
            f'<p class="legend">Status words: ok, warm (capacity &ge; {WARM}), busy (capacity &ge; {BUSY}), '
            'backpressure (the component spent time in backpressure); dashed border = backpressure.</p>'
            f'<div id="graph" data-live="1" data-graph="{e(g)}"></div></section>'
            + component_rows(name, plan, m) + edge_table(plan, m)
            + charts_section("Throughput and latency (last 10 minutes)", columns(m.get("throughput")), [
                ("chart-throughput", "Throughput (tuples/s)", TOPOLOGY_RATES),
                ("chart-latency", "Latency (ms, mean over each point's interval)", LATENCY_SERIES)])
            + throughput_table(m) + health_table(m) + stmgr_table(m) + actions_panel(name, comps, ctx))


# what the charts draw: (key of the series, label)
TOPOLOGY_RATES = (("emit_rate", "spouts emit"), ("execute_rate", "bolts execute"))
COMPONENT_RATES = (("emit_rate", "emit"), ("execute_rate", "execute"))
LATENCY_SERIES = (("execute_latency_ms", "execute"), ("complete_latency_ms", "complete"))
SERIES_KEYS = ("ago_secs",) + tuple(k for k, _ in TOPOLOGY_RATES + LATENCY_SERIES)


def columns(points):
    """The topology's ``throughput`` points (a list of dicts, oldest first) as columns, the
    shape of a component's ``series``: ``{"ago_secs": [...], "emit_rate": [...], ...}``
    (a value that is not a number is None)."""
    out = {k: [] for k in SERIES_KEYS}
    for p in points or []:
        if not isinstance(p, dict) or not isinstance(p.get("ago_secs"), (int, float)):
            continue
        for k in SERIES_KEYS:
            v = p.get(k)
            out[k].append(v if isinstance(v, (int, float)) and not isinstance(v, bool) else None)
    return out


def chart_data(series, keys):
    """What one chart draws, as JSON for the script (``data-series``): the ages of the
    points and the columns of ``keys`` the series has, numbers or None; pure JSON (no NaN
    or infinity: JSON.parse refuses them)."""
    series = series if isinstance(series, dict) else {}
    ago = [v if _finite(v) else None for v in series.get("ago_secs") or []]
    cols = [[k, label, [v if _finite(v) else None for v in series.get(k)][:len(ago)]]
            for k, label in keys if isinstance(series.get(k), list)]
    return {"ago_secs": ago, "series": [{"key": k, "label": label, "values": v} for k, label, v in cols]}


def _finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def charts_section(title, series, charts):
    """The charts' boxes, each with its data (``data-series``, ``data-points``: drawn by the
    script at once, no second request); ``data-live``: a live update brings fresh data."""
    boxes = []
    for cid, ctitle, keys in charts:
        d = chart_data(series, keys)
        boxes.append(f'<div id="{e(cid)}" class="chart" data-live="1" data-title="{e(ctitle)}" '
                     f'data-points="{len(d["ago_secs"])}" data-series="{e(json.dumps(d, allow_nan=False))}"></div>')
    return (f'<section aria-labelledby="charts-h"><h2 id="charts-h">{e(title)}</h2>{"".join(boxes)}</section>')


def throughput_table(m):
    rows = [[e(f"-{p.get('ago_secs')}s"), e(num(p.get("emit_rate"))), e(num(p.get("execute_rate"))),
             e(ms(p.get("execute_latency_ms"))), e(ms(p.get("complete_latency_ms")))]
            for p in reversed((m.get("throughput") or [])[-10:]) if isinstance(p, dict)]
    return ('<details><summary>Throughput samples (table)</summary>'
            + table("Recent throughput", ["ago", "spouts emit/s", "bolts execute/s", "execute ms", "complete ms"],
                    rows) + "</details>")


def series_table(series, keys):
    """The newest 10 points of a component's series as a table (the charts without JavaScript)."""
    series = series if isinstance(series, dict) else {}
    ago = series.get("ago_secs") or []
    have = [(k, label) for k, label in keys if isinstance(series.get(k), list)]
    rows = []
    for i in range(len(ago) - 1, max(-1, len(ago) - 11), -1):
        rows.append([e(f"-{ago[i]}s")] + [e(ms(series[k][i]) if k.endswith("_ms") else num(series[k][i]))
                                          if i < len(series[k]) else "-" for k, _ in have])
    return ('<details><summary>Recent samples (table)</summary>'
            + table("Recent samples", ["ago"] + [f"{label} {'ms' if k.endswith('_ms') else '/s'}"
                                                 for k, label in have], rows) + "</details>")


def component(name, comp, doc, ctx):
    v = dict(doc.get("metrics") or {}, kind=doc.get("kind"))
    word, cls = status_of(v)
    spout = doc.get("kind") == "spout"
    summ = [["kind", e(doc.get("kind"))], ["tasks", e(v.get("tasks"))], ["emit/s", e(num(v.get("emit_rate")))],
            ["execute/s", e(num(v.get("execute_rate")))], ["execute ms", e(ms(v.get("execute_latency_ms")))],
            ["complete ms", e(ms(v.get("complete_latency_ms")))], ["capacity", e(num(v.get("capacity"), 3))],
            ["backpressure", e(pct(v.get("backpressure_fraction")))],
            ["status", f'<span class="{cls}">{e(word)}</span>'], ["errors", e(v.get("errors"))]]
    rows = []
    for t, tv in (doc.get("tasks") or {}).items():
        tw, tcls = status_of(dict(tv, kind=doc.get("kind")))
        rows.append([e(t), e(tv.get("container")), e(tv.get("pid")), e(tv.get("emitted")), e(tv.get("executed")),
                     e(tv.get("acked")), e(tv.get("failed")), e(num(tv.get("emit_rate"))),
                     e(num(tv.get("execute_rate"))),
                     e(ms(tv.get("complete_latency_ms" if spout else "execute_latency_ms"))),
                     e(num(tv.get("capacity"), 3)), e(pct(tv.get("backpressure_fraction"))),
                     f'<span class="{tcls}">{e(tw)}</span>', e(num(tv.get("cpu_percent"), 0)),
                     e(human_bytes(tv.get("rss_bytes")))])
    panel = actions_panel(name, [(comp, v.get("tasks"))], ctx) if ctx["actions"] else ""
    return (f'<p>{link(f"/ui/topologies/{q(name)}", name)} | '
            f'{link(f"/ui/topologies/{q(name)}/errors?component={q(comp)}", "Errors")}</p>'
            + table(f"Component {comp}", ["what", "value"], summ, cls="summary")
            + charts_section("Rates and latency (last 10 minutes)", v.get("series"), [
                ("chart-rate", "Rates (tuples/s)", COMPONENT_RATES),
                ("chart-latency", "Latency (ms, mean over each point's interval)", LATENCY_SERIES)])
            + series_table(v.get("series"), COMPONENT_RATES + LATENCY_SERIES)
            + table("Tasks", ["task", "container", "pid", "emitted", "executed", "acked", "failed", "emit/s",
                              "exec/s", "latency ms", "capacity", "backpressure", "status", "cpu %", "rss"], rows)
            + panel)


def errors(name, doc):
    rows = []
    for comp, errs in sorted((doc.get("components") or {}).items()):
        for err in errs:
            t = err.get("time")
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) else "-"
            rows.append([e(when), e(comp), e(err.get("task")), e(err.get("where")), f'<code>{e(err.get("error"))}</code>',
                         f'<details><summary>traceback</summary><pre class="tb">{e(err.get("traceback"))}</pre>'
                         "</details>"])
    return (f'<p>{link(f"/ui/topologies/{q(name)}", name)}</p>'
            + table(f"Errors of {name} (newest first per component)",
                    ["time", "component", "task", "where", "error", "traceback"], rows))


def logs(name, files, chosen=None, text=None, tail=200):
    items = "".join(f"<li>{link(f'/ui/topologies/{q(name)}/logs?file={q(f)}&tail={tail}', f)}</li>"
                    for f in files)
    out = (f'<p>{link(f"/ui/topologies/{q(name)}", name)}</p><nav aria-label="log files"><h2>Files</h2>'
           f'<ul class="files">{items or "<li>none</li>"}</ul></nav>')
    if chosen is not None:
        out += (f'<section aria-labelledby="log-h"><h2 id="log-h">{e(chosen)} (last {e(tail)} lines)</h2>'
                '<p><label><input type="checkbox" id="follow"> Follow (reload every 2 s)</label></p>'
                f'<pre id="log" class="log" data-live="1" tabindex="0">{e(text)}</pre></section>')
    return out
