"""Exactly once with real processes, the short version: a stateful counting bolt
killed with SIGKILL once, and the committed output of a transactional file sink holds
every input exactly once, with the right running counts.
(tests/test_exactly_once.py has the thorough fault-injection runs.)"""
from __future__ import annotations

import glob
import json
import os
import signal
from collections import Counter

from conftest import TOPOLOGIES, wait_for

SMOKE = os.path.join(TOPOLOGIES, "eo_smoke.py")
N = 1500


def committed(out):
    rows = []
    for path in glob.glob(os.path.join(out, "sink", "smoke-*-*.jsonl")):
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def test_kill_a_stateful_bolt_and_commit_each_input_once(bittern, tmp_path):
    out = str(tmp_path / "out")
    bittern("submit", SMOKE, "--name", "smoke", "--config", f"test.out={out}",
            "--config", f"test.count={N}", "--config", "test.rate=300", check=True)
    try:
        wait_for(lambda: len(committed(out)) > 300, timeout=30, what="committed output")
        victim = sorted(glob.glob(os.path.join(out, "pids", "count-*")))[0]
        with open(victim) as f:
            pid = int(f.read())
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: len(committed(out)) >= N, timeout=40, what="every number committed")
        rows = committed(out)
        ns = Counter(r[0] for r in rows)
        assert [n for n, c in ns.items() if c > 1] == [], "committed twice"
        assert set(ns) == set(range(N)) and len(rows) == N
        want = Counter(n % 5 for n in range(N))
        for key in range(5):
            counts = sorted(c for n, k, c in rows if k == key)
            assert counts == list(range(1, want[key] + 1)), f"key {key}"
        ckpts = bittern.json("metrics", "smoke", "--json")["checkpoints"]
        assert ckpts["restores"] >= 1 and ckpts["last_complete"] >= 2, ckpts
        assert sum(p["restarts"] for p in bittern.processes("smoke").values()) >= 1
        assert os.listdir(os.path.join(bittern.home, "checkpoints", "smoke"))
    finally:
        bittern("kill", "smoke", check=True)
    assert not os.path.exists(os.path.join(bittern.home, "checkpoints", "smoke")), "kill removes the checkpoints"
    assert not os.path.exists(os.path.join(bittern.home, "state", "checkpoints", "smoke")), "and their metadata"


def test_a_new_submission_does_not_resume_the_old_checkpoints(bittern, tmp_path):
    """kill, then submit under the same name: the checkpoints of the first submission
    are not restored (its spout starts from 0 again, the counts from 1)."""
    for run in ("a", "b"):
        out = str(tmp_path / run)
        bittern("submit", SMOKE, "--name", "again", "--config", f"test.out={out}",
                "--config", "test.count=200", "--config", "test.rate=400", check=True)
        try:
            wait_for(lambda: len(committed(out)) >= 200, timeout=30, what="every number committed")
            rows = committed(out)
            assert sorted(r[0] for r in rows) == list(range(200)), run
        finally:
            bittern("kill", "again", check=True)


def test_kill_the_stream_manager_and_commit_each_input_once(bittern, tmp_path):
    """Its instances keep running (and their pids): the topology master rolls every task
    back because the stream manager's pid changed."""
    out = str(tmp_path / "out")
    n = 1200
    bittern("submit", SMOKE, "--name", "smokesm", "--config", f"test.out={out}",
            "--config", f"test.count={n}", "--config", "test.rate=300", check=True)
    try:
        wait_for(lambda: len(committed(out)) > 200, timeout=30, what="committed output")
        os.kill(bittern.processes("smokesm")["stmgr-0"]["pid"], signal.SIGKILL)
        wait_for(lambda: len(committed(out)) >= n, timeout=40, what="every number committed")
        rows = committed(out)
        assert sorted(r[0] for r in rows) == list(range(n))
        assert bittern.json("metrics", "smokesm", "--json")["checkpoints"]["restores"] >= 1
    finally:
        bittern("kill", "smokesm", check=True)


def test_kill_the_topology_master_and_commit_each_input_once(bittern, tmp_path):
    """A new topology master resumes from the last complete checkpoint, in a new epoch."""
    out = str(tmp_path / "out")
    n = 1200
    bittern("submit", SMOKE, "--name", "smoketm", "--config", f"test.out={out}",
            "--config", f"test.count={n}", "--config", "test.rate=300", check=True)
    try:
        wait_for(lambda: len(committed(out)) > 200, timeout=30, what="committed output")
        os.kill(bittern.processes("smoketm")["tmaster-0"]["pid"], signal.SIGKILL)
        wait_for(lambda: len(committed(out)) >= n, timeout=40, what="every number committed")
        rows = committed(out)
        assert sorted(r[0] for r in rows) == list(range(n))
        assert bittern.json("metrics", "smoketm", "--json")["checkpoints"]["epoch"] >= 2
    finally:
        bittern("kill", "smoketm", check=True)
