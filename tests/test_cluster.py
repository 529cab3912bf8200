"""Cluster mode with real processes: nimbus and supervisors over a real ZooKeeper,
driven through the CLI (``bittern --cluster URL``), with daemons killed for real. (A
supervisor or the leader nimbus killed mid-run, and every other fault of a lost host:
tests/test_cluster_faults.py.)"""
from __future__ import annotations

import collections
import json
import os
import time


from conftest import EXAMPLES, TOPOLOGIES, processes_of, wait_for
from test_at_least_once import acked_ids

WORD_COUNT = os.path.join(EXAMPLES, "word_count.py")
SEQ = os.path.join(TOPOLOGIES, "reliable_seq.py")
BROKEN = os.path.join(TOPOLOGIES, "broken_on_workers", "topology.py")


def expected_word_counts(n):
    import importlib.util
    spec = importlib.util.spec_from_file_location("wc_example", WORD_COUNT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    counts = collections.Counter()
    for i in range(n):
        counts.update(mod.SENTENCES[i % len(mod.SENTENCES)].split())
    return dict(counts)


def executed(cluster, name, component):
    status, doc = cluster.api(f"/api/v1/topologies/{name}/metrics?window=all")
    if status != 200:
        return -1
    return (doc.get("components") or {}).get(component, {}).get("executed", -1)


def test_word_count_across_two_supervisors_is_exact_and_kill_stops_everything(cluster, tmp_path):
    cluster.start_nimbus()
    a, b = cluster.start_supervisor("a"), cluster.start_supervisor("b")
    out = str(tmp_path / "counts")
    n = 3000
    r = cluster.cli("submit", WORD_COUNT, "--name", "wc", "--config", f"wordcount.sentences={n}",
                    "--config", f"wordcount.output.dir={out}", check=True)
    assert "wc" in r.stdout
    asg = cluster.assignment("wc")
    assert {w["supervisor"] for w in asg["containers"].values()} == {"a", "b"}, asg["containers"]
    assert {w["host"] for w in asg["containers"].values()} == {"127.0.0.2", "127.0.0.3"}
    assert cluster.topology_pids("a") and cluster.topology_pids("b")
    rows = json.loads(cluster.cli("list", "--json", check=True).stdout)
    assert [(r["name"], r["state"]) for r in rows] == [("wc", "RUNNING")]
    want = expected_word_counts(n)
    wait_for(lambda: executed(cluster, "wc", "count") >= sum(want.values()), timeout=60,
             what="every word counted")
    logs = cluster.cli("logs", "wc", check=True)
    assert logs.returncode == 0
    cluster.cli("kill", "wc", check=True)
    wait_for(lambda: not cluster.topology_pids("a") and not cluster.topology_pids("b"), timeout=30,
             what="every topology process gone after kill")
    got = collections.Counter()
    files = [f for f in os.listdir(out) if f.startswith("counts-")]
    assert len(files) == 2, files
    for f in files:
        part = json.load(open(os.path.join(out, f)))
        assert not set(part) & set(got), "a word counted by two tasks (fields grouping across hosts)"
        got.update(part)
    assert dict(got) == want
    assert json.loads(cluster.cli("list", "--json", check=True).stdout) == []
    assert a.alive() and b.alive(), "supervisors keep running after a kill"


def test_zookeeper_restart_mid_run_is_survived(cluster, tmp_path, zk_server):
    cluster.start_nimbus()
    cluster.start_supervisor("a", slots=4)
    out = str(tmp_path / "out")
    cluster.cli("submit", SEQ, "--name", "seq", "--config", f"test.out={out}", "--config", "test.count=1000000",
                "--config", "test.rate=500", check=True)
    wait_for(lambda: os.path.exists(os.path.join(out, "acks.txt")) and len(acked_ids(out)) > 300,
             timeout=60, what="acks flowing")
    pids = set(cluster.topology_pids("a"))
    zk_server.stop()
    before = len(acked_ids(out))
    wait_for(lambda: len(acked_ids(out)) > before + 500, timeout=30, what="acks while ZooKeeper is down")
    zk_server.start()
    wait_for(lambda: "a" in [s["id"] for s in cluster.cluster_info()["supervisors"]], timeout=40,
             what="the supervisor is registered again")
    rows = json.loads(cluster.cli("list", "--json", check=True).stdout)
    assert [(r["name"], r["state"]) for r in rows] == [("seq", "RUNNING")]
    assert set(cluster.topology_pids("a")) == pids, "no topology process was restarted"
    before = len(acked_ids(out))
    wait_for(lambda: len(acked_ids(out)) > before + 300, timeout=30, what="acks after the restart")
    cluster.cli("kill", "seq", check=True)
    wait_for(lambda: not cluster.topology_pids("a"), timeout=30, what="processes gone after kill")


def test_bad_input_wrong_token_name_in_use_and_code_that_fails_on_the_workers(cluster, tmp_path):
    cluster.start_nimbus()
    cluster.start_supervisor("a", slots=4)
    out = str(tmp_path / "out")
    cluster.cli("submit", SEQ, "--name", "seq", "--config", f"test.out={out}", "--config", "test.count=100",
                check=True)
    # a wrong token: 401, and nothing changes
    status, doc = cluster.api("/api/v1/topologies/seq", method="DELETE", token="not-the-token")
    assert status == 401 and "token" in doc["error"]
    r = cluster.cli("kill", "seq", token="not-the-token")
    assert r.returncode != 0 and "token" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert [x["name"] for x in json.loads(cluster.cli("list", "--json", check=True).stdout)] == ["seq"]
    # a name in use: refused, the running one untouched
    r = cluster.cli("submit", SEQ, "--name", "seq", "--config", f"test.out={out}", "--config", "test.count=5")
    assert r.returncode != 0 and "already exists" in r.stderr
    # CURVE off: a nimbus with ZooKeeper credentials does not open a topology's ports to strangers
    r = cluster.cli("submit", SEQ, "--name", "open", "--config", "bittern.cluster.curve=false")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "bittern.cluster.curve = false" in r.stderr and "--insecure" in r.stderr, r.stderr
    # code that imports on the client but not on the workers: FAILED with the traceback, not retried
    r = cluster.cli("submit", BROKEN, "--name", "broken")
    assert r.returncode != 0
    assert "bittern_missing_dependency" in r.stderr, r.stderr
    rows = {x["name"]: x for x in json.loads(cluster.cli("list", "--json", check=True).stdout)}
    assert rows["broken"]["state"] == "FAILED"
    time.sleep(3)  # a negative check (not restarted): nothing to wait for but time
    assert not [p for p in processes_of(os.path.join(cluster.supervisors["a"].data, "run", "broken"))], \
        "a failed topology is not restarted"
    cluster.cli("kill", "broken", check=True)
    cluster.cli("kill", "seq", check=True)
    wait_for(lambda: not cluster.topology_pids("a"), timeout=30, what="processes gone after kill")
