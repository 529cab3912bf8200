"""The web UI's Python side without a server: escaping of every value from the API,
who sees data (Bearer, Basic, nothing), static files, query checks, and the local
actions' body checks."""
from __future__ import annotations

import base64
import json

import pytest

from bittern.webui import CSP, WebUI, authorized, basic_password, render, safe_next, tail_of
from bittern.webui.actions import ActionError, check_rebalance, route

EVIL = '<script>alert("x")</script>&\''
PLAN = {"state": "RUNNING", "logical_plan": {"components": [
    {"name": "spout", "kind": "spout", "par": 1, "inputs": []},
    {"name": EVIL, "kind": "bolt", "par": 2,
     "inputs": [{"component": "spout", "stream": "default", "grouping": {"type": "fields", "fields": [EVIL]}}]}]}}
METRICS = {"active": True, "phase": "RUNNING", "components": {
    "spout": {"kind": "spout", "emit_rate": 10.0, "tasks": 1},
    EVIL: {"kind": "bolt", "capacity": 0.9, "backpressure_fraction": 0.2, "tasks": 2}},
    "tasks": {}, "throughput": [], "healthmgr": {"decisions": [{"id": 1, "diagnosis": {"kind": EVIL, "component": EVIL}, "outcome": EVIL,
                                             "action": {"kind": "scale", "targets": {EVIL: [2, 3]}}}]}}
ERRORS = {"components": {EVIL: [{"task": 2, "where": "process", "error": EVIL, "traceback": "Traceback\n" + EVIL,
                                 "time": 1700000000}]}}


def api(target):
    if target == "/api/v1/topologies":
        return 200, json.dumps({"topologies": [{"name": "wc", "state": EVIL}]}).encode()
    if target.startswith("/api/v1/topologies/wc/metrics"):
        return 200, json.dumps(METRICS).encode()
    if target.startswith("/api/v1/topologies/wc/errors"):
        return 200, json.dumps(ERRORS).encode()
    if target == "/api/v1/topologies/wc":
        return 200, json.dumps(PLAN).encode()
    return 404, json.dumps({"error": f"no topology named {EVIL}"}).encode()


@pytest.fixture
def ui():
    return WebUI(api, lambda: "s3cret", actions=True)


def get(ui, path, auth="Bearer s3cret"):
    return ui.handle("GET", path, {"Authorization": auth} if auth else {})


@pytest.mark.parametrize("path", ["/ui/", "/ui/topologies/wc", "/ui/topologies/wc/errors", "/ui/topologies/gone"])
def test_every_api_value_is_escaped(ui, path):
    status, ctype, body, headers = get(ui, path)
    text = body.decode()
    assert ctype.startswith("text/html") and "<script>alert" not in text and "&lt;script&gt;alert" in text
    assert dict(headers)["Content-Security-Policy"] == CSP and "script-src 'self'" in CSP
    assert dict(headers)["X-Content-Type-Options"] == "nosniff"
    assert "<script>" not in text.replace('<script src="/ui/static/', "")  # no inline script at all
    assert status == (404 if path.endswith("gone") else 200)


def test_topology_page_tables_and_non_colour_signal(ui):
    text = get(ui, "/ui/topologies/wc")[2].decode()
    assert '<th scope="col">status</th>' in text and ">backpressure</span>" in text  # a word, not a colour
    assert text.count('<th scope="row">') >= 2 + 2 + 9  # components, edges, summary rows
    graph = render.graph_data(PLAN, METRICS)
    assert [n["status"] for n in graph["nodes"]] == ["backpressure", "ok"]
    assert graph["edges"] == [{"from": "spout", "to": EVIL, "stream": "default", "grouping": f"fields({EVIL})",
                               "rate": 10.0}]


def test_without_the_token_no_data(ui):
    for auth in (None, "Bearer wrong", "Basic " + base64.b64encode(b"me:wrong").decode(), "s3cret"):
        status, _, body, headers = get(ui, "/ui/topologies/wc", auth)
        assert status == 401 and "spout" not in body.decode() and "Sign in to see" in body.decode()
        assert dict(headers)["WWW-Authenticate"].startswith("Bearer")
    assert get(ui, "/ui/topologies/wc", "Basic " + base64.b64encode(b"me:s3cret").decode())[0] == 200
    status, _, _, headers = get(ui, "/ui/login?next=/ui/topologies/wc", None)
    assert status == 401 and dict(headers)["WWW-Authenticate"].startswith("Basic")
    status, _, _, headers = get(ui, "/ui/login?next=//evil.example/x")
    assert status == 303 and dict(headers)["Location"] == "/ui/"


def test_auth_helpers():
    assert basic_password("Basic " + base64.b64encode(b"u:p:q").decode()) == "p:q"
    assert basic_password("Basic !!!") is None and basic_password("Bearer x") is None
    assert authorized(None, None, insecure=True) and not authorized("Bearer ", "")
    assert safe_next("/ui/topologies/x") == "/ui/topologies/x"
    assert safe_next("https://evil") == safe_next("/ui/\\evil") == safe_next("/ui/a\r\nb") == "/ui/"


def test_static_files_only_from_the_list(ui):
    status, ctype, body, _ = get(ui, "/ui/static/app.js", None)
    assert status == 200 and ctype.startswith("text/javascript") and b"sessionStorage" in body
    assert get(ui, "/ui/static/vendor/dagre.min.js", None)[0] == 200
    for bad in ("/ui/static/../__init__.py", "/ui/static/%2e%2e/render.py", "/ui/static/nope.js", "/ui/static/"):
        assert get(ui, bad, None)[0] == 404, bad


def test_bad_requests_name_the_thing(ui):
    status, _, body, _ = get(ui, "/ui/topologies/wc?window=5m")
    assert status == 400 and "unknown query parameter &#x27;window&#x27;" in body.decode()
    status, _, body, _ = get(ui, "/ui/topologies/wc%2F")
    assert status == 400 and "bad topology name" in body.decode()
    assert ui.handle("POST", "/ui/", {})[0] == 405
    assert ui.handle("GET", "/api/v1/topologies", {}) is None  # not the UI's
    assert get(ui, "/ui/cluster")[0] == 404  # local mode


def test_fragment_is_the_main_content_only(ui):
    text = get(ui, "/ui/topologies/wc?fragment=1")[2].decode()
    assert text.startswith("<h1>Topology wc</h1>") and "<html" not in text


def test_tail_of(tmp_path):
    p = tmp_path / "x.log"
    p.write_text("".join(f"line {i}\n" for i in range(100000)))
    assert tail_of(str(p), 3).splitlines() == ["line 99997", "line 99998", "line 99999"]


def test_action_routes_and_bodies():
    assert route("POST", "/api/v1/topologies/wc/deactivate") == ("deactivate", "wc")
    assert route("DELETE", "/api/v1/topologies/wc") == ("kill", "wc")
    assert route("GET", "/api/v1/topologies/wc") is None and route("POST", "/api/v1/topologies/wc/x") is None
    assert check_rebalance(b'{"parallelism": {"sink": 3}}') == ({"sink": 3}, None)
    for body, words in ((b"[1]", "JSON object"), (b'{"parallelism": {"sink": 0}}', "integer >= 1"),
                        (b'{"parallelism": {"a/b": 1}}', "bad component name"), (b"{}", "nothing to change"),
                        (b'{"containers": true}', "containers must be")):
        with pytest.raises(ActionError, match=words) as e:
            check_rebalance(body)
        assert e.value.status == 400


# -- the charts' series, embedded in the page (no second request) ------------------------------
THROUGHPUT = [{"ago_secs": 4.0, "emit_rate": 10.0, "execute_rate": 20.0, "execute_latency_ms": 0.5,
               "complete_latency_ms": None},
              {"ago_secs": 2.0, "emit_rate": 12.0, "execute_rate": float("nan"), "execute_latency_ms": None,
               "complete_latency_ms": 3.25},
              {"emit_rate": 1.0}]  # no age: not a point


def chart_attrs(text, cid):
    import html as _html
    import re as _re
    m = _re.search(f'<div id="{cid}" class="chart" data-live="1" data-title="([^"]*)" data-points="(\\d+)" '
                   'data-series="([^"]*)"></div>', text)
    assert m, cid
    return _html.unescape(m.group(1)), int(m.group(2)), json.loads(_html.unescape(m.group(3)))


def test_topology_charts_come_with_the_page():
    text = render.topology("wc", PLAN, dict(METRICS, throughput=THROUGHPUT), {"actions": False})
    title, n, d = chart_attrs(text, "chart-throughput")
    assert n == 2 and d == {"ago_secs": [4.0, 2.0], "series": [
        {"key": "emit_rate", "label": "spouts emit", "values": [10.0, 12.0]},
        {"key": "execute_rate", "label": "bolts execute", "values": [20.0, None]}]}  # NaN: no value
    _, n, d = chart_attrs(text, "chart-latency")
    assert n == 2 and [s["values"] for s in d["series"]] == [[0.5, None], [None, 3.25]]
    assert "(last 10 minutes)" in text
    # without JavaScript: the newest samples as a table, latency included
    rows = text[text.index('id="t-recent-throughput"'):]
    assert rows.index("-2.0s") < rows.index("-4.0s") and "3.25" in rows and "0.500" in rows


def test_component_charts_from_its_series():
    series = {"ago_secs": [3.0, 1.0], "emit_rate": [1.5, 2.5], "execute_rate": [3.0, None],
              "execute_latency_ms": [0.25, 0.5]}
    doc = {"kind": "bolt", "metrics": {"tasks": 2, "series": series}, "tasks": {}}
    text = render.component("wc", EVIL, doc, {"actions": False})
    _, n, d = chart_attrs(text, "chart-rate")
    assert n == 2 and [(s["key"], s["values"]) for s in d["series"]] == [("emit_rate", [1.5, 2.5]),
                                                                        ("execute_rate", [3.0, None])]
    _, _, d = chart_attrs(text, "chart-latency")
    assert [s["key"] for s in d["series"]] == ["execute_latency_ms"]  # a bolt has no complete latency
    assert "since this page opened" not in text and "-1.0s" in text
    # a component without series yet (an older topology master): empty charts, no error
    _, n, d = chart_attrs(render.component("wc", "x", {"kind": "spout", "metrics": {}}, {"actions": False}),
                          "chart-rate")
    assert n == 0 and d == {"ago_secs": [], "series": []}


def test_api_reader_answers_documents_in_process():
    from bittern.httpapi import Api
    from bittern.webui import api_reader

    class Source:  # what bittern serve's LocalSource answers, for the pages read here
        def topologies(self):
            return [{"name": "wc", "state": "RUNNING"}]

        def topology(self, name):
            return PLAN

        def metrics(self, name, window):
            return dict(METRICS, window=window, uptime_secs=float("inf"))

    read = api_reader(Api(Source()))
    status, doc = read("/api/v1/topologies/wc/metrics?window=10m")
    assert status == 200 and doc["window"] == "10m" and doc["uptime_secs"] is None  # as the JSON API
    assert read("/api/v1/topologies/wc/metrics?window=5m")[0] == 400
    status, doc = read("/api/v1/topologies/wc/components/nope")
    assert status == 404 and "has no component 'nope'" in doc["error"]
    ui = WebUI(read, lambda: "s3cret")
    status, _, body, _ = get(ui, "/ui/topologies/wc")
    assert status == 200 and "&lt;script&gt;alert" in body.decode() and 'id="chart-throughput"' in body.decode()


def test_a_standby_nimbus_sends_actions_to_the_leader():
    """A standby answers actions with 307, which a page's fetch can't follow with the token:
    its pages show no buttons but a link to the same page on the leader."""
    ctx = {"mode": "cluster", "signed_in": True, "actions": True, "version": "x"}
    leading = render.actions_panel("wc", [("sink", 2)], dict(ctx, standby=None))
    assert 'data-action="kill"' in leading and 'class="rebalance"' in leading
    text = render.actions_panel("w c", [("sink", 2)], dict(ctx, standby="http://10.0.0.7:8080/"))
    assert "data-action" not in text and "<form" not in text and "standby" in text
    assert '<a href="http://10.0.0.7:8080/ui/topologies/w%20c">' in text
    for unknown in ("", "javascript:alert(1)"):  # no leader, or not a web address: no link
        text = render.actions_panel("wc", [("sink", 2)], dict(ctx, standby=unknown))
        assert "<a " not in text and "no leader is known" in text and "data-action" not in text
    ui = WebUI(api, lambda: "tok", mode="cluster", actions=True, standby=lambda: "http://10.0.0.7:8080")
    status, _, body, _ = ui.handle("GET", "/ui/topologies/wc", {"Authorization": "Bearer tok"})
    assert status == 200 and b"open this page on the leader" in body and b'data-action="' not in body
    assert b"standby nimbus" in body  # (the footer: not "actions enabled")
