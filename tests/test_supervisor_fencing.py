"""A cluster supervisor stops its containers when it lost ZooKeeper for longer than
``--session-lost-grace`` (frozen by SIGSTOP past its session timeout, or the
ZooKeeper server stopped), and when one of its container processes exits fenced
(``EXIT_FENCED``); each time it starts again what the assignment still places here.
A real ZooKeeper and real processes; the tests play nimbus as in
test_cluster_supervisor.py, and its ``cluster`` fixture proves no process is left."""
from __future__ import annotations

import logging
import re
import signal
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

from bittern.proc import EXIT_FENCED, spawn
from supervisor.cluster import ClusterSupervisor
from conftest import wait_for
import test_cluster_supervisor
from test_cluster_supervisor import FLOW, HOST, expected_roles, free_block, roles

cluster = test_cluster_supervisor.cluster  # the fixture: ZooKeeper root, supervisors, leak check

GRACE = 3
SESSION = 2  # seconds; the test server's minSessionTimeout is 1 s
SHUTDOWN = "bittern.shutdown.timeout.secs=3"


def gone(pids):
    """None of ``pids`` runs any more (a zombie counts as gone: it is only not reaped yet)."""
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


def away_for(text):
    """The seconds without a session that the supervisor's log line gives."""
    m = re.search(r"stopping containers \[0\]: no ZooKeeper session for ([0-9.]+)s, "
                  r"over supervisor\.session\.lost\.grace\.secs = (\S+)s", text)
    assert m, text[-3000:]
    return float(m.group(1)), float(m.group(2))


def owner(cluster, sup):
    st = cluster.sm.zk.exists(f"{cluster.root}/supervisors/{sup.id}")
    return st.ephemeralOwner if st else None


def started_again(cluster, sup, before, name="flow"):
    """Every role of ``before`` runs again under a new pid; the new topology master is RUNNING."""
    now = wait_for(lambda: (lambda r: r if set(r) == set(before) and not set(r.values()) & set(before.values())
                            else None)(sup.roles()), 40, 0.2, "the containers started again")
    cluster.status(name, "RUNNING", pid=now[("tmaster", 0)])
    return now


@pytest.mark.slow
def test_frozen_supervisor_stops_its_containers_after_the_grace(cluster, tmp_path):
    a = cluster.supervisor(args=["--session-lost-grace", str(GRACE), "--session-timeout", str(SESSION)])
    cluster.registered(a)
    packing = cluster.submit("flow", FLOW, [f"test.out={tmp_path / 'flow'}", "topology.stmgrs=1", SHUTDOWN])
    cluster.assign("flow", {0: (a, 0)})
    cluster.status("flow", "RUNNING")
    before = a.roles()
    assert set(before) == expected_roles(packing, [0])
    node = owner(cluster, a)

    sup = psutil.Process(a.proc.pid)
    a.proc.send_signal(signal.SIGSTOP)  # the supervisor alone: its children keep running
    frozen = time.monotonic()
    try:
        wait_for(lambda: sup.status() == psutil.STATUS_STOPPED, 5, 0.05, "the supervisor stopped")
        # ZooKeeper expires its session (its node goes), and the freeze outlasts the grace
        wait_for(lambda: owner(cluster, a) is None, 20, 0.1, "the frozen supervisor's session to expire")
        time.sleep(max(0.0, frozen + GRACE + SESSION + 2 - time.monotonic()))
        assert a.roles() == before  # nothing stopped them while it was frozen
    finally:
        a.proc.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    wait_for(lambda: gone(before.values()), 10, 0.05, "the old containers' processes gone")
    stopped_in = time.monotonic() - resumed
    assert a.proc.poll() is None
    log = a.log()
    away, grace = away_for(log)
    assert grace == GRACE and away > GRACE + SESSION, log[-3000:]
    assert log.count("no ZooKeeper session for") == 1  # one line: one topology

    # a new session: the node is back, and the assignment still places flow here
    wait_for(lambda: owner(cluster, a) not in (None, node), 30, 0.1, "re-registration in a new session")
    after = started_again(cluster, a, before)
    assert set(after) == expected_roles(packing, [0])
    print(f"frozen {resumed - frozen:.1f}s; old processes gone {stopped_in:.1f}s after SIGCONT; "
          f"away {away:.1f}s by the supervisor's count")
    assert a.terminate() == 0 and not a.roles()
    assert gone(after.values())


def test_zookeeper_away_longer_than_the_grace_stops_and_restarts(cluster, zk_server, tmp_path):
    a = cluster.supervisor(args=["--session-lost-grace", str(GRACE), "--zk-connect-timeout", "5"])
    cluster.registered(a)
    packing = cluster.submit("flow", FLOW, [f"test.out={tmp_path / 'flow'}", "topology.stmgrs=1", SHUTDOWN])
    cluster.assign("flow", {0: (a, 0)})
    cluster.status("flow", "RUNNING")
    before = a.roles()
    assert set(before) == expected_roles(packing, [0])

    zk_server.stop()
    away_since = time.monotonic()
    try:
        wait_for(lambda: gone(before.values()), 3 * GRACE + 10, 0.1, "the containers stopped without ZooKeeper")
        print(f"ZooKeeper stopped: old processes gone after {time.monotonic() - away_since:.1f}s")
        assert a.proc.poll() is None and not a.roles()  # the supervisor runs on, without containers
        away, grace = away_for(a.log())
        assert grace == GRACE and away >= GRACE
    finally:
        zk_server.start()
    after = started_again(cluster, a, before)
    assert set(after) == expected_roles(packing, [0])
    assert cluster.sm.get(f"supervisors/{a.id}")["pid"] == a.proc.pid
    assert a.terminate() == 0 and not a.roles()
    assert gone(after.values())


def test_fenced_exit_stops_the_topology_here_and_reads_the_assignment_again(cluster, tmp_path, caplog):
    """In-process, stepped by the test: the stream manager of container 0 is replaced by
    a process that exits as a fenced one does (the stream manager's own fencing lives
    in streammgr/). The supervisor must not restart it with backoff: it stops every
    process of the topology here and starts the assignment's plan again at once."""
    caplog.set_level(logging.INFO, logger="bittern.supervisor")
    base = free_block(3)
    data = str(tmp_path / "inproc")
    sup = ClusterSupervisor(cluster.hosts, cluster.root, auth=cluster.auth, host=HOST, slots=1, base_port=base,
                            data_dir=data)

    def step_until(pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sup.step()
            v = pred()
            if v:
                return v
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")

    try:
        sup.start()
        packing = cluster.submit("flow", FLOW, [f"test.out={tmp_path / 'flow'}", "topology.stmgrs=1", SHUTDOWN])
        cluster.assign("flow", {0: (SimpleNamespace(id=sup.id, base=base), 0)})
        step_until(lambda: (cluster.sm.get("status/flow") or {}).get("phase") == "RUNNING", 60, "RUNNING")
        before = roles(data)
        assert set(before) == expected_roles(packing, [0])

        r = sup.running["flow"]
        p = r.group.procs[("stmgr", 0)]
        p.popen.terminate()
        p.popen.wait()
        p.popen = spawn([sys.executable, "-c", f"import sys; sys.exit({EXIT_FENCED})"])
        fake = p.popen.pid
        caplog.clear()
        after = step_until(lambda: (lambda now: now if set(now) == set(before)
                                    and not set(now.values()) & set(before.values()) else None)(roles(data)),
                           40, "the topology started again with new processes")
        lines = [rec.getMessage() for rec in caplog.records]
        fenced = [m for m in lines if "fenced" in m]
        assert fenced == ["container 0 of flow was fenced: a newer copy runs elsewhere; stopping its "
                          "processes here and reading the assignment again"], lines
        assert not any("restarted" in m or "stmgr-0" in m for m in lines), lines  # no backoff restart
        assert any("flow v1: started containers [0]" in m for m in lines), lines
        assert gone([fake, *before.values()]) and sup.running["flow"] is not r
        step_until(lambda: (cluster.sm.get("status/flow") or {}).get("pid") == after[("tmaster", 0)], 60,
                   "the new topology master RUNNING")
    finally:
        sup.shutdown()
    assert not roles(data)
