"""The HTTP API and the Prometheus export against real processes: a topology started
with ``bittern submit`` and ``bittern serve`` as a subprocess on the same home. Every
endpoint answers with the shape README.md documents; unknown topology, component
and path are 404, a bad window 400; /metrics parses with prometheus_client's
parser; the server stops cleanly on SIGTERM and Ctrl-C. (The ``home`` fixture
fails the test if any process of the topology or the server is left.)"""
from __future__ import annotations

import json
import os
import re
import signal
import stat
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

import psutil
from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT, wait_for

NAME = "api_topo"
TOPOLOGY = """
import time
from bittern import Bolt, Grouping, Spout, Topology
from bittern.api.metrics import CountMetric, MultiCountMetric

class Numbers(Spout):
    outputs = ["n"]
    def initialize(self, config, context):
        self.i = 0
        self.rate = float(config.get("test.rate", 1000))
        self.t0 = time.monotonic()
    def next_tuple(self):
        due = min(int((time.monotonic() - self.t0) * self.rate), self.i + 100)
        while self.i < due:
            self.emit([self.i])
            self.i += 1

class Check(Bolt):
    outputs = ["n"]
    def initialize(self, config, context):
        self.seen = context.register_metric("seen", CountMetric())
        self.parity = context.register_metric("parity", MultiCountMetric())
    def process(self, tup):
        n = tup.values[0]
        self.seen.incr()
        self.parity.incr("odd" if n % 2 else "even")
        if n % 200 == 7:
            raise ValueError("unlucky number %d" % n)
        self.emit([n])

class Sink(Bolt):
    def process(self, tup):
        pass

class ApiTopo(Topology):
    config = {"topology.stmgrs": 2}
    numbers = Numbers.spec(par=1)
    check = Check.spec(par=2, inputs=[numbers])
    sink = Sink.spec(par=2, inputs={check: Grouping.fields("n")})
"""
COMPONENTS = {"numbers": ("spout", 1), "check": ("bolt", 2), "sink": ("bolt", 2)}
WINDOWS = ("interval", "1m", "10m", "all")
TOP_KEYS = {"topology", "phase", "active", "window", "reliability", "containers", "uptime_secs", "started_at",
            "backpressure", "components", "tasks", "stmgrs", "tmaster", "throughput", "errors"}
VIEW_KEYS = {"emitted", "transferred", "executed", "acked", "failed", "errors", "emit_rate", "execute_rate",
             "execute_latency_ms", "complete_latency_ms", "capacity", "backpressure_fraction", "cpu_percent",
             "rss_bytes", "user"}


class ApiServer:
    """``python -m bittern --home H serve --port 0`` as a subprocess; its URL is read
    from what it prints."""

    def __init__(self, bittern, tmp_path):
        self.out_path, self.err_path = tmp_path / "serve.out", tmp_path / "serve.err"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "bittern", "--home", bittern.home, "serve",
                                          "--port", "0"], env=bittern.env, stdout=out, stderr=err, cwd=ROOT)
        try:
            m = wait_for(lambda: self.proc.poll() is None and
                         re.search(r"http://127\.0\.0\.1:(\d+)/", self.out_path.read_text()) or
                         self._died(), timeout=60, what="the API server's URL")
        except BaseException:
            self.kill()
            raise
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        token_file = os.path.join(bittern.home, "token")  # made by serve at its first start, 0600
        assert f"token in {token_file}" in self.out_path.read_text()
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        with open(token_file) as f:
            self.token = f.read().strip()

    def _died(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"bittern serve exited {self.proc.returncode}:\n{self.output()}")
        return None

    def output(self):
        return self.out_path.read_text() + self.err_path.read_text()

    def get(self, path, accept=None):
        """``(status, content type, body)``, sending the token."""
        headers = {"Authorization": f"Bearer {self.token}"}
        if accept:
            headers["Accept"] = accept
        req = urllib.request.Request(self.url + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.headers["Content-Type"], r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers["Content-Type"], e.read().decode()

    def json(self, path, status=200):
        code, ctype, body = self.get(path)
        assert code == status, f"GET {path}: {code} {body}"
        assert ctype.startswith("application/json"), ctype
        return json.loads(body)

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=30)
        assert rc == 0, f"bittern serve exited {rc} on {sig!r}:\n{self.output()}"
        assert "bittern API stopped" in self.out_path.read_text()
        assert not psutil.pid_exists(self.proc.pid) or \
            psutil.Process(self.proc.pid).status() == psutil.STATUS_ZOMBIE
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", self.port)) != 0, "the port still accepts connections"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def families(text):
    """``{sample name: [(labels, value)]}`` as prometheus_client's parser reads ``text``."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_serve_refuses_a_non_loopback_host(bittern):
    r = bittern("serve", "--host", "0.0.0.0", "--port", "0", timeout=60)
    assert r.returncode == 1
    first = [line for line in r.stderr.splitlines() if line.startswith("error:")][0]  # (after any warning)
    assert first.startswith("error: refusing to serve on '0.0.0.0'"), r.stderr
    assert "plain HTTP" in first and "--allow-remote" in first


def test_serve_without_topologies_stops_on_ctrl_c(bittern, tmp_path):
    server = ApiServer(bittern, tmp_path)
    try:
        assert server.json("/healthz")["status"] == "ok"
        assert server.json("/api/v1/topologies") == {"topologies": []}
        server.token = "not-the-token"
        assert server.json("/api/v1/topologies", 401)["error"].startswith("missing or wrong API token")
        server.token = open(os.path.join(bittern.home, "token")).read().strip()
        doc = server.json("/api/v1/topologies/ghost", 404)
        assert doc["error"] == "no topology named 'ghost'"
        code, ctype, body = server.get("/metrics")
        assert code == 200 and ctype.startswith("text/plain")
        assert not any(n.startswith("bittern_tuples") for n in families(body))
        server.stop(signal.SIGINT)
    finally:
        server.kill()


def test_http_api_on_a_running_topology(bittern, home, tmp_path):
    path = tmp_path / "api_topo.py"
    path.write_text(textwrap.dedent(TOPOLOGY))
    server = ApiServer(bittern, tmp_path)
    try:
        bittern("submit", path, "--name", NAME, "--config", "topology.metrics.interval.secs=1",
                "--config", "test.rate=1000", check=True, timeout=180)
        try:
            check_running_topology(bittern, server)
        finally:
            bittern("kill", NAME, check=True)
        # gone from every endpoint once killed
        assert server.json("/api/v1/topologies") == {"topologies": []}
        for p in ("", "/metrics", "/components/check", "/errors"):
            assert server.json(f"/api/v1/topologies/{NAME}{p}", 404)["topology"] == NAME
        code, _, body = server.get("/metrics")
        assert code == 200 and f'topology="{NAME}"' not in body
        server.stop(signal.SIGTERM)
        log = server.err_path.read_text()
        assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
        assert re.search(r'"GET /api/v1/topologies/api_topo/metrics\?window=5m HTTP/1.1" 400', log)
    finally:
        server.kill()


def check_running_topology(bittern, server):
    procs = bittern.processes(NAME)

    # -- the list --------------------------------------------------------------------------
    rows = server.json("/api/v1/topologies")["topologies"]
    assert [r["name"] for r in rows] == [NAME]
    row = rows[0]
    assert (row["state"], row["containers"], row["tasks"]) == ("RUNNING", 2, 5)
    assert row["uptime_secs"] > 0 and row["reliability"] == "ATMOST_ONCE"

    # -- one topology: state, logical plan, physical plan, config ---------------------------
    topo = server.json(f"/api/v1/topologies/{NAME}")
    assert {"name", "state", "submitted_at", "logical_plan", "physical_plan", "config"} <= set(topo)
    assert topo["name"] == NAME and topo["state"] == "RUNNING"
    comps = {c["name"]: c for c in topo["logical_plan"]["components"]}
    assert {n: (c["kind"], c["par"]) for n, c in comps.items()} == COMPONENTS
    assert comps["sink"]["inputs"][0]["grouping"] == {"type": "fields", "fields": ["n"]}
    assert topo["config"]["topology.metrics.interval.secs"] == 1
    assert topo["config"]["topology.stmgrs"] == 2 and topo["config"]["test.rate"] in (1000, "1000")
    pplan = topo["physical_plan"]
    assert set(pplan["containers"]) == {"0", "1"} and pplan["tmaster"].startswith(("ipc://", "tcp://127.0.0.1:"))
    task_comp, task_container = {}, {}
    for c, cont in pplan["containers"].items():
        assert cont["host"] == "127.0.0.1"
        assert cont["stmgr_pid"] == procs[f"stmgr-{c}"]["pid"] and psutil.pid_exists(cont["stmgr_pid"])
        for t in cont["tasks"]:
            assert t["pid"] == procs[f"instance-{t['task']}"]["pid"] and psutil.pid_exists(t["pid"])
            assert t["task"] not in task_comp
            task_comp[t["task"]], task_container[t["task"]] = t["component"], c
    assert sorted(task_comp) == [1, 2, 3, 4, 5]
    assert {c: list(task_comp.values()).count(c) for c in COMPONENTS} == {c: p for c, (_, p) in COMPONENTS.items()}

    # -- metrics: counts and rates once tuples have flowed a few seconds -------------------
    def flowing():
        # A component's rate is its tasks' sum, so one task's reports can make it
        # positive while another task has reported once (no window yet): the per-task
        # checks below need every task's window (two reports) as well.
        d = server.json(f"/api/v1/topologies/{NAME}/metrics?window=1m")
        cs = d["components"]
        ok = (cs["numbers"]["emitted"] > 500 and cs["check"]["executed"] > 500 and cs["sink"]["executed"] > 500
              and cs["numbers"]["emit_rate"] > 0 and cs["check"]["execute_rate"] > 0
              and cs["sink"]["execute_rate"] > 0 and cs["check"]["errors"] >= 3
              and len(d["tasks"]) == 5 and all(v["window_secs"] > 0 for v in d["tasks"].values()))
        return d if ok else None
    doc = wait_for(flowing, timeout=90, interval=0.5, what="tuples to flow through every component")
    assert TOP_KEYS <= set(doc) and "op" not in doc and "req" not in doc
    assert doc["topology"] == NAME and doc["window"] == "1m" and doc["phase"] == "RUNNING" and doc["active"]
    assert set(doc["components"]) == set(COMPONENTS)
    for name, c in doc["components"].items():
        assert VIEW_KEYS <= set(c), name
        assert c["kind"] == COMPONENTS[name][0] and c["tasks"] == COMPONENTS[name][1]
        assert c["rss_bytes"] > 0
    assert set(doc["tasks"]) == {str(t) for t in task_comp}
    for t, v in doc["tasks"].items():
        assert VIEW_KEYS <= set(v)
        assert v["component"] == task_comp[int(t)] and str(v["container"]) == task_container[int(t)]
        assert v["pid"] == procs[f"instance-{t}"]["pid"]
    assert doc["components"]["check"]["executed"] == sum(
        v["executed"] for v in doc["tasks"].values() if v["component"] == "check")
    assert set(doc["stmgrs"]) == {"0", "1"} and all(s["alive"] for s in doc["stmgrs"].values())

    # -- the window parameter is honoured -------------------------------------------------
    spans = {}
    for w in WINDOWS:
        d = server.json(f"/api/v1/topologies/{NAME}/metrics?window={w}")
        assert d["window"] == w
        spans[w] = d["tasks"]["1"]["window_secs"]
    assert 0 < spans["interval"] < spans["all"], spans
    bad = server.json(f"/api/v1/topologies/{NAME}/metrics?window=5m", 400)
    assert bad["parameter"] == "window" and "'window'" in bad["error"] and "5m" in bad["error"]

    # -- one component ----------------------------------------------------------------------
    comp = server.json(f"/api/v1/topologies/{NAME}/components/check?window=interval")
    assert set(comp) == {"topology", "component", "kind", "window", "definition", "metrics", "tasks"}
    assert (comp["topology"], comp["component"], comp["kind"], comp["window"]) == (NAME, "check", "bolt", "interval")
    assert sorted(comp["tasks"], key=int) == sorted(str(t) for t, c in task_comp.items() if c == "check")
    assert comp["metrics"]["tasks"] == 2 and comp["definition"]["par"] == 2
    assert comp["metrics"]["executed"] == sum(v["executed"] for v in comp["tasks"].values()) > 0
    assert comp["metrics"]["user"]["seen"] >= 0
    assert server.json(f"/api/v1/topologies/{NAME}/components/check?window=never", 400)["parameter"] == "window"

    # -- 404s -------------------------------------------------------------------------------
    e = server.json(f"/api/v1/topologies/{NAME}/components/nope", 404)
    assert "'nope'" in e["error"] and "check, numbers, sink" in e["error"]
    for p in ("", "/metrics", "/components/check", "/errors"):
        e = server.json(f"/api/v1/topologies/ghost{p}", 404)
        assert e == {"error": "no topology named 'ghost'", "topology": "ghost"}
    for p in ("/nowhere", "/api/v1/topologies/ghost/x", "/api/v2/topologies"):
        assert "no such endpoint" in server.json(p, 404)["error"]

    # -- recent errors, per component, with tracebacks ---------------------------------------
    errs = server.json(f"/api/v1/topologies/{NAME}/errors")
    assert errs["topology"] == NAME and errs["limit"] == 10 and set(errs["components"]) == set(COMPONENTS)
    assert errs["components"]["numbers"] == [] and errs["components"]["sink"] == []
    check_errs = errs["components"]["check"]
    assert 1 <= len(check_errs) <= 10
    for err in check_errs:
        assert err["component"] == "check" and task_comp[err["task"]] == "check" and err["where"] == "process"
        assert re.fullmatch(r"ValueError: unlucky number \d*7", err["error"]), err["error"]
        assert err["traceback"].startswith("Traceback") and "in process" in err["traceback"]
        assert err["traceback"].rstrip().endswith(err["error"])
    assert [e["time"] for e in check_errs] == sorted((e["time"] for e in check_errs), reverse=True)
    two = server.json(f"/api/v1/topologies/{NAME}/errors?component=check&limit=2")
    assert list(two["components"]) == ["check"] and len(two["components"]["check"]) == 2, two
    assert server.json(f"/api/v1/topologies/{NAME}/errors?component=nope", 404)["component"] == "nope"
    assert server.json(f"/api/v1/topologies/{NAME}/errors?limit=zero", 400)["parameter"] == "limit"

    # -- Prometheus ---------------------------------------------------------------------------
    code, ctype, body = server.get("/metrics")
    assert code == 200 and ctype.startswith("text/plain") and "version=0.0.4" in ctype
    fams = families(body)
    for sample in ("bittern_tuples_emitted_total", "bittern_tuples_executed_total", "bittern_execute_rate",
                   "bittern_execute_latency_ms", "bittern_capacity", "bittern_backpressure",
                   "bittern_process_cpu_percent", "bittern_process_rss_bytes", "bittern_errors_total"):
        got = {lab["task"]: (lab, v) for lab, v in fams[sample] if lab["topology"] == NAME}
        assert set(got) == {str(t) for t in task_comp}, sample
        for t, (lab, _) in got.items():
            assert lab == {"topology": NAME, "component": task_comp[int(t)], "task": t,
                           "container": task_container[int(t)]}, (sample, lab)

    def value(sample, **labels):
        vals = [v for lab, v in fams[sample] if all(lab.get(k) == x for k, x in labels.items())]
        assert len(vals) == 1, (sample, labels, vals, [lab for lab, _ in fams[sample]])
        return vals[0]
    spout_task = next(str(t) for t, c in task_comp.items() if c == "numbers")
    assert value("bittern_tuples_emitted_total", topology=NAME, task=spout_task) > 500
    for t, c in task_comp.items():
        if c == "check":
            assert value("bittern_tuples_executed_total", topology=NAME, task=str(t)) > 0
            assert value("bittern_execute_rate", topology=NAME, task=str(t)) > 0
            assert value("bittern_process_rss_bytes", topology=NAME, task=str(t)) > 0
            assert value("bittern_user_metric", topology=NAME, task=str(t), metric="seen", key="") >= 0
            keys = {lab["key"] for lab, _ in fams["bittern_user_metric"]
                    if lab["task"] == str(t) and lab["metric"] == "parity"}
            assert keys and keys <= {"odd", "even"}, keys  # shuffle may give a task only one parity
    assert sum(v for lab, v in fams["bittern_errors_total"] if lab["component"] == "check") > 0
    assert value("bittern_topology_up", topology=NAME) == 1
    assert value("bittern_topology_info", topology=NAME) == 1
    assert {lab["container"] for lab, _ in fams["bittern_stmgr_queued_bytes"]} == {"0", "1"}
    code, _, _ = server.get("/metrics?window=eons")
    assert code == 400
    code, ctype, body = server.get("/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert code == 200 and ctype.startswith("application/openmetrics-text") and body.rstrip().endswith("# EOF")
