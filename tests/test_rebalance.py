"""``bittern rebalance`` with real processes (local mode): a counter-like bolt
rescaled 2 -> 4 -> 1 while tuples flow loses nothing; refusals leave the topology
untouched and running; a rebalance whose new plan cannot start comes back on the
old plan, running and active."""
from __future__ import annotations

import json
import os
import subprocess

from conftest import TOPOLOGIES, wait_for
from eokit import Gates

SEQ = os.path.join(TOPOLOGIES, "rebalance_seq.py")


def acked(out):
    try:
        return [int(x) for x in open(os.path.join(out, "acks.txt")).read().split()]
    except FileNotFoundError:
        return []


def sink_numbers(out):
    seen = []
    for f in os.listdir(out):
        if f.startswith("sink-"):
            seen += [int(x) for x in open(os.path.join(out, f)).read().split()]
    return seen


def task_counts(bittern, name):
    doc = bittern.json("metrics", name, "--json")
    return {c: v["tasks"] for c, v in doc["components"].items()}, doc


def submit(bittern, name, out, n, *extra):
    conf = [f"test.out={out}", f"test.count={n}", *extra]
    args = ["submit", SEQ, "--name", name, "--wait", "0"]
    for c in conf:
        args += ["--config", c]
    bittern(*args, check=True)


def one_line_error(r):
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_rebalance_counter_2_4_1_while_running_loses_nothing(bittern, tmp_path):
    out = str(tmp_path / "out")
    n = 6000
    # each rebalance with ids still to come: the spout holds back those past the gate (not
    # a race with the rate, which a loaded machine loses), raised after each rebalance
    gate = Gates(tmp_path / "gate", n, 3)
    submit(bittern, "rb", out, n, "test.rate=500", gate.config)
    try:
        wait_for(lambda: len(acked(out)) > 800, timeout=90, what="acks flowing")
        r = bittern("rebalance", "rb", "--parallelism", "count=4", check=True)
        assert "rebalanced: 6 tasks in 2 container(s)" in r.stdout, r.stdout
        tasks, doc = task_counts(bittern, "rb")
        assert tasks == {"spout": 1, "count": 4, "sink": 1} and doc["active"], tasks
        before = len(acked(out))
        gate.more()
        wait_for(lambda: len(acked(out)) > before + 500, timeout=90, what="progress on 4 counters")
        r = bittern("rebalance", "rb", "-p", "count=1", "--containers", "1", check=True)
        assert "rebalanced: 3 tasks in 1 container(s)" in r.stdout, r.stdout
        tasks, doc = task_counts(bittern, "rb")
        assert tasks == {"spout": 1, "count": 1, "sink": 1} and doc["containers"] == 1, tasks
        rows = json.loads(bittern("list", "--json", check=True).stdout)
        assert rows[0]["tasks"] == 3 and rows[0]["state"] == "RUNNING", rows
        gate.more()
        wait_for(lambda: os.path.exists(os.path.join(out, "done")), timeout=120, what="every id acked")
        ids = acked(out)
        assert sorted(ids) == list(range(n)), "every id acked exactly once"
        missing = set(range(n)) - set(sink_numbers(out))
        assert not missing, f"{len(missing)} numbers never reached the sink, e.g. {sorted(missing)[:10]}"
    finally:
        bittern("kill", "rb", check=True)


def test_refusals_leave_the_topology_running(bittern, home, tmp_path):
    out = str(tmp_path / "out")
    submit(bittern, "rr", out, 10 ** 7, "test.rate=200")
    try:
        wait_for(lambda: len(acked(out)) > 50, what="acks flowing")
        pids = {k: p["pid"] for k, p in bittern.processes("rr").items()}
        cases = {("-p", "nope=2"): "has no component 'nope'",
                 ("-p", "count=0"): "parallelism must be an integer >= 1",
                 ("-p", "spout=2"): "spout 'spout' cannot be split into 2 tasks: its source allows at most 1",
                 (): "nothing to change"}
        for args, why in cases.items():
            line = one_line_error(bittern("rebalance", "rr", *args))
            assert why in line, line
        line = one_line_error(bittern("rebalance", "ghost", "-p", "count=2"))
        assert "no topology named 'ghost'" in line
        # another rebalance in progress: its marker is held by a live process
        holder = subprocess.Popen(["sleep", "30"])
        try:
            marker = os.path.join(home, "state", "rebalance", "rr.json")
            os.makedirs(os.path.dirname(marker), exist_ok=True)
            with open(marker, "w") as f:
                json.dump({"pid": holder.pid, "host": os.uname().nodename}, f)
            line = one_line_error(bittern("rebalance", "rr", "-p", "count=3"))
            assert "already in progress" in line, line
        finally:
            holder.kill()
            holder.wait()
        # a marker whose process is gone does not block forever
        r = bittern("rebalance", "rr", "-q", "-p", "count=3", check=True)
        assert "rebalanced: 5 tasks" in r.stdout
        assert not os.path.exists(marker)
        tasks, doc = task_counts(bittern, "rr")
        assert tasks["count"] == 3 and doc["active"] and doc["phase"] == "RUNNING"
        assert pids["instance-1"] != bittern.processes("rr")["instance-1"]["pid"]
    finally:
        bittern("kill", "rr", check=True)


def test_failed_rebalance_comes_back_on_the_old_plan(bittern, home, tmp_path):
    out = str(tmp_path / "out")
    submit(bittern, "rf", out, 10 ** 7, "test.rate=300", "test.fail.above=3")
    try:
        wait_for(lambda: len(acked(out)) > 50, what="acks flowing")
        line = one_line_error(bittern("rebalance", "rf", "-q", "-p", "count=4"))
        assert "back on the old plan" in line and "count cannot run with 4 tasks" in line, line
        tasks, doc = task_counts(bittern, "rf")
        assert tasks == {"spout": 1, "count": 2, "sink": 1}, tasks
        assert doc["phase"] == "RUNNING" and doc["active"], doc["phase"]
        before = len(acked(out))
        wait_for(lambda: len(acked(out)) > before + 100, what="tuples flowing on the old plan")
        assert not os.path.exists(os.path.join(home, "state", "rebalance", "rf.json"))
        rec = bittern.state("topologies", "rf")
        assert rec["state"] == "RUNNING"
        assert {c["name"]: c["par"] for c in rec["definition"]["components"]}["count"] == 2
    finally:
        bittern("kill", "rf", check=True)


def test_cluster_rebalance_writes_a_new_assignment_version(zk_server, tmp_path):
    from clusterkit import Cluster
    cluster = Cluster(zk_server, tmp_path)
    try:
        cluster.start_nimbus()
        cluster.start_supervisor("a")
        cluster.start_supervisor("b")
        out = str(tmp_path / "out")
        n = 3000
        cluster.cli("submit", SEQ, "--name", "crb", "--wait", "0", "--config", f"test.out={out}",
                    "--config", f"test.count={n}", "--config", "test.rate=400", "--config", "test.fail.above=3",
                    check=True)
        wait_for(lambda: len(acked(out)) > 300, what="acks flowing")
        v1 = cluster.assignment("crb")["version"]
        r = cluster.cli("rebalance", "crb", "-q", "-p", "count=3", "--containers", "3", check=True)
        assert "rebalanced: 5 tasks in 3 container(s)" in r.stdout, (r.stdout, r.stderr)
        asg = cluster.assignment("crb")
        assert asg["version"] == v1 + 1 and len(asg["containers"]) == 3
        status, doc = cluster.api("/api/v1/topologies/crb/metrics")
        assert status == 200 and doc["components"]["count"]["tasks"] == 3 and doc["active"], doc
        r = cluster.cli("rebalance", "crb", "-p", "nope=2")
        assert r.returncode == 1 and "has no component 'nope'" in r.stderr, r.stderr
        # a plan that cannot start: back on the previous one (version + 2), running and active
        r = cluster.cli("rebalance", "crb", "-q", "-p", "count=4")
        assert r.returncode == 1 and "back on the old plan" in r.stderr, (r.stdout, r.stderr)
        asg = cluster.assignment("crb")
        assert asg["version"] == v1 + 3 and len(asg["containers"]) == 3, asg
        status, doc = cluster.api("/api/v1/topologies/crb")
        assert status == 200 and doc.get("state") != "FAILED", doc
        status, doc = cluster.api("/api/v1/topologies/crb/metrics")
        assert status == 200 and doc["components"]["count"]["tasks"] == 3 and doc["active"], doc
        # the health manager's way in: a scale request that the leader carries out
        zk = cluster.state()
        try:
            import time
            req = {"component": "count", "parallelism": 2, "time": time.time(), "state": "REQUESTED"}
            zk.put("healthmgr/crb/request", req)
            done = wait_for(lambda: (zk.get("healthmgr/crb/request") or {}).get("state") in ("DONE", "ERROR")
                            and zk.get("healthmgr/crb/request"), timeout=60, what="the scale request done")
            assert done["state"] == "DONE" and done["time"] == req["time"], done
        finally:
            zk.close()
        status, doc = cluster.api("/api/v1/topologies/crb/metrics")
        assert doc["components"]["count"]["tasks"] == 2 and doc["active"], doc
        wait_for(lambda: os.path.exists(os.path.join(out, "done")), timeout=120, what="every id acked")
        assert sorted(acked(out)) == list(range(n))
        assert not set(range(n)) - set(sink_numbers(out))
        cluster.cli("kill", "crb", check=True)
    finally:
        cluster.stop()


def test_exactly_once_keyed_counts_stay_exact_across_2_3_2(bittern, tmp_path):
    """Keyed state moves with its key groups: the running count of every key goes
    1, 2, 3, ... through both rebalances, and each input is committed once."""
    import glob
    from collections import Counter
    out = str(tmp_path / "out")
    n = 2400

    def committed():
        rows = []
        for path in glob.glob(os.path.join(out, "sink", "smoke-*-*.jsonl")):
            with open(path) as f:
                rows += [json.loads(line) for line in f if line.strip()]
        return rows

    gate = Gates(tmp_path / "gate", n, 3)  # (numbers still to come at each rebalance: see the test above)
    bittern("submit", os.path.join(TOPOLOGIES, "eo_smoke.py"), "--name", "eorb", "--wait", "0",
            "--config", f"test.out={out}", "--config", f"test.count={n}", "--config", "test.rate=300",
            "--config", gate.config, check=True)
    try:
        wait_for(lambda: len(committed()) > 300, timeout=90, what="committed output")
        r = bittern("rebalance", "eorb", "-p", "count=3", check=True)
        assert "complete after the deactivation" in r.stdout, r.stdout
        assert task_counts(bittern, "eorb")[0]["count"] == 3
        before = len(committed())
        gate.more()
        wait_for(lambda: len(committed()) > before + 200, timeout=90, what="output on 3 counters")
        bittern("rebalance", "eorb", "-p", "count=2", check=True)
        assert task_counts(bittern, "eorb")[0]["count"] == 2
        gate.more()
        wait_for(lambda: len(committed()) >= n, timeout=120, what="every number committed")
        rows = committed()
        ns = Counter(r[0] for r in rows)
        assert [x for x, c in ns.items() if c > 1] == [], "committed twice"
        assert set(ns) == set(range(n)) and len(rows) == n
        want = Counter(x % 5 for x in range(n))
        for key in range(5):
            counts = sorted(c for _, k, c in rows if k == key)
            assert counts == list(range(1, want[key] + 1)), f"key {key}"
    finally:
        bittern("kill", "eorb", check=True)
