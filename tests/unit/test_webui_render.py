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
