"""Claims of the README and docs/CLUSTER.md that no other test checked, in cluster mode
(issue 22, item 3), on one cluster (two nimbus, three supervisors, the session's real
ZooKeeper with credentials) and one topology (tests/topologies/flow.py: a trickle into
two sinks, over two containers on two supervisors):

1. "a new leader removes the ``rebalance/NAME`` markers of the previous one (it died
   mid-rebalance) and activates those topologies again" (docs/CLUSTER.md): the
   topology is deactivated and a marker left as a leader writes it (``active: true``);
   after the leader is killed the marker is gone, the topology RUNNING, tuples flow.
2. "A standby nimbus leads within the ZooKeeper session timeout (``--session-timeout``)
   of the leader's death; running topologies do not notice" (README): kill -9 the
   leader; the standby's own log line "leads" is at most the session timeout (4 s in
   tests/clusterkit.py) plus ZooKeeper's tick and the election's retry after the kill;
   the API answers from the new leader; every topology process keeps its pid.
3. "When a supervisor disappears, its containers move to free slots elsewhere; the
   containers that did not move keep running" (README): kill -9 the supervisor of
   container 1 with its processes; container 1 moves, container 0's processes keep
   their pids, and both sinks receive tuples again.

The leader change under load (delivery, ``bittern list``) is tests/test_cluster_faults.py's
fault e; this file checks what that one does not: the time, the pids, the markers.
"""
from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime

import pytest

from conftest import TOPOLOGIES, wait_for

pytestmark = pytest.mark.slow

FLOW = os.path.join(TOPOLOGIES, "flow.py")
NAME = "flow"
SESSION_SECS = 4.0  # tests/clusterkit.py starts nimbus with --session-timeout 4
ZK_TICK_SECS = 0.5  # scripts/zookeeper.sh's tickTime: sessions expire on ticks
ELECTION_RETRY_SECS = 1.0  # nimbus/daemon.py: run_election contends again a second after a failure
LEAD_BOUND_SECS = SESSION_SECS + 2 * ZK_TICK_SECS + ELECTION_RETRY_SECS


def sink_counts(out):
    got = {}
    for f in os.listdir(out) if os.path.isdir(out) else []:
        if f.startswith("sink-") and f.endswith(".txt"):
            try:
                got[f] = int(open(os.path.join(out, f)).read().split()[0])
            except (IndexError, ValueError):
                pass
    return got


def grown(out, before):
    now = sink_counts(out)
    return len(now) == 2 and all(now[f] > before.get(f, 0) + 5 for f in now)


def container_pids(cluster, asg, container):
    """{pid: command line} of the processes of ``container`` under its supervisor."""
    from conftest import processes_of
    sid = asg["containers"][container]["supervisor"]
    run = os.path.join(cluster.supervisors[sid].data, "run")
    out = {}
    for p in processes_of(run):
        cmd = " ".join(p.info["cmdline"] or [])
        if p.pid != cluster.supervisors[sid].pid:
            out[p.pid] = cmd
    return sid, out


def led_at(log_path, url):
    """The wall time of nimbus's "nimbus URL leads" line in its log (None: not yet)."""
    with open(log_path, errors="replace") as f:
        for line in f:
            if f"nimbus {url} leads" in line:
                return datetime.strptime(" ".join(line.split()[:2]), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def listed_state(cluster):
    rows = json.loads(cluster.cli("list", "--json", check=True).stdout)
    return {r["name"]: r["state"] for r in rows}.get(NAME)


def test_new_leader_clears_markers_in_time_without_touching_processes_and_unmoved_containers_survive(
        cluster, tmp_path):
    n0, n1 = cluster.start_nimbus(0), cluster.start_nimbus(1)
    for sid in ("a", "b", "c"):
        cluster.start_supervisor(sid)
    out = str(tmp_path / "flow")
    cluster.cli("submit", FLOW, "--name", NAME, "--config", f"test.out={out}", "--config", "test.rate=100", check=True)
    try:
        asg = cluster.assignment(NAME)
        sups = {c: w["supervisor"] for c, w in asg["containers"].items()}
        assert len(set(sups.values())) == 2, f"the two containers on two supervisors: {sups}"
        wait_for(lambda: grown(out, {}), timeout=60, what="tuples at both sinks")

        # -- 1. a leader's rebalance marker, left by a leader that dies -----------------------
        cluster.cli("deactivate", NAME, check=True)
        assert listed_state(cluster) == "PAUSED"
        state = cluster.state()
        try:
            marker = f"rebalance/{NAME}"
            state.put(marker, {"pid": 2**22 + 1, "host": "gone", "since": time.time(), "parallelism": {},
                               "active": True})
            pids = {c: container_pids(cluster, asg, c) for c in asg["containers"]}

            # -- 2. kill -9 the leader ------------------------------------------------------------
            leader = cluster.leader_url()
            victim, standby = (n0, n1) if leader == n0.url else (n1, n0)
            assert leader == victim.url
            os.kill(victim.pid, signal.SIGKILL)
            killed_at = time.time()
            victim.popen.wait()
            wait_for(lambda: cluster.cluster_info(standby.url).get("leader") == standby.url, timeout=60,
                     interval=0.2, what="the standby leading")
            took = wait_for(lambda: led_at(standby.log_path, standby.url), what="the standby's 'leads' line") \
                - killed_at
            print(f"the standby logged that it leads {took:.2f}s after the leader was killed "
                  f"(bound {LEAD_BOUND_SECS}s: --session-timeout {SESSION_SECS})")
            assert took <= LEAD_BOUND_SECS, f"the standby led {took:.1f}s after the leader's death"
            # the API answers from the new leader, and the CLI finds it among the URLs
            status, doc = cluster.api("/api/v1/topologies", url=standby.url)
            assert status == 200 and NAME in json.dumps(doc), (status, doc)
            assert cluster.cluster_info(standby.url)["this"] == standby.url
            # 1. the marker is gone and the topology active again
            wait_for(lambda: state.get(marker) is None, timeout=30, what="the new leader removing the marker")
            wait_for(lambda: listed_state(cluster) == "RUNNING", timeout=30, what="the topology active again")
            before = sink_counts(out)
            wait_for(lambda: grown(out, before), timeout=60, what="tuples flowing after the re-activation")
            # 2. running topologies do not notice: every process the same
            assert {c: container_pids(cluster, asg, c) for c in asg["containers"]} == pids, \
                "a topology process changed while the leader changed"
        finally:
            state.close()

        # -- 3. the supervisor of container 1 is lost -------------------------------------------
        lost = sups["1"]
        kept_sid, kept = pids["0"]
        cluster.kill9_supervisor(lost)
        wait_for(lambda: cluster.assignment(NAME)["containers"]["1"]["supervisor"] != lost, timeout=60,
                 interval=0.5, what=f"container 1 moved off supervisor {lost}")
        moved_to = cluster.assignment(NAME)["containers"]["1"]["supervisor"]
        before = sink_counts(out)
        wait_for(lambda: grown(out, before), timeout=90,
                 what="both sinks receiving again (the moved container started, its peers reconnected)")
        now_sid, now = container_pids(cluster, asg, "0")
        assert now_sid == kept_sid and cluster.assignment(NAME)["containers"]["0"]["supervisor"] == kept_sid
        gone = {pid: cmd for pid, cmd in kept.items() if now.get(pid) != cmd}
        assert not gone, f"container 0 did not move but these processes of it changed: {gone}"
        print(f"container 1 moved {lost} -> {moved_to}; container 0's {len(kept)} processes on {kept_sid} kept their pids")
    finally:
        cluster.cli("kill", NAME)
