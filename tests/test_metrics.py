"""Metric values of a known topology are exact; latencies are plausible; errors are kept."""
from __future__ import annotations

import os

from conftest import TOPOLOGIES, wait_for

COUNTED = os.path.join(TOPOLOGIES, "counted.py")


def test_metrics_are_exact_and_errors_are_kept(bittern):
    n, every = 3000, 500
    bittern("submit", COUNTED, "--config", f"test.count={n}", "--config", f"test.raise.every={every}",
            check=True)
    try:
        def finished():
            doc = bittern.json("metrics", "counted", "--json", "--window", "all")
            spout = doc["components"]["numbers"]
            return doc if spout["exhausted"] == 1 and spout["pending"] == 0 and \
                doc["components"]["check"]["seen" if False else "executed"] >= n + n // every else None
        wait_for(finished, timeout=60, what="all tuples acked")
        wait_for(lambda: sum(t["user"].get("seen", 0) for t in bittern.json(
            "metrics", "counted", "--json")["tasks"].values()) == n, what="the user metric's final value")
        doc = bittern.json("metrics", "counted", "--json", "--window", "all")
        spout, bolt = doc["components"]["numbers"], doc["components"]["check"]
        raised = n // every  # numbers 0, 500, ... raise once each and are replayed
        assert (spout["emitted"], spout["acked"], spout["failed"], spout["timed_out"]) == (n + raised, n, raised, 0)
        assert (bolt["executed"], bolt["acked"], bolt["failed"], bolt["errors"]) == (n + raised, n, raised, raised)
        assert bolt["user"]["seen"] == n
        assert doc["phase"] == "RUNNING" and doc["reliability"] == "ATLEAST_ONCE" and doc["containers"] == 2
        # latencies: positive and ordered
        assert 0 < spout["complete_latency_p50_ms"] <= spout["complete_latency_p99_ms"]
        assert spout["complete_latency_ms"] > 0 and spout["complete_latency_count"] == n
        assert 0 < bolt["execute_latency_p50_ms"] <= bolt["execute_latency_p99_ms"]
        assert 0 <= bolt["capacity"] <= 1
        # per task: counts add up; processes are measured
        tasks = doc["tasks"]
        assert sum(t["executed"] for t in tasks.values() if t["component"] == "check") == n + raised
        assert all(t["rss_bytes"] > 10 * 2**20 and t["pid"] > 0 for t in tasks.values())
        assert all(s["alive"] and s["rss_bytes"] > 0 for s in doc["stmgrs"].values())
        # the human table shows the same totals
        r = bittern("metrics", "counted", "--window", "all", check=True)
        row = next(ln.split() for ln in r.stdout.splitlines() if ln.startswith("numbers"))
        assert row[1:6] == ["1", str(n + raised), "0", str(n), str(raised)]
        # errors: the last exceptions, newest first, with tracebacks
        errs = bittern.json("errors", "counted", "--json", "-n", 100)
        assert len(errs) == raised
        assert sorted(int(e["error"].split()[2]) for e in errs) == list(range(0, n, every))
        assert all(e["component"] == "check" and "in process" in e["traceback"] for e in errs)
        r = bittern("errors", "counted", "-n", 2, check=True)
        assert r.stdout.count("ValueError: number") == 4  # two errors: header + traceback line each
        r = bittern("metrics", "counted", "--window", "5m")
        assert r.returncode == 2 and "invalid choice" in r.stderr
    finally:
        bittern("kill", "counted", check=True)
    r = bittern("metrics", "counted")
    assert r.returncode == 1 and "topology 'counted' is not running" in r.stderr
