"""Cluster mode of the CLI against a fake nimbus: a real ``http.server`` in a thread
that checks the token, answers canned JSON per path (or serves bittern.httpapi's
read API over a source, as nimbus does), can send writes on to a leader with 307,
and can be stopped to test failover."""
from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from bittern import auth
from bittern.archive import digest_of, extract
from bittern.cli import daemons
from bittern.cli.main import main as cli_main
from bittern.cluster_client import (ClusterClient, ClusterError, NimbusUnavailable, NoSuchTopology,
                                    RequestRefused, TokenRefused, parse_urls)
from bittern.errors import BitternError, ConfigError
from bittern.httpapi import Api, finite
from bittern.monitor import LocalSource, RemoteSource, TopologyGone
from bittern.state import LocalStateManager
from streammgr.metrics import MetricsStore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLOW = os.path.join(ROOT, "tests", "topologies", "flow.py")
TOKEN = "s3cret-token"


class FakeNimbus:
    """One nimbus. ``canned[(method, path)]`` is ``(status, doc)`` (doc: JSON-able, a
    str sent as text/plain, or a callable taking the request and returning either);
    the path may include the query string, which is tried first. GETs not canned go
    to ``Api(source)`` when a source is given. With ``leader`` set, writes get 307."""

    def __init__(self, token=TOKEN, source=None, leader=None):
        self.token = token
        self.api = Api(source) if source is not None else None
        self.leader = leader
        self.canned = {}
        self.requests = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.fake = self
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        self.stopped = False

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        if not self.stopped:
            self.stopped = True
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(5)

    def answer(self, req):
        if not auth.check(req["headers"].get("Authorization"), self.token):
            return 401, {"error": "missing or wrong API token"}
        if self.leader is not None and req["method"] != "GET":
            return 307, {"leader": self.leader}
        split = urlsplit(req["path"])
        for key in ((req["method"], req["path"]), (req["method"], split.path)):
            if key in self.canned:
                status, doc = self.canned[key]
                return status, doc(req) if callable(doc) else doc
        if req["method"] == "GET" and self.api is not None:
            status, ctype, body = self.api.handle("GET", req["path"])
            return status, json.loads(body)
        return 404, {"error": f"no such endpoint: {split.path!r}"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _do(self):
        fake = self.server.fake
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        req = {"method": self.command, "path": self.path, "headers": dict(self.headers),
               "body": json.loads(body) if body else None}
        fake.requests.append(req)
        status, doc = fake.answer(req)
        if isinstance(doc, str):
            data, ctype = doc.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(doc).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _do

    def log_message(self, *args):
        pass


@pytest.fixture
def nimbus():
    fakes = []

    def make(**kw):
        fakes.append(FakeNimbus(**kw))
        return fakes[-1]

    yield make
    for f in fakes:
        f.stop()


def dead_url():
    """A URL where nothing listens (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# -- the client -------------------------------------------------------------------------

def test_token_sent_and_json_returned(nimbus):
    n = nimbus()
    n.canned[("GET", "/api/v1/cluster")] = (200, {"leader": n.url, "nimbuses": [], "supervisors": []})
    client = ClusterClient(n.url, TOKEN)
    assert client.get("/api/v1/cluster")["leader"] == n.url
    assert n.requests[-1]["headers"]["Authorization"] == f"Bearer {TOKEN}"


def test_wrong_token_is_a_clear_error(nimbus):
    n = nimbus()
    with pytest.raises(TokenRefused) as e:
        ClusterClient(n.url, "wrong").get("/api/v1/topologies")
    assert str(e.value) == (f"nimbus at {n.url} refused the token (set BITTERN_TOKEN or token_file "
                            "in cluster.toml)")


def test_failover_to_the_next_url_and_stick_to_it(nimbus):
    a, b = nimbus(), nimbus()
    for n in (a, b):
        n.canned[("GET", "/api/v1/topologies")] = (200, {"topologies": [{"name": n.url}]})
    a.stop()
    client = ClusterClient([dead_url(), a.url, b.url], TOKEN)
    assert client.get("/api/v1/topologies")["topologies"] == [{"name": b.url}]
    assert client.url == b.url
    client.get("/api/v1/topologies")
    assert len(b.requests) == 2 and client.urls.index(client.url) == 2
    b.stop()
    with pytest.raises(NimbusUnavailable) as e:
        client.get("/api/v1/topologies")
    msg = str(e.value)
    assert msg.startswith("no nimbus answers: ") and "\n" not in msg
    assert f"{a.url} (connection refused)" in msg and f"{b.url} (connection refused)" in msg


def test_silent_nimbus_reads_fail_over_writes_do_not(nimbus):
    n = nimbus()
    n.canned[("GET", "/api/v1/topologies")] = (200, {"topologies": []})
    n.canned[("POST", "/api/v1/topologies/x/activate")] = (200, {"name": "x", "state": "RUNNING"})
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        mute = f"http://127.0.0.1:{silent.getsockname()[1]}"
        # (the fake nimbus answers from a thread of this process: 2 s leave it room on a
        # loaded machine, where 0.3 s might not)
        client = ClusterClient([mute, n.url], TOKEN, timeout=2.0)
        assert client.get("/api/v1/topologies") == {"topologies": []}
        client = ClusterClient([mute, n.url], TOKEN, timeout=2.0)
        with pytest.raises(ClusterError) as e:  # it may have been carried out: never sent twice
            client.post("/api/v1/topologies/x/activate", topology="x")
    assert f"nimbus at {mute} did not answer within 2s" in str(e.value)
    assert not [r for r in n.requests if r["method"] == "POST"]


def test_standby_sends_writes_to_the_leader(nimbus):
    leader = nimbus()
    leader.canned[("DELETE", "/api/v1/topologies/wc")] = (200, {"name": "wc", "killed": True})
    standby = nimbus(leader=leader.url)
    standby.canned[("GET", "/api/v1/topologies")] = (200, {"topologies": []})
    client = ClusterClient(standby.url, TOKEN)
    assert client.get("/api/v1/topologies") == {"topologies": []}  # a standby answers reads itself
    assert client.delete("/api/v1/topologies/wc", topology="wc") == {"name": "wc", "killed": True}
    assert client.url == leader.url
    assert [r["method"] for r in leader.requests] == ["DELETE"]
    assert leader.requests[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"


def test_redirects_are_followed_once(nimbus):
    a = nimbus()
    b = nimbus(leader=a.url)
    a.leader = b.url  # each names the other: leadership is moving
    with pytest.raises(ClusterError, match="leadership is changing"):
        ClusterClient(a.url, TOKEN).post("/api/v1/topologies/x/activate", topology="x")
    assert len(a.requests) + len(b.requests) == 2
    c = nimbus(leader="")
    with pytest.raises(ClusterError, match="standby and knows no leader yet"):
        ClusterClient(c.url, TOKEN).post("/api/v1/topologies/x/activate", topology="x")


def test_error_answers(nimbus):
    n = nimbus()
    n.canned[("POST", "/api/v1/topologies/gone/activate")] = (404, {"error": "no topology named 'gone'"})
    n.canned[("POST", "/api/v1/topologies")] = (409, {"error": "a topology named 'wc' is already running"})
    n.canned[("POST", "/api/v1/topologies/bad/activate")] = (400, {"error": "bad input: name"})
    n.canned[("GET", "/api/v1/topologies/wc/metrics")] = (503, {"error": "topology 'wc' is STARTING: ..."})
    n.canned[("GET", "/api/v1/boom")] = (500, {"error": "internal error: KeyError: 'x'"})
    n.canned[("GET", "/api/v1/html")] = (200, "<html>not nimbus</html>")
    client = ClusterClient(n.url, TOKEN)
    with pytest.raises(NoSuchTopology, match=r"^no topology named 'gone' \(nimbus at http"):
        client.post("/api/v1/topologies/gone/activate", topology="gone")
    with pytest.raises(RequestRefused, match="^a topology named 'wc' is already running$") as e:
        client.post("/api/v1/topologies", {}, topology="wc")
    assert e.value.status == 409
    with pytest.raises(RequestRefused, match="^bad input: name$"):
        client.post("/api/v1/topologies/bad/activate", topology="bad")
    with pytest.raises(ClusterError, match=r"^topology 'wc' is STARTING"):
        client.get("/api/v1/topologies/wc/metrics", topology="wc")
    with pytest.raises(ClusterError, match=rf"^nimbus at {n.url} answered 500 to GET /api/v1/boom: internal"):
        client.get("/api/v1/boom")
    with pytest.raises(ClusterError, match="something other than JSON"):
        client.get("/api/v1/html")
    assert client.get("/api/v1/html", text=True) == "<html>not nimbus</html>"
    with pytest.raises(ClusterError, match="answered 404 to GET /api/v1/nope: no such endpoint"):
        client.get("/api/v1/nope")


def test_startup_failure_keeps_the_traceback(nimbus):
    n = nimbus()
    n.canned[("POST", "/api/v1/topologies")] = (422, {"error": "component 'split' failed to initialize: "
                                                              "ZeroDivisionError: division by zero",
                                                     "traceback": "Traceback (most recent call last):\n"
                                                                  "ZeroDivisionError: division by zero\n"})
    with pytest.raises(RequestRefused) as e:
        ClusterClient(n.url, TOKEN).post("/api/v1/topologies", {}, topology="wc")
    assert str(e.value).startswith("component 'split' failed to initialize")
    assert e.value.user_traceback.startswith("Traceback")


def test_parse_urls():
    assert parse_urls(" http://a:6627/, b:7000 ,,http://a:6627") == ["http://a:6627", "http://b:7000"]
    for bad in ("", " , ", "ftp://a", "http://", "http://a:x"):
        with pytest.raises(ConfigError):
            parse_urls(bad)


# -- RemoteSource returns what LocalSource returns ----------------------------------------

TASK_COMPONENT = {t: ("words" if t <= 2 else "split" if t <= 10 else "count") for t in range(1, 12)}


class FixedSource:
    """LocalSource's interface over fixed documents in the topology master's order
    (which differs from the API's sorted keys: components by first task, tasks and
    stream managers by number)."""

    def topologies(self):
        return [{"name": "wc", "state": "RUNNING", "containers": 3, "tasks": 11, "uptime_secs": 12.5,
                 "reliability": "ATLEAST_ONCE", "file": "/x/wc.py"}]

    def topology(self, name):
        if name != "wc":
            raise TopologyGone(f"topology {name!r} is not running")
        comps = [{"name": c, "kind": "spout" if c == "words" else "bolt", "par": 1, "inputs": [], "outputs": {},
                  "class": f"m:{c}", "config": {}} for c in ("words", "split", "count")]
        return {"name": "wc", "state": "RUNNING", "submitted_at": 1.7e9, "config": {"topology.stmgrs": 3},
                "logical_plan": {"name": "wc", "components": comps, "config": {}, "source": {}},
                "physical_plan": {"tmaster": "tcp://10.0.0.1:6701", "containers": {
                    "0": {"host": "10.0.0.1", "stmgr": {"tcp": "tcp://10.0.0.1:6700"}, "stmgr_pid": 7,
                          "tasks": [{"task": 1, "component": "words", "index": 0, "pid": 101, "restarts": 0}]}}}}

    def metrics(self, name, window="1m"):
        self.topology(name)
        store = MetricsStore(TASK_COMPONENT, started=0.0)  # the topology master's own views
        for t in TASK_COMPONENT:
            for now in (10.0, 12.0):
                store.update(t, {"__emit-count": int(10 * t * now), "__execute-count": int(t * now),
                                 "__ack-count": t, "__cpu-percent": 1.5, "__rss-bytes": 2 ** 20}, pid=100 + t,
                             now=now)
        tasks = {}
        for t in TASK_COMPONENT:
            tasks[t] = dict(store.task_view(t, window, now=12.0), container=t % 3, index=0)
        comps = store.component_views(tasks)
        for c, v in comps.items():
            v["kind"] = "spout" if c == "words" else "bolt"
        tasks = {str(t): v for t, v in tasks.items()}
        stmgrs = {str(c): {"alive": True, "pid": 200 + c, "backpressure": False, "queued_bytes": 0}
                  for c in (0, 1, 2, 10)}
        return {"topology": name, "phase": "RUNNING", "active": True, "window": window,
                "reliability": "ATLEAST_ONCE", "containers": 4, "uptime_secs": 12.0, "started_at": 1.7e9,
                "backpressure": False, "components": comps, "tasks": tasks, "stmgrs": stmgrs,
                "tmaster": {"pid": 99, "cpu_percent": 0.5, "rss_bytes": 2 ** 21},
                "throughput": [{"ago_secs": 1.0, "emit_rate": 3.0, "execute_rate": 2.0}], "errors": 3}

    def errors(self, name, component=None, limit=20):
        self.topology(name)
        errs = [{"task": t, "component": TASK_COMPONENT[t], "where": "process", "error": f"E{t}",
                 "traceback": f"Traceback\nE{t}\n", "time": 1000.0 - t} for t in (1, 3, 4, 11)]
        return [e for e in errs if component in (None, e["component"])][:limit]


def test_remote_source_returns_what_the_source_behind_nimbus_returns(nimbus):
    local = FixedSource()
    remote = RemoteSource(ClusterClient(nimbus(source=local).url, TOKEN))
    assert remote.topologies() == local.topologies()
    assert remote.topology("wc") == local.topology("wc")
    for window in ("interval", "1m", "all"):
        doc, want = remote.metrics("wc", window), finite(local.metrics("wc", window))
        assert doc == want
        for key in ("components", "tasks", "stmgrs"):  # in the order bittern metrics/top print
            assert list(doc[key]) == list(want[key])
    assert list(remote.metrics("wc")["components"]) == ["words", "split", "count"]
    assert remote.errors("wc") == local.errors("wc")
    assert remote.errors("wc", limit=2) == local.errors("wc", limit=2)
    assert remote.errors("wc", "split") == local.errors("wc", "split")
    for call in (lambda: remote.topology("nope"), lambda: remote.metrics("nope"), lambda: remote.errors("nope")):
        with pytest.raises(TopologyGone, match="'nope'"):
            call()
    remote.close()


def test_remote_source_silent_topology_is_not_gone(nimbus):
    n = nimbus()
    n.canned[("GET", "/api/v1/topologies/wc/metrics")] = (503, {"error": "topology 'wc' is STARTING"})
    with pytest.raises(BitternError) as e:
        RemoteSource(ClusterClient(n.url, TOKEN)).metrics("wc")
    assert not isinstance(e.value, TopologyGone)


def test_remote_source_matches_local_source_on_a_real_topology(nimbus, tmp_path):
    """Nimbus serves bittern.httpapi over its source; here that source is a
    LocalSource over a real running topology, so RemoteSource must give back what
    LocalSource gives (values move between calls: compare keys and static parts)."""
    home = str(tmp_path / "home")
    env = dict(os.environ, BITTERN_HOME=home)
    env.pop("BITTERN_CLUSTER", None)
    cmd = [sys.executable, "-m", "bittern"]
    subprocess.run([*cmd, "submit", FLOW, "--name", "flow", "--wait", "0", "--config",
                    f"test.out={tmp_path / 'out'}", "--config", "topology.metrics.interval.secs=0.2"],
                   env=env, cwd=ROOT, check=True, capture_output=True, timeout=60)
    local = LocalSource(LocalStateManager(home))
    try:
        remote = RemoteSource(ClusterClient(nimbus(source=local).url, TOKEN))
        deadline = time.monotonic() + 15
        while len(local.metrics("flow")["tasks"]) < 3 or any(
                not t.get("pid") for t in local.metrics("flow")["tasks"].values()):
            assert time.monotonic() < deadline, "the tasks did not report metrics"
            time.sleep(0.1)
        assert [sorted(r) for r in remote.topologies()] == [sorted(r) for r in local.topologies()]
        assert remote.topology("flow") == local.topology("flow")
        doc, want = remote.metrics("flow", "all"), local.metrics("flow", "all")
        assert shape(doc) == shape(want)
        for key in ("components", "tasks", "stmgrs"):  # the orders bittern metrics/top print in
            assert list(doc[key]) == list(want[key])
        assert remote.errors("flow") == local.errors("flow")
    finally:
        local.close()
        subprocess.run([*cmd, "kill", "flow"], env=env, cwd=ROOT, capture_output=True, timeout=60)


def shape(obj):
    """Keys all the way down (a list's items come and go between two calls)."""
    if isinstance(obj, dict):
        return sorted((k, shape(v)) for k, v in obj.items())
    return "list" if isinstance(obj, list) else "value"


# -- the CLI (a subprocess, as a user runs it) --------------------------------------------

def run_cli(*args, tmp_path, token=TOKEN, timeout=60):
    env = dict(os.environ, BITTERN_HOME=str(tmp_path / "home"), BITTERN_TOKEN=token)
    env.pop("BITTERN_CLUSTER", None)
    return subprocess.run([sys.executable, "-m", "bittern", *map(str, args)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_submit_posts_the_code_and_the_definition(nimbus, tmp_path):
    n = nimbus()
    n.canned[("POST", "/api/v1/topologies")] = (201, {"name": "trickle", "status": "RUNNING"})
    n.canned[("GET", "/api/v1/topologies/trickle")] = (200, {"name": "trickle", "state": "RUNNING"})
    r = run_cli("--cluster", f"{dead_url()},{n.url}", "submit", FLOW, "--name", "trickle", "--deactivated",
                "--config", "test.rate=5", "--wait", "0.3", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    [post] = [q for q in n.requests if q["method"] == "POST"]
    body = post["body"]
    assert post["path"] == "/api/v1/topologies" and post["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert sorted(body) == ["archive", "config", "deactivated", "definition", "digest", "entry", "name"]
    assert body["name"] == "trickle" and body["deactivated"] is True
    assert body["definition"]["name"] == "trickle"
    assert [c["name"] for c in body["definition"]["components"]] == ["spout", "sink"]
    assert body["config"]["test.rate"] == 5 and "topology.stmgrs" in body["config"]
    data = base64.b64decode(body["archive"])
    assert digest_of(data) == body["digest"] and body["entry"] == "topologies/flow.py"
    tree = extract(data, str(tmp_path / "code"), digest=body["digest"])
    with open(os.path.join(tree, body["entry"])) as f, open(FLOW) as g:
        assert f.read() == g.read()
    assert any(q["method"] == "GET" for q in n.requests)  # watched it after start-up
    assert r.stdout.startswith(f"topology trickle submitted to {n.url}: 3 tasks in 2 container(s), PAUSED")
    assert len(r.stdout.splitlines()) == 1


def test_cli_submit_startup_failure_prints_error_and_traceback(nimbus, tmp_path):
    n = nimbus()
    n.canned[("POST", "/api/v1/topologies")] = (422, {"error": "component 'sink' failed: KeyError: 'test.out'",
                                                     "traceback": "Traceback (most recent call last):\n"
                                                                  "KeyError: 'test.out'\n"})
    r = run_cli("--cluster", n.url, "submit", FLOW, tmp_path=tmp_path)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == ["error: component 'sink' failed: KeyError: 'test.out'",
                                     "Traceback (most recent call last):", "KeyError: 'test.out'"]


def test_cli_submit_validates_locally_first(nimbus, tmp_path):
    n = nimbus()
    bad = tmp_path / "bad.py"
    bad.write_text("from bittern import TopologyBuilder\nb = TopologyBuilder('bad')\n")
    remote = run_cli("--cluster", n.url, "submit", bad, tmp_path=tmp_path)
    local = run_cli("submit", bad, tmp_path=tmp_path)
    assert remote.returncode == local.returncode == 1
    assert remote.stderr == local.stderr and remote.stderr.startswith("error: ")
    assert n.requests == []


def test_cli_run_is_refused(nimbus, tmp_path):
    n = nimbus()
    r = run_cli("--cluster", n.url, "run", FLOW, "--duration", "1", tmp_path=tmp_path)
    assert r.returncode == 1 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "submit" in r.stderr and r.stderr.startswith("error: ")
    assert n.requests == []


def test_cli_verbs(nimbus, tmp_path):
    n = nimbus(source=FixedSource())
    n.canned[("POST", "/api/v1/topologies/wc/deactivate")] = (200, {"name": "wc", "state": "PAUSED"})
    n.canned[("DELETE", "/api/v1/topologies/wc")] = (200, {"name": "wc", "killed": True})
    n.canned[("DELETE", "/api/v1/topologies/gone")] = (404, {"error": "no topology named 'gone'"})
    n.canned[("GET", "/api/v1/topologies/wc/logs")] = (200, {"topology": "wc", "containers": {
        "0": ["tmaster.log", "stmgr-0.log", "words-1.log"], "1": ["stmgr-1.log", "split-3.log", "split-4.log"]}})
    n.canned[("GET", "/api/v1/topologies/wc/logs?file=split-3.log")] = (200, "a\nb\nc\n")
    n.canned[("GET", "/api/v1/topologies/wc/logs?file=split-4.log")] = (200, "d\n")

    def cli(*args):
        return run_cli("--cluster", n.url, *args, tmp_path=tmp_path)

    r = cli("list", "--json")
    assert [row["name"] for row in json.loads(r.stdout)] == ["wc"] and json.loads(r.stdout)[0]["uptime"] == "12s"
    r = cli("deactivate", "wc")
    assert (r.returncode, r.stdout) == (0, "topology wc deactivated\n")
    r = cli("activate", "nope")
    assert r.returncode == 1 and r.stderr.startswith("error: no topology named 'nope' (nimbus at")
    r = cli("kill", "wc")
    assert (r.returncode, r.stdout) == (0, "topology wc killed\n")
    r = cli("kill", "gone")
    assert (r.returncode, r.stdout) == (0, "topology gone is not running (nothing to kill)\n")
    r = cli("metrics", "wc")
    assert r.returncode == 0, r.stderr
    assert [ln.split()[0] for ln in r.stdout.splitlines()[2:]] == ["words", "split", "count"]
    r = cli("errors", "wc", "--component", "split", "--json")
    assert [e["error"] for e in json.loads(r.stdout)] == ["E3", "E4"]
    r = cli("logs", "wc", "--component", "split", "--task", "3", "--tail", "2")
    assert (r.returncode, r.stdout) == (0, "b\nc\n")
    r = cli("logs", "wc", "split")
    assert r.stdout == "==> split-3.log <==\na\nb\nc\n==> split-4.log <==\nd\n"
    r = cli("logs", "wc", "count")
    assert r.returncode == 1 and "has no log for count (logs: split-3.log" in r.stderr
    r = cli("top", "wc", "--once")
    assert r.returncode == 0 and "words" in r.stdout, r.stderr
    r = cli("restart", "wc")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "local mode only" in r.stderr
    assert [q["method"] for q in n.requests if q["method"] != "GET"] == ["POST", "POST", "DELETE", "DELETE"]


def test_cli_wrong_token_and_env_cluster(nimbus, tmp_path):
    n = nimbus()
    env = dict(os.environ, BITTERN_HOME=str(tmp_path / "home"), BITTERN_TOKEN="nope", BITTERN_CLUSTER=n.url)
    r = subprocess.run([sys.executable, "-m", "bittern", "list"], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr == (f"error: nimbus at {n.url} refused the token (set BITTERN_TOKEN or token_file "
                        "in cluster.toml)\n")


def test_daemon_verbs_exec_their_module_with_the_arguments_unchanged(monkeypatch):
    calls = []

    class Execed(Exception):
        pass

    def fake_execv(path, argv):
        calls.append((path, argv))
        raise Execed

    monkeypatch.setattr(daemons.os, "execv", fake_execv)
    with pytest.raises(Execed):
        cli_main(["nimbus", "--zk", "h:2181", "--help", "-x"])
    with pytest.raises(Execed):
        cli_main(["--cluster", "http://x:1", "supervisor", "--zk", "h:2181", "--slots", "2"])
    assert calls == [(sys.executable, [sys.executable, "-m", "nimbus", "--zk", "h:2181", "--help", "-x"]),
                     (sys.executable, [sys.executable, "-m", "supervisor", "--cluster", "--zk", "h:2181",
                                       "--slots", "2"])]


def test_the_cli_does_not_import_the_daemons():
    code = ("import sys, bittern.cli.main, bittern.cluster_client, bittern.monitor; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'nimbus', 'supervisor'}))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stderr
