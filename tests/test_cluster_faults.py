"""Issue 17's fault matrix in cluster mode: what a lost host, supervisor, nimbus or
ZooKeeper does to a reliable and an exactly-once topology spanning two supervisors.

One cluster for the whole module (two nimbus, supervisors ``a`` and ``b`` with 4 slots
each, the session's real ZooKeeper; nimbus's cluster-wide ``bittern.checkpoint.dir``
is a directory both "hosts" share, as in tests/test_cluster_store.py). Each test submits
two fresh topologies, tests/topologies/reliable_seq.py (at least once) and
tests/topologies/exactly_once_seq.py (exactly once), N numbers each at RATE a second,
with the suite's own defaults: placement puts container 0 of both on ``a`` and
container 1 on ``b``. Once numbers flow, one fault:

  a. frozen host holding container 0: SIGSTOP the supervisor and every descendant,
     SIGCONT them all once nimbus moved the containers and the new copies had
     RESTART_SECS to start (so they connect while the frozen ones hold their
     connections open, and the old ones wake up among them);
  b. the same for the host not holding container 0;
  c. hung supervisor (the supervisor process only; its children go on) on the host of
     container 0, until past the grace period (so only the containers' own fencing can
     stop the old copies), then SIGCONT;
  d. the supervisor of container 0 killed (kill -9) with its whole tree; the other one
     killed alone (its children must die by PR_SET_PDEATHSIG within ORPHAN_SECS);
  e. the leader nimbus killed (kill -9);
  f. ZooKeeper stopped for ZK_DOWN_SECS.

Checked for each, all failures collected and reported together:

* **delivered**: every number 0..N-1 reached the at-least-once sink at least once, and
  every number was committed exactly once (eokit.check_exactly_once), by the fault's
  delivery deadline (tests/faultkit.py's constants say what each is made of);
* **no container runs twice** after the fault's ``dup_from`` (a, b, c: the grace period
  after the supervisor was cut off; d-f: at once, nothing can legitimately be left):
  a census every SAMPLE_SECS of every topology process under both supervisors' data
  dirs, keyed by topology, role and container/task (clusterkit.topology_processes; a
  SIGSTOPped process does not count: it does not run);
* **``bittern list`` is truthful** at every sample (``bittern --cluster URLS list --json``
  in LIST_THREADS background threads, each one call at a time, starting every
  SAMPLE_SECS or as soon as its previous call returned; clusterkit.ListSampler).
  Truthful means, for each of the two topologies:
  T1. it is listed, and never FAILED or KILLED (every fault here is one the topology
      survives); the CLI answers, except while ZooKeeper is down, when the one-line
      "ZooKeeper ... unreachable" error is the truth;
  T2. it is not RUNNING while it fails at its job: (a) at a sample taken later than
      RUNNING_AGAIN_SECS past the fault's delivery deadline while numbers are still
      undelivered; (b) exactly once, at a sample taken when no number was committed
      for STUCK_SECS while numbers remain (bittern/topostatus.py's own stall rule,
      measured from the last commit the user saw, whichever topology master made it);
  T3. once every number was delivered and the cluster is whole again, it is RUNNING
      again within RUNNING_AGAIN_SECS, at every later sample. Whole again: the fault's
      own end (moved containers had RESTART_SECS to start, the standby leads, ZooKeeper
      is back), and what the engine itself logs (clusterkit.EngineLog): a supervisor
      whose ZooKeeper session expired has a new one, and the topology master of the
      container 0 assignment has every task registered, counted from when it came up
      (how long processes take to start is the machine's load, not the status's
      truth); a topology the engine never reports whole within WHOLE_CAP_SECS fails.
  (A container's supervisor seen gone by nimbus shows RESCHEDULING, but nimbus moves
  its containers within a reconcile, ~1 s, too short a window to sample reliably.)

Each test prints its timeline (fault, moves, states, duplicates, progress) for the report.
Fresh topologies per fault rather than one stream through all of them: a host fault
leaves every container on the other host, and only a new submission spreads a topology
over both again.
"""
from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from clusterkit import Cluster, alive, kill_leftovers, process_tree, signal_processes
from conftest import wait_for
from faultkit import (CALM_SECS, CKPT_TIMEOUT_SECS, GRACE_DEADLINE_SECS, HANG_SECS, MOVED_SECS, ORPHAN_SECS,
                      RESTART_SECS, RESTORE_SECS, SAMPLE_SECS, STREAM_SECS, SUPERVISOR_ARGS, ZK_DOWN_SECS,
                      ZK_EO_SECS, ZK_RETRY_SECS, Run)

pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def fc(zk_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    store = str(tmp / "shared-ckpt")
    os.makedirs(store)
    c = Cluster(zk_server, tmp, slots=4)
    c.nimbus_args = ["--config", f"bittern.checkpoint.dir={store}"]
    c.thaw = []  # processes a test stopped (SIGSTOP), resumed whatever happens
    try:
        for i in (0, 1):
            c.start_nimbus(i, args=c.nimbus_args)
        for sid in ("a", "b"):
            c.start_supervisor(sid, args=SUPERVISOR_ARGS)
        yield c
    finally:
        signal_processes(c.thaw, signal.SIGCONT)
        c.stop()


def ensure_cluster(c, notes):
    """Two nimbus, supervisors a and b registered, and no topology or topology process
    left by an earlier test (whatever is left is said and removed)."""
    for i, d in list(c.nimbuses.items()):
        if not d.alive():
            d.stop()
            c.start_nimbus(i, args=c.nimbus_args)
    for sid, d in list(c.supervisors.items()):
        if not d.alive():
            d.stop()
            c.start_supervisor(sid, args=SUPERVISOR_ARGS)
    wait_for(lambda: {"a", "b"} <= {s["id"] for s in c.cluster_info()["supervisors"]}, timeout=60,
             what="supervisors a and b registered")
    for row in json.loads(c.cli("list", "--json", check=True).stdout):
        notes.append(f"left by an earlier test: topology {row['name']} ({row['state']}); killed")
        c.cli("kill", row["name"])
    left = kill_leftovers(c, None, wait=30)
    if left:
        notes.append(f"left by an earlier test, SIGKILLed: {', '.join(left)}")


def wait_moved(run, sid, state, until):
    """When nimbus moved both topologies' containers off ``sid`` (None: not by ``until``)."""
    while time.monotonic() < until:
        asgs = [state.assignment(n) or {} for n in run.names]
        if all(a.get("containers") and all(w["supervisor"] != sid for w in a["containers"].values())
               for a in asgs):
            return run.note(f"nimbus moved the containers off {sid} (versions "
                            f"{[a.get('version') for a in asgs]})")
        time.sleep(0.2)
    run.note(f"nimbus did not move the containers off {sid}")
    return None


# -- the faults: each sets run.t0/t_end and calls run.observe -----------------------------------
def moved_deadlines(run):
    return {run.alo: run.t0 + MOVED_SECS["alo"], run.eo: run.t0 + MOVED_SECS["eo"]}


def frozen_host(run, sid):
    sup = run.c.supervisors[sid]
    procs = process_tree(sup.pid)
    run.c.thaw.extend(procs)
    state = run.c.state()
    try:
        signal_processes(procs, signal.SIGSTOP)
        run.t0 = run.note(f"SIGSTOP supervisor {sid} and its {len(procs) - 1} descendants")
        moved = wait_moved(run, sid, state, run.t0 + max(MOVED_SECS.values()))
        # frozen on until the moved containers had their time to start elsewhere: their new
        # copies connect while the old ones hold their connections open (issue 17's lockout),
        # and the old ones wake up among them
        time.sleep(max(0.0, (moved or run.t0) + RESTART_SECS - time.monotonic()))
    finally:
        state.close()
        signal_processes(procs, signal.SIGCONT)
        run.c.thaw.clear()
    run.t_end = run.note(f"SIGCONT all {len(procs)}")
    run.observe(moved_deadlines(run), run.t0 + GRACE_DEADLINE_SECS, (moved or run.t_end) + RESTART_SECS)


def hung_supervisor(run, sid):
    proc = psutil.Process(run.c.supervisors[sid].pid)
    run.c.thaw.append(proc)
    state = run.c.state()
    try:
        proc.suspend()
        run.t0 = run.note(f"SIGSTOP supervisor {sid} only (its {len(process_tree(proc.pid)) - 1} "
                          "descendants run on)")
        moved = wait_moved(run, sid, state, run.t0 + HANG_SECS)
        time.sleep(max(0.0, run.t0 + HANG_SECS - time.monotonic()))
    finally:
        state.close()
        proc.resume()
        run.c.thaw.clear()
    run.t_end = run.note(f"SIGCONT supervisor {sid}")
    run.observe(moved_deadlines(run), run.t0 + GRACE_DEADLINE_SECS, (moved or run.t_end) + RESTART_SECS)


def killed_supervisor(run, sid, with_children):
    sup = run.c.supervisors[sid]
    tree = process_tree(sup.pid)
    state = run.c.state()
    try:
        signal_processes(tree if with_children else tree[:1], signal.SIGKILL)
        sup.popen.wait()
        run.t0 = run.note(f"kill -9 supervisor {sid}" + (f" and its {len(tree) - 1} descendants" if with_children
                                                           else f" alone ({len(tree) - 1} descendants)"))
        children = tree[1:]
        while time.monotonic() < run.t0 + 5 and any(map(alive, children)):
            time.sleep(0.02)
        living = [p for p in children if alive(p)]
        took = time.monotonic() - run.t0
        run.note(f"its descendants: {len(living)} of {len(children)} alive {took:.2f}s after the kill")
        if not with_children and (living or took > ORPHAN_SECS):
            run.failures.append(f"descendants of the killed supervisor {sid}: {len(living)} still alive after "
                                f"{took:.1f}s (PR_SET_PDEATHSIG should kill them within {ORPHAN_SECS:g}s)")
        moved = wait_moved(run, sid, state, run.t0 + max(MOVED_SECS.values()))
        run.t_end = moved or time.monotonic()
    finally:
        state.close()
    run.observe(moved_deadlines(run), run.t0 + (0 if with_children else ORPHAN_SECS), run.t_end + RESTART_SECS)


def killed_nimbus_leader(run):
    c = run.c
    leader = c.leader_url()
    i, victim = next((i, d) for i, d in c.nimbuses.items() if d.url == leader)
    os.kill(victim.pid, signal.SIGKILL)
    victim.popen.wait()
    run.t0 = run.note(f"kill -9 the leader nimbus {i} ({leader})")
    other = next(d for d in c.nimbuses.values() if d is not victim)
    try:
        wait_for(lambda: c.cluster_info(other.url).get("leader") == other.url, timeout=CALM_SECS,
                 interval=0.2, what="the standby leads")
        run.t_end = run.note("the standby leads")
    except AssertionError as e:
        run.failures.append(str(e))
        run.t_end = time.monotonic()
    run.observe({n: run.t0 + CALM_SECS for n in run.names}, run.t0, run.t_end)


def stopped_zookeeper(run):
    zk = run.c.zk
    run.t0 = run.note("stopping ZooKeeper")
    zk.stop()
    run.note("ZooKeeper stopped")
    try:
        time.sleep(ZK_DOWN_SECS)
    finally:
        zk.start()
    run.t_end = run.note("ZooKeeper started again")
    back = run.t_end + ZK_RETRY_SECS
    run.observe({run.alo: run.t0 + CALM_SECS,
                 run.eo: max(run.t_end + ZK_EO_SECS, run.t0 + CKPT_TIMEOUT_SECS + RESTORE_SECS + STREAM_SECS)},
                run.t0, back, errors_ok=[(run.t0, back + SAMPLE_SECS)])


def run_fault(fc, tmp_path, tag, fault):
    notes = []
    ensure_cluster(fc, notes)
    run = Run(fc, tag, tmp_path)
    for text in notes:
        run.note(text)
    t = [time.monotonic()]
    try:
        run.submit()
        t.append(time.monotonic())
        run.start()
        t.append(time.monotonic())
        fault(run)
    finally:
        run.stop()
        if run.t0 is None:
            run.t0 = time.monotonic()
        t.append(time.monotonic())
        for n in run.names:
            r = fc.cli("kill", n, timeout=60)
            if r.returncode != 0:
                run.failures.append(f"bittern kill {n}: exit {r.returncode}: {' '.join(r.stderr.split())[:200]}")
        left = kill_leftovers(fc, set(run.names), wait=30)
        if left:
            run.failures.append(f"still running 30s after bittern kill, SIGKILLed: {', '.join(left)}")
        t.append(time.monotonic())
        run.note("phases: " + ", ".join(f"{what} {b - a:.1f}s" for what, a, b in zip(
            ("submit", "first numbers", "fault and window", "kill"), t, t[1:])))
        print(run.report())
    assert not run.failures, run.report()


def test_a_frozen_host_holding_container_0(fc, tmp_path):
    run_fault(fc, tmp_path, "frozen0", lambda run: frozen_host(run, run.c0_sid))


def test_b_frozen_host_not_holding_container_0(fc, tmp_path):
    run_fault(fc, tmp_path, "frozen1", lambda run: frozen_host(run, run.other_sid))


def test_c_hung_supervisor_beyond_its_session_and_grace(fc, tmp_path):
    run_fault(fc, tmp_path, "hung", lambda run: hung_supervisor(run, run.c0_sid))


def test_d_supervisor_killed_with_its_children(fc, tmp_path):
    run_fault(fc, tmp_path, "kill9tree", lambda run: killed_supervisor(run, run.c0_sid, with_children=True))


def test_d_supervisor_killed_alone_its_children_die_with_it(fc, tmp_path):
    run_fault(fc, tmp_path, "kill9sup", lambda run: killed_supervisor(run, run.other_sid, with_children=False))


def test_e_leader_nimbus_killed(fc, tmp_path):
    run_fault(fc, tmp_path, "nimbus", killed_nimbus_leader)


def test_f_zookeeper_stopped(fc, tmp_path):
    run_fault(fc, tmp_path, "zk", stopped_zookeeper)
