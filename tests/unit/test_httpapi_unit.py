"""The HTTP API's pure parts: routing, parameter checks, the application over a fake
source (every endpoint's shape and status), and the Prometheus collector over a
fixed metrics document built with the topology master's own MetricsStore."""
from __future__ import annotations

import json
import logging
import os
import threading
import time

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from bittern import httpapi, promexport
from bittern.errors import BitternError
from bittern.httpapi import Api, HttpError, check_limit, check_window, is_loopback, parse_query, route
from bittern.monitor import TopologyGone
from streammgr.metrics import MetricsStore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASKS = {1: "count", 2: "count", 3: "sentence", 4: "split"}
KINDS = {"count": "bolt", "sentence": "spout", "split": "bolt"}


def task_metrics(t, scale):
    return {"__emit-count": 100 * t * scale, "__transfer-count": 100 * t * scale,
            "__execute-count": 50 * t * scale, "__ack-count": 10 * scale, "__fail-count": scale,
            "__error-count": t, "__time-in-backpressure-ms": 500 * scale,
            "__execute-latency-count": 50 * t * scale, "__execute-latency-sum-ms": 5.0 * t * scale,
            "__cpu-percent": 1.5 * t, "__rss-bytes": 1000 * t, "__threads": 2,
            "user": {"seen": 3 * t, "by_key": {"a": 1, "b": 2}, "nothing": None}}


def fixed_doc(name="wc", window="1m"):
    """A metrics document shaped exactly like TopologyMaster.metrics_doc's (views
    from the real MetricsStore, so a renamed key breaks this test)."""
    store = MetricsStore(TASKS, started=0.0)
    for t in TASKS:
        store.update(t, task_metrics(t, 1), pid=100 + t, now=10.0)
        store.update(t, task_metrics(t, 2), pid=100 + t, now=12.0)
    tasks = {}
    for t in TASKS:
        v = store.task_view(t, window, now=12.0)
        v["container"], v["index"] = t % 2, 0
        tasks[t] = v
    comps = store.component_views(tasks)
    for c, v in comps.items():
        v["kind"] = KINDS[c]
    stmgrs = {str(c): {"alive": True, "pid": 200 + c, "backpressure": c == 1, "backpressure_secs": 1.5 * c,
                       "queued_bytes": 4096 * c, "dropped": c, "cpu_percent": 3.0, "rss_bytes": 2 ** 20}
              for c in (0, 1)}
    return {"op": "reply", "topology": name, "phase": "RUNNING", "active": True, "window": window,
            "reliability": "ATLEAST_ONCE", "containers": 2, "uptime_secs": 12.0, "started_at": 1.7e9,
            "backpressure": True, "components": comps, "tasks": {str(t): v for t, v in tasks.items()},
            "stmgrs": stmgrs, "tmaster": {"pid": 99, "cpu_percent": 0.5, "rss_bytes": 2 ** 21},
            "throughput": [], "errors": 2}


def plan(name):
    comps = [{"name": c, "kind": k, "par": sum(1 for v in TASKS.values() if v == c), "inputs": [],
              "outputs": {}, "class": f"m:{c}", "config": {}} for c, k in sorted(KINDS.items())]
    containers = {str(c): {"host": "127.0.0.1", "stmgr": {}, "stmgr_pid": 200 + c,
                           "tasks": [{"task": t, "component": TASKS[t], "index": 0, "pid": 100 + t, "restarts": 0}
                                     for t in TASKS if t % 2 == c]} for c in (0, 1)}
    return {"name": name, "state": "RUNNING", "submitted_at": 1.7e9,
            "logical_plan": {"name": name, "components": comps, "config": {}},
            "config": {"topology.stmgrs": 2},
            "physical_plan": {"tmaster": "tcp://127.0.0.1:1", "containers": containers}}


ERRORS = [{"task": 1, "component": "count", "where": "process", "error": "KeyError: 'x'",
           "traceback": "Traceback (most recent call last):\n...\nKeyError: 'x'\n", "time": 1.7e9},
          {"task": 4, "component": "split", "where": "process", "error": "ValueError: y",
           "traceback": "Traceback ...\nValueError: y\n", "time": 1.7e9 - 1}]


class FakeSource:
    """The LocalSource interface over fixed documents. ``wc`` runs; ``starting``
    has no master yet; ``dead`` lost its supervisor; ``broken`` raises a bug."""

    def __init__(self):
        self.calls = []
        self.inside = 0
        self.overlap = False
        self.delay = 0.0

    def _enter(self, *call):
        self.calls.append(call)
        self.inside += 1
        if self.inside > 1:
            self.overlap = True
        time.sleep(self.delay)
        self.inside -= 1

    def topologies(self):
        self._enter("topologies")
        return [{"name": n, "state": s, "containers": 2, "tasks": 4, "uptime_secs": 12.0,
                 "reliability": "ATLEAST_ONCE", "file": f"/x/{n}.py"}
                for n, s in (("wc", "RUNNING"), ("starting", "STARTING"), ("dead", "DEAD"), ("broken", "RUNNING"))]

    def topology(self, name):
        self._enter("topology", name)
        if name not in ("wc", "starting", "dead", "broken"):
            raise TopologyGone(f"topology {name!r} is not running")
        return plan(name)

    def metrics(self, name, window="1m"):
        self._enter("metrics", name, window)
        if name == "broken":
            raise RuntimeError("a bug in the source")
        if name != "wc":
            raise TopologyGone(f"topology {name!r} is not running")
        return fixed_doc(name, window)

    def errors(self, name, component=None, limit=20):
        self._enter("errors", name, component, limit)
        if name != "wc":
            raise TopologyGone(f"topology {name!r} is not running")
        return [e for e in ERRORS if component is None or e["component"] == component][:limit]


@pytest.fixture
def api():
    return Api(FakeSource())


def get(api, target, accept=None):
    status, ctype, body = api.handle("GET", target, accept)
    if ctype.startswith("application/json"):
        return status, json.loads(body)
    return status, body.decode()


# -- routing and parameters ---------------------------------------------------------------

@pytest.mark.parametrize("path, handler, params", [
    ("/healthz", "healthz", {}),
    ("/metrics", "prometheus", {}),
    ("/api/v1", "index", {}),
    ("/api/v1/", "index", {}),
    ("/api/v1/topologies", "topologies", {}),
    ("/api/v1/topologies/", "topologies", {}),
    ("/api/v1/topologies/wc", "topology", {"name": "wc"}),
    ("/api/v1/topologies/word_count.v2", "topology", {"name": "word_count.v2"}),
    ("/api/v1/topologies/wc/metrics", "metrics", {"name": "wc"}),
    ("/api/v1/topologies/wc/components/split", "component", {"name": "wc", "component": "split"}),
    ("/api/v1/topologies/a%20b/components/c%2Fd", "component", {"name": "a b", "component": "c/d"}),
    ("/api/v1/topologies/wc/errors", "errors", {"name": "wc"}),
])
def test_route(path, handler, params):
    h, p, _ = route(path)
    assert (h, p) == (handler, params)


@pytest.mark.parametrize("path", ["/", "/api", "/api/v2/topologies", "/api/v1/topologies/wc/nothing",
                                  "/api/v1/topologies/wc/components", "/api/v1/topologies/wc/metrics/x",
                                  "/metrics/x", "/healthz/x"])
def test_route_unknown_is_404(path):
    with pytest.raises(HttpError) as e:
        route(path)
    assert e.value.status == 404 and repr(path) in e.value.message


def test_query_parameters():
    assert parse_query("window=10m", ("window",)) == {"window": "10m"}
    assert parse_query("limit=1&limit=5", ("limit",)) == {"limit": "5"}
    with pytest.raises(HttpError) as e:
        parse_query("windw=10m", ("window",))
    assert e.value.status == 400 and "'windw'" in e.value.message and e.value.extra == {"parameter": "windw"}
    assert check_window({}) == "1m"
    for w in ("interval", "1m", "10m", "all"):
        assert check_window({"window": w}) == w
    with pytest.raises(HttpError) as e:
        check_window({"window": "5m"})
    assert e.value.status == 400 and "'window'" in e.value.message and "'5m'" in e.value.message
    assert check_limit({}) == 10 and check_limit({"limit": "3"}) == 3
    for bad in ("0", "-1", "x", "101", "1.5"):
        with pytest.raises(HttpError) as e:
            check_limit({"limit": bad})
        assert e.value.status == 400 and "'limit'" in e.value.message


def test_is_loopback():
    for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"):
        assert is_loopback(h), h
    for h in ("0.0.0.0", "", "::", "10.1.2.3", "192.168.0.1", "no-such-host.invalid"):
        assert not is_loopback(h), h


# -- the application over a fake source -----------------------------------------------------

def test_healthz_and_index(api):
    status, doc = get(api, "/healthz")
    assert status == 200 and doc["status"] == "ok" and doc["uptime_secs"] >= 0
    status, doc = get(api, "/api/v1")
    assert status == 200 and any("/errors" in e for e in doc["endpoints"])
    assert api.source.calls == []  # neither touches the source


def test_topologies(api):
    status, doc = get(api, "/api/v1/topologies")
    assert status == 200
    assert [r["name"] for r in doc["topologies"]] == ["broken", "dead", "starting", "wc"]
    assert set(doc["topologies"][0]) == {"name", "state", "containers", "tasks", "uptime_secs",
                                         "reliability", "file"}


def test_topology(api):
    status, doc = get(api, "/api/v1/topologies/wc")
    assert status == 200
    assert set(doc) >= {"name", "state", "logical_plan", "physical_plan", "config"}
    assert doc["state"] == "RUNNING"
    assert doc["physical_plan"]["containers"]["1"]["tasks"][0]["pid"] == 101
    status, doc = get(api, "/api/v1/topologies/dead")
    assert status == 200 and doc["state"] == "DEAD"  # the listing's verdict wins


def test_metrics_window_is_passed_and_envelope_dropped(api):
    for window in ("interval", "1m", "10m", "all"):
        status, doc = get(api, f"/api/v1/topologies/wc/metrics?window={window}")
        assert status == 200 and doc["window"] == window
        assert api.source.calls[-1] == ("metrics", "wc", window)
    assert "op" not in doc and "req" not in doc
    assert set(doc["components"]) == {"count", "sentence", "split"}
    assert set(doc["tasks"]) == {"1", "2", "3", "4"} and set(doc["stmgrs"]) == {"0", "1"}
    status, doc = get(api, "/api/v1/topologies/wc/metrics")
    assert status == 200 and doc["window"] == "1m"


def test_bad_window_is_400_and_never_reaches_the_source(api):
    for target in ("/api/v1/topologies/wc/metrics?window=5m", "/api/v1/topologies/wc/components/split?window=x",
                   "/metrics?window=forever"):
        api.source.calls.clear()
        status, doc = get(api, target)
        assert status == 400, target
        assert doc["parameter"] == "window" and "'window'" in doc["error"]
        assert not any(c[0] == "metrics" for c in api.source.calls)
    status, doc = get(api, "/api/v1/topologies/wc/metrics?window=")  # empty: the default
    assert status == 200 and doc["window"] == "1m"


def test_component(api):
    status, doc = get(api, "/api/v1/topologies/wc/components/count?window=10m")
    assert status == 200
    assert set(doc) == {"topology", "component", "kind", "window", "definition", "metrics", "tasks"}
    assert (doc["topology"], doc["component"], doc["kind"], doc["window"]) == ("wc", "count", "bolt", "10m")
    assert list(doc["tasks"]) == ["1", "2"]
    assert all(v["component"] == "count" for v in doc["tasks"].values())
    assert doc["metrics"]["tasks"] == 2
    assert doc["metrics"]["executed"] == sum(v["executed"] for v in doc["tasks"].values())
    assert doc["definition"]["par"] == 2


def test_unknown_topology_and_component_are_404(api):
    for target in ("/api/v1/topologies/nope", "/api/v1/topologies/nope/metrics",
                   "/api/v1/topologies/nope/components/split", "/api/v1/topologies/nope/errors"):
        status, doc = get(api, target)
        assert status == 404, target
        assert doc["topology"] == "nope" and "'nope'" in doc["error"]
    status, doc = get(api, "/api/v1/topologies/wc/components/nope")
    assert status == 404 and "'nope'" in doc["error"] and "count, sentence, split" in doc["error"]
    status, doc = get(api, "/api/v1/topologies/wc/errors?component=nope")
    assert status == 404 and "'nope'" in doc["error"]
    status, doc = get(api, "/nowhere")
    assert status == 404 and "/nowhere" in doc["error"]


def test_impossible_names_are_400_and_never_reach_the_source(api):
    for name in ("..%2F..%2Fetc", "a%2Fb", "wc%2F", "wc%0A", "wc%00", "%2E%2E", "-x", "x" * 65, "w%20c"):
        for suffix in ("", "/metrics", "/errors", "/components/count"):
            status, doc = get(api, f"/api/v1/topologies/{name}{suffix}")
            assert status == 400 and doc["field"] == "topology", (name, suffix, doc)
            assert doc["error"].startswith("bad topology name ") and "\n" not in doc["error"].strip()
    for comp in ("a%2Fb", "c%0Ad", "x" * 129):
        status, doc = get(api, f"/api/v1/topologies/wc/components/{comp}")
        assert status == 400 and doc["field"] == "component", (comp, doc)
    status, doc = get(api, "/api/v1/topologies/wc/errors?component=a%2Fb")
    assert status == 400 and doc["parameter"] == "component"
    assert not [c for c in api.source.calls if c[0] != "topologies"]


def test_readme_documents_every_endpoint():
    readme = open(os.path.join(ROOT, "README.md")).read()
    for pattern, _, params in httpapi.ROUTES:
        path = "/" + "/".join(pattern)
        assert f"`GET {path}" in readme, path
        for p in params:
            assert f"{p}=" in readme, (path, p)


def test_existing_topology_without_master_is_503(api):
    status, doc = get(api, "/api/v1/topologies/starting/metrics")
    assert status == 503 and doc["state"] == "STARTING" and "'starting'" in doc["error"]
    status, doc = get(api, "/api/v1/topologies/dead/errors")
    assert status == 503 and doc["state"] == "DEAD"


def test_source_failure_is_503_naming_it(api):
    def silent(name, window="1m"):
        raise BitternError("the topology master at tcp://127.0.0.1:1 did not answer 'metrics' within 5s")
    api.source.metrics = silent
    status, doc = get(api, "/api/v1/topologies/wc/metrics")
    assert status == 503 and "did not answer" in doc["error"]


def test_internal_error_is_500_with_the_traceback_logged(api, caplog):
    with caplog.at_level(logging.ERROR, logger="bittern.httpapi"):
        status, doc = get(api, "/api/v1/topologies/broken/metrics")
    assert status == 500 and "RuntimeError: a bug in the source" in doc["error"]
    rec = [r for r in caplog.records if r.exc_info]
    assert rec and "broken/metrics" in rec[0].getMessage()
    assert "a bug in the source" in caplog.text and "Traceback" in caplog.text


def test_method_not_allowed(api):
    status, _, body = api.handle("POST", "/api/v1/topologies")
    assert status == 405 and "POST" in json.loads(body)["error"]
    status, _, _ = api.handle("HEAD", "/healthz")
    assert status == 200


def test_errors_per_component(api):
    status, doc = get(api, "/api/v1/topologies/wc/errors")
    assert status == 200 and doc["limit"] == 10 and doc["topology"] == "wc"
    assert set(doc["components"]) == {"count", "sentence", "split"}
    assert doc["components"]["sentence"] == []
    err = doc["components"]["count"][0]
    assert set(err) == {"task", "component", "where", "error", "traceback", "time"}
    assert err["traceback"].startswith("Traceback")
    status, doc = get(api, "/api/v1/topologies/wc/errors?component=split&limit=1")
    assert status == 200 and list(doc["components"]) == ["split"] and doc["limit"] == 1
    assert api.source.calls[-1] == ("errors", "wc", "split", 1)
    status, doc = get(api, "/api/v1/topologies/wc/errors?limit=1000")
    assert status == 400 and doc["parameter"] == "limit"


def test_json_has_no_infinities(api):
    doc = fixed_doc()
    doc["tasks"]["1"]["window_secs"] = float("inf")
    api.source.metrics = lambda name, window="1m": doc
    status, _, body = api.handle("GET", "/api/v1/topologies/wc/metrics")
    assert status == 200 and json.loads(body)["tasks"]["1"]["window_secs"] is None


def test_source_calls_are_serialized(api):
    """LocalSource's zmq sockets are not thread-safe: the app never enters the source twice at once."""
    api.source.delay = 0.005
    targets = ["/api/v1/topologies", "/api/v1/topologies/wc", "/api/v1/topologies/wc/metrics",
               "/api/v1/topologies/wc/components/split", "/api/v1/topologies/wc/errors", "/metrics"]
    results = []

    def worker(t):
        results.append(api.handle("GET", t)[0])
    threads = [threading.Thread(target=worker, args=(t,)) for t in targets * 4]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [200] * len(threads)
    assert not api.source.overlap


# -- Prometheus -----------------------------------------------------------------------------

def samples(text):
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value, fam.type))
    return out


def one(found, name, **labels):
    hits = [(v, t) for lab, v, t in found.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, found.get(name))
    return hits[0]


def test_prometheus_from_a_fixed_document():
    rows = [{"name": "wc", "state": "RUNNING", "reliability": "ATLEAST_ONCE"},
            {"name": "quiet", "state": "RUNNING", "reliability": "ATMOST_ONCE"}]
    doc = fixed_doc()
    ctype, body = promexport.prometheus_text(rows, {"wc": doc, "quiet": None}, "1m")
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype
    found = samples(body.decode())
    # every task of every component, with its labels and the document's values
    for t, comp in TASKS.items():
        view = doc["tasks"][str(t)]
        lab = {"topology": "wc", "component": comp, "task": str(t), "container": str(t % 2)}
        assert one(found, "bittern_tuples_emitted_total", **lab) == (view["emitted"], "counter")
        assert one(found, "bittern_tuples_executed_total", **lab) == (view["executed"], "counter")
        assert one(found, "bittern_errors_total", **lab) == (t, "counter")
        assert one(found, "bittern_backpressure_seconds_total", **lab)[0] == pytest.approx(1.0)
        assert one(found, "bittern_execute_rate", **lab) == (pytest.approx(view["execute_rate"]), "gauge")
        assert one(found, "bittern_execute_latency_ms", **lab)[0] == pytest.approx(0.1)
        assert one(found, "bittern_capacity", **lab)[0] == pytest.approx(view["capacity"])
        assert one(found, "bittern_backpressure", **lab)[0] == pytest.approx(0.25)  # 500 ms in 2 s
        assert one(found, "bittern_process_cpu_percent", **lab)[0] == pytest.approx(1.5 * t)
        assert one(found, "bittern_process_rss_bytes", **lab)[0] == 1000 * t
        assert one(found, "bittern_user_metric", metric="seen", key="", **lab)[0] == 3 * t
        assert one(found, "bittern_user_metric", metric="by_key", key="b", **lab)[0] == 2
        assert not any(s[0].get("metric") == "nothing" for s in found["bittern_user_metric"])
    assert one(found, "bittern_execute_rate", task="1")[0] == pytest.approx(25.0)  # 50 more in 2 s
    assert one(found, "bittern_topology_up", topology="wc")[0] == 1
    assert one(found, "bittern_topology_up", topology="quiet")[0] == 0
    assert one(found, "bittern_topology_info", topology="quiet", state="RUNNING")[0] == 1
    assert one(found, "bittern_topology_backpressure", topology="wc")[0] == 1
    assert one(found, "bittern_stmgr_queued_bytes", topology="wc", container="1")[0] == 4096
    assert one(found, "bittern_stmgr_dropped_total", topology="wc", container="1") == (1, "counter")
    assert one(found, "bittern_tmaster_process_rss_bytes", topology="wc")[0] == 2 ** 21
    for c in ("0", "1"):  # the fixed document predates the security counters: they are 0
        assert one(found, "bittern_stmgr_denied_total", topology="wc", container=c) == (0, "counter")
        assert one(found, "bittern_stmgr_malformed_total", topology="wc", container=c) == (0, "counter")
    assert one(found, "bittern_tmaster_denied_total", topology="wc") == (0, "counter")
    assert one(found, "bittern_tmaster_malformed_total", topology="wc") == (0, "counter")
    assert not any(lab.get("topology") == "quiet" for lab, _, _ in found["bittern_tmaster_denied_total"])
    assert not any(lab.get("topology") == "quiet" for lab, _, _ in found["bittern_tuples_emitted_total"])


def test_prometheus_endpoint_and_openmetrics(api):
    status, ctype, body = api.handle("GET", "/metrics?window=interval")
    assert status == 200 and ctype.startswith("text/plain")
    found = samples(body.decode())
    assert api.source.calls.count(("metrics", "wc", "interval")) == 1
    assert not any(c[0] == "metrics" and c[1] in ("starting", "dead") for c in api.source.calls)
    assert one(found, "bittern_topology_up", topology="wc")[0] == 1
    assert one(found, "bittern_topology_up", topology="broken")[0] == 0  # its failure skips it only
    assert {lab["task"] for lab, _, _ in found["bittern_tuples_emitted_total"]} == {"1", "2", "3", "4"}
    status, ctype, body = api.handle("GET", "/metrics", "application/openmetrics-text; version=1.0.0")
    assert status == 200 and ctype.startswith("application/openmetrics-text")
    fams = {f.name: f for f in parse_openmetrics(body.decode())}
    assert fams["bittern_tuples_emitted"].type == "counter"


def test_prometheus_missing_is_501_and_the_rest_works(api, monkeypatch):
    monkeypatch.setattr(promexport, "prometheus_client", None)
    status, doc = get(api, "/metrics")
    assert status == 501 and "pip install bittern[metrics]" in doc["error"]
    assert get(api, "/api/v1/topologies/wc/metrics")[0] == 200
    assert get(api, "/healthz")[0] == 200


def test_prometheus_exports_denied_and_malformed_counters():
    """The stream managers' and the topology master's refusals (issue 18), per container."""
    doc = fixed_doc()
    doc["stmgrs"]["0"].update(denied=3, malformed=7)
    doc["stmgrs"]["1"].update(denied=0, malformed=2)
    doc["tmaster"].update(denied=5, malformed=11)
    rows = [{"name": "wc", "state": "RUNNING", "reliability": "ATLEAST_ONCE"}]
    _, body = promexport.prometheus_text(rows, {"wc": doc}, "1m")
    found = samples(body.decode())
    assert one(found, "bittern_stmgr_denied_total", topology="wc", container="0") == (3, "counter")
    assert one(found, "bittern_stmgr_denied_total", topology="wc", container="1") == (0, "counter")
    assert one(found, "bittern_stmgr_malformed_total", topology="wc", container="0") == (7, "counter")
    assert one(found, "bittern_stmgr_malformed_total", topology="wc", container="1") == (2, "counter")
    assert one(found, "bittern_tmaster_denied_total", topology="wc") == (5, "counter")
    assert one(found, "bittern_tmaster_malformed_total", topology="wc") == (11, "counter")
    _, body = promexport.prometheus_text(rows, {"wc": doc}, "1m", accept="application/openmetrics-text; version=1.0.0")
    fams = {f.name: f for f in parse_openmetrics(body.decode())}
    for name in ("bittern_stmgr_denied", "bittern_stmgr_malformed", "bittern_tmaster_denied",
                 "bittern_tmaster_malformed"):
        assert fams[name].type == "counter" and fams[name].documentation, name


# -- the server: the token before anything else ---------------------------------------------

@pytest.fixture
def served():
    """make_server over the fake source on a real socket, with a token; yields (url, token)."""
    from bittern.httpapi import make_server
    made = []

    def start(token="t0ken", insecure=False):
        server = make_server(FakeSource(), "127.0.0.1", 0, token=token, insecure=insecure, idle_secs=2)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        made.append((server, thread))
        return server.url.rstrip("/")
    yield start
    for server, thread in made:
        server.shutdown()
        server.server_close()
        thread.join(5)
        assert not thread.is_alive()


def fetch(url, token=None):
    import urllib.error
    import urllib.request
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, e.read()


def test_server_needs_the_token_except_on_healthz(served):
    url = served()
    assert fetch(url + "/healthz")[0] == 200
    for path in ("/api/v1/topologies", "/api/v1/topologies/wc/metrics", "/metrics", "/nowhere"):
        status, headers, body = fetch(url + path)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer"), path
        assert json.loads(body)["error"].startswith("missing or wrong API token")
        assert fetch(url + path, token="wrong")[0] == 401
    assert fetch(url + "/api/v1/topologies", token="t0ken")[0] == 200
    assert fetch(url + "/metrics", token="t0ken")[0] == 200


def test_server_insecure_serves_without_a_token_and_is_never_the_default(served):
    url = served(token=None, insecure=True)
    assert fetch(url + "/api/v1/topologies")[0] == 200
    from bittern.httpapi import make_server
    with pytest.raises(ValueError, match="needs a token"):
        make_server(FakeSource(), "127.0.0.1", 0)


# -- bittern/httpsafe.py's pure checks ------------------------------------------------------

def test_content_length_and_json_checks():
    from email.message import Message

    from bittern.httpsafe import Reject, check_name, content_length, parse_json

    def length(*values, limit=100, required=False, te=None):
        msg = Message()
        for v in values:
            msg["Content-Length"] = v
        if te:
            msg["Transfer-Encoding"] = te
        try:
            return content_length(msg, limit, required)
        except Reject as r:
            return r.status, r.message

    assert length() == 0 and length("0") == 0 and length(" 100 ") == 100 and length("7", "7") == 7
    assert length(required=True) == (411, "this request needs a JSON body with a Content-Length header")
    assert length("-1") == (400, "Content-Length is negative: -1")
    for bad in ("abc", "1e3", "+5", "0x10", "", "5 5", "١٢"):  # (Arabic-Indic digits: int() takes them)
        assert length(bad)[0] == 400, bad
    assert length("101") == (413, "request body of 101 bytes is over the limit of 100")
    assert length("9" * 5000)[0] == 413
    assert length("1", "2")[0] == 400 and length("5", te="chunked")[0] == 411
    assert parse_json(b'{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    assert json.dumps(parse_json(b"[" * 64 + b"]" * 64)) == "[" * 64 + "]" * 64  # 64 levels: the limit
    for data, words in ((b"[" * 65 + b"]" * 65, "nests deeper than 64 levels"),
                        (b"[" * 10 ** 6, "nests deeper than 64 levels"), (b"", "is not JSON"),
                        (b"\xff", "is not JSON"), (b"{'a': 1}", "is not JSON")):
        with pytest.raises(Reject) as ei:
            parse_json(data)
        assert ei.value.status == 400 and words in ei.value.message and "\n" not in ei.value.message
    assert check_name("word_count") == "word_count"
    for bad in ("word_count/", "word_count\n", "", "-x", "x" * 65, None, 5):
        with pytest.raises(Reject) as ei:
            check_name(bad)
        assert ei.value.extra == {"field": "topology"} and ei.value.message.startswith("bad topology name ")
