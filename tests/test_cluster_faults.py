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
  delivery deadline (the constants below say what each is made of);
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

import inspect
import json
import os
import signal
import threading
import time
from collections import defaultdict

import psutil
import pytest

from bittern import config as cfg
from bittern.packing import PackingPlan
from bittern.topostatus import stall_bound
from clusterkit import (Cluster, EngineLog, ListSampler, alive, doubled_containers, kill_leftovers, process_tree,
                        signal_processes, topology_processes)
from conftest import TOPOLOGIES, wait_for
from eokit import check_exactly_once, committed_rows
from nimbus.daemon import RECONCILE_SECS
from supervisor.cluster import POLL_SECS, ClusterSupervisor
from supervisor.session import DEFAULT_GRACE_SECS

pytestmark = pytest.mark.slow

ALO_SEQ = os.path.join(TOPOLOGIES, "reliable_seq.py")
EO_SEQ = os.path.join(TOPOLOGIES, "exactly_once_seq.py")
N, RATE, KEYS = 4500, 300, 7
SAMPLE_SECS = 0.5
LIST_THREADS = 2  # one CLI call at a time each: a call takes ~1-2 s on a loaded 2-core machine

# -- what the bounds are made of: the suite's defaults, nothing tuned for this file --------
DEFAULTS = cfg.defaults()
SESSION_SECS = inspect.signature(ClusterSupervisor).parameters["session_timeout"].default  # its ZooKeeper session
ZK_TICK_SECS = 0.5  # scripts/zookeeper.sh's tickTime: ZooKeeper expires sessions on its ticks
ZK_RETRY_SECS = 1.0  # bittern/state/zk.py: reconnect attempts at most a second apart
NIMBUS_POLL_SECS = RECONCILE_SECS  # the leader reconciles (moves lost containers) this often
SUPERVISOR_POLL_SECS = POLL_SECS  # a supervisor reads the assignments this often
BACKOFF_MAX_SECS = DEFAULTS["bittern.restart.backoff.max.secs"]  # a process that died is restarted within
SHUTDOWN_SECS = DEFAULTS["bittern.shutdown.timeout.secs"]  # a stopped process is SIGKILLed after
# supervisor.session.lost.grace.secs: then a supervisor without a session stops its containers.
# (The default: a shorter one would have the supervisors stop their containers during f's
# ZooKeeper outage, which is longer than the session timeout.)
GRACE_SECS = DEFAULT_GRACE_SECS
MESSAGE_TIMEOUT_SECS = 3.0  # reliable_seq.py's topology.message.timeout.secs: a lost tuple is replayed after
CKPT_INTERVAL_SECS = 0.5  # exactly_once_seq.py's topology.stateful.checkpoint.interval.seconds
CKPT_TIMEOUT_SECS = DEFAULTS["topology.stateful.checkpoint.timeout.secs"]
STREAM_SECS = N / RATE  # the stream itself; all of it again when the at-least-once spout (no state) moved

DETECT_SECS = SESSION_SECS + ZK_TICK_SECS + NIMBUS_POLL_SECS  # nimbus sees the supervisor gone, moves its containers
RESTART_SECS = SUPERVISOR_POLL_SECS + BACKOFF_MAX_SECS  # the other one starts them (one capped restart allowed)
REPLAY_SECS = 2 * MESSAGE_TIMEOUT_SECS  # a tuple lost in the fault times out, once more if its replay met the move
# exactly once: the checkpoint in flight when a container was lost may only be abandoned at its
# timeout; then every task restores the last complete one and the stream goes on from there
RESTORE_SECS = 2 * CKPT_INTERVAL_SECS  # the restore, and the first checkpoint after it completes
# every number delivered, counted from the fault (a-e), or from ZooKeeper's return (f: commits need it)
MOVED_SECS = {"alo": DETECT_SECS + RESTART_SECS + REPLAY_SECS + STREAM_SECS,  # a-d
              "eo": max(DETECT_SECS + RESTART_SECS, CKPT_TIMEOUT_SECS) + RESTORE_SECS + STREAM_SECS}
CALM_SECS = REPLAY_SECS + STREAM_SECS  # e: no data path goes through nimbus; f: none of at least once's
ZK_DOWN_SECS = 15.0
ZK_EO_SECS = ZK_RETRY_SECS + RESTORE_SECS + STREAM_SECS  # f, from ZooKeeper's return (or the timeout of a
# checkpoint that could not be recorded, CKPT_TIMEOUT_SECS from the fault, if that is later)
# no two copies of a container once a supervisor without a session for the grace period
# stopped its containers (it reads the assignments every poll; stopping takes up to the
# shutdown timeout); measured from the moment it was cut off
GRACE_DEADLINE_SECS = SESSION_SECS + ZK_TICK_SECS + GRACE_SECS + SUPERVISOR_POLL_SECS + SHUTDOWN_SECS
SUPERVISOR_ARGS = ("--session-lost-grace", str(GRACE_SECS))
HANG_SECS = GRACE_DEADLINE_SECS + 2 * SAMPLE_SECS  # c: still hung at the census after the grace period
ORPHAN_SECS = 1.0  # PR_SET_PDEATHSIG: the kernel SIGKILLs the children as the supervisor dies
STUCK_SECS = stall_bound(CKPT_INTERVAL_SECS, CKPT_TIMEOUT_SECS) + 0.5  # + the topology master's health check
WHOLE_CAP_SECS = 60.0  # T3: how long after the fault's end the engine may take to report whole again
RUNNING_AGAIN_SECS = NIMBUS_POLL_SECS + 0.5 + CKPT_INTERVAL_SECS  # a move written, health checked, a checkpoint


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


class Run:
    """One fault's two topologies and everything observed while it happens."""

    def __init__(self, c, tag, tmp):
        self.c, self.tag = c, tag
        self.alo, self.eo = f"alo-{tag}", f"eo-{tag}"
        self.names = (self.alo, self.eo)
        self.out = {self.alo: str(tmp / "alo"), self.eo: str(tmp / "eo")}
        self.t0 = self.t_end = None
        self.events = []  # (time, text)
        self.failures = []
        self.lists = ListSampler(c, SAMPLE_SECS, LIST_THREADS)
        self.engine = EngineLog(c)
        self.whole, self.awaited = {}, []  # by the engine's logs: {name: when whole again}, what is not
        self.census = []  # (time, [process dicts])
        # (time, distinct numbers delivered, deliveries, the smallest number not delivered yet)
        self.progress = {n: [] for n in self.names}
        self.delivered_at = {}
        self.threads = []
        self._stop = threading.Event()
        self._lock = threading.Lock()

    # -- set-up -------------------------------------------------------------------------
    def submit(self):
        c = self.c
        common = ["--config", f"test.count={N}", "--config", f"test.rate={RATE}"]
        subs = [["submit", ALO_SEQ, "--name", self.alo, "--config", f"test.out={self.out[self.alo]}", *common],
                ["submit", EO_SEQ, "--name", self.eo, "--config", f"test.out={self.out[self.eo]}", *common,
                 "--config", f"test.keys={KEYS}"]]
        done = {}
        threads = [threading.Thread(target=lambda a: done.setdefault(a[3], c.cli(*a)), args=(a,)) for a in subs]
        for t in threads:  # both at once: a submission waits for its topology to run
            t.start()
        for t in threads:
            t.join()
        for name, r in done.items():
            assert r.returncode == 0, f"bittern submit {name}: exit {r.returncode}\n{r.stdout}{r.stderr}"
        self.asg = {n: c.assignment(n) for n in self.names}
        self.container_of = {n: PackingPlan.from_dict(a["packing"]).task_container for n, a in self.asg.items()}
        where = {n: {int(k): w["supervisor"] for k, w in a["containers"].items()} for n, a in self.asg.items()}
        assert all(set(w.values()) == {"a", "b"} for w in where.values()), f"not spanning both supervisors: {where}"
        c0 = {w[0] for w in where.values()}
        assert len(c0) == 1, f"container 0 of the two topologies on different supervisors: {where}"
        self.c0_sid = c0.pop()
        self.other_sid = ({"a", "b"} - {self.c0_sid}).pop()
        self.note(f"placed: {where}")

    def start(self):
        self.threads = [threading.Thread(target=self._census_loop, daemon=True)]
        self.threads[0].start()
        self.lists.start()
        wait_for(lambda: self.count(self.alo) >= RATE and self.count(self.eo) >= RATE / 2, timeout=60,
                 interval=0.2, what="numbers delivered by both topologies")

    def stop(self):
        self._stop.set()
        self.lists.stop()
        for t in self.threads:
            t.join(timeout=30)

    def note(self, text, t=None):
        t = time.monotonic() if t is None else t
        self.events.append((t, text))
        return t

    def rel(self, t):
        return f"{t - self.t0:+.1f}s" if self.t0 is not None else f"{t:.1f}"

    # -- observers ------------------------------------------------------------------------
    def deliveries(self, name):
        """Every number delivered so far, each time it was (at least once: the sink's
        lines; exactly once: the committed rows)."""
        out = self.out[name]
        if name == self.eo:
            return [r[0] for r in committed_rows(out)]
        seen = []
        for f in os.listdir(out) if os.path.isdir(out) else ():
            if f.startswith("sink-"):
                with open(os.path.join(out, f)) as fh:
                    seen += [int(x) for x in fh.read().split()]
        return seen

    def delivered(self, name):
        return set(self.deliveries(name))

    def count(self, name):
        with self._lock:
            return self.progress[name][-1][1] if self.progress[name] else 0

    def _census_loop(self):
        while not self._stop.is_set():
            t = time.monotonic()
            procs = [p for p in topology_processes(self.c) if p["topology"] in self.names]
            self.census.append((t, procs))
            for n in self.names:
                got = self.deliveries(n)
                seen = set(got)
                low = next((i for i in range(N) if i not in seen), N)
                entry = (t, len(seen), len(got), low)
                with self._lock:
                    if not self.progress[n] or self.progress[n][-1][1:] != entry[1:]:
                        self.progress[n].append(entry)
                k = len(seen)
                if k >= N and n not in self.delivered_at:
                    self.delivered_at[n] = t
            self._stop.wait(max(0.0, SAMPLE_SECS - (time.monotonic() - t)))

    # -- the fault's window -----------------------------------------------------------------
    def observe(self, deliver_by, dup_from, ok_from, errors_ok=()):
        """Watch until every number was delivered and each check had samples to judge by,
        or the deadlines passed; then judge. ``deliver_by``: {topology: deadline};
        ``dup_from``: no container twice from then on; ``ok_from``: the cluster is whole
        again (T3 counts from the later of it and the delivery); ``errors_ok``: windows in
        which the CLI may say ZooKeeper is unreachable."""
        self.deliver_by, self.dup_from, self.ok_from = deliver_by, dup_from, ok_from
        self.errors_ok = list(errors_ok)
        state, asked = self.c.state(), 0.0
        try:
            while True:
                now = time.monotonic()
                if now >= asked + 1.0:
                    asked = now
                    self._read_engine(state)
                # ... and long enough after the fault ended for a supervisor to restart what it would
                end = max(dup_from + 2 * SAMPLE_SECS, ok_from + RUNNING_AGAIN_SECS + 4 * SAMPLE_SECS,
                          self.t_end + RESTART_SECS + 2 * SAMPLE_SECS)
                for n in self.names:
                    at = self.delivered_at.get(n)
                    if at is not None:
                        end = max(end, at + RUNNING_AGAIN_SECS + 4 * SAMPLE_SECS)
                    else:  # failing: on until its deadline, and for the status said past it
                        end = max(end, deliver_by[n] + RUNNING_AGAIN_SECS + 4 * SAMPLE_SECS)
                    if n in self.whole:
                        end = max(end, self.whole[n] + RUNNING_AGAIN_SECS + 4 * SAMPLE_SECS)
                    else:  # the engine has not said it is whole again: wait for it, up to the cap
                        end = max(end, min(now + 1.0, self.t_end + WHOLE_CAP_SECS))
                if now >= end:
                    break
                time.sleep(0.25)
        finally:
            state.close()
        self.stop()
        self.judge()

    def _read_engine(self, state):
        """When the engine's logs say each topology was whole again after the fault (see
        T3): into ``whole`` ({name: time}), and ``awaited`` (what it has not said yet).
        Only the supervisors the topology is assigned to count (nimbus shows it
        RESCHEDULING while one of them has no session)."""
        t0, whole, awaited = self.t0, {}, []
        sessions = {}  # supervisor -> when it had a session again (None: not yet)
        for sid in self.c.supervisors:
            lost, renewed = (([t for t in ts if t >= t0]) for ts in self.engine.sessions(sid))
            sessions[sid] = None if lost and (not renewed or renewed[-1] < lost[-1]) else max([t0, *renewed])
        for n in self.names:
            try:
                asg = state.assignment(n) or {}
            except Exception as e:  # noqa: BLE001 - ZooKeeper busy: the next read tells
                awaited.append(f"{n}: its assignment ({type(e).__name__})")
                continue
            hosts = {w.get("supervisor") for w in (asg.get("containers") or {}).values()}
            if any(sessions.get(h, t0) is None for h in hosts):
                awaited.append(f"{n}: a new ZooKeeper session of supervisor "
                               f"{', '.join(sorted(h for h in hosts if sessions.get(h, t0) is None))}")
                continue
            host = ((asg.get("containers") or {}).get("0") or {}).get("supervisor")
            up, running = self.engine.tmaster(host, n) if host else ([], [])
            since = up[-1] if up else None
            if since is None or (host != self.c0_sid and since < t0):
                awaited.append(f"{n}: its topology master on {host} up")
            elif not running or running[-1] < since:
                awaited.append(f"{n}: its topology master on {host} with every task")
            else:
                whole[n] = max([running[-1], *(sessions.get(h, t0) for h in hosts)])
        self.whole, self.awaited = whole, awaited

    def judge(self):
        f = self.failures
        # delivered: every number, by the deadline; committed exactly once
        for n in self.names:
            missing = set(range(N)) - self.delivered(n)
            at = self.delivered_at.setdefault(n, time.monotonic()) if not missing else None
            if missing and n == self.alo:  # (exactly once: check_exactly_once says it)
                f.append(f"{n}: {len(missing)} of {N} numbers never delivered, e.g. {sorted(missing)[:8]}")
            elif at is not None and at > self.deliver_by[n]:
                f.append(f"{n}: every number delivered only at {self.rel(at)}, after its deadline "
                         f"{self.rel(self.deliver_by[n])}")
        try:
            check_exactly_once(committed_rows(self.out[self.eo]), N, KEYS)
        except AssertionError as e:
            f.append(f"{self.eo}: not exactly once: {' '.join(str(e).split())[:300]}")
        self._judge_census()
        self._judge_lists()

    def _judge_census(self):
        for (topo, cont), seen in sorted(doubled_containers(self.census, self.container_of).items()):
            times = sorted({t for t, _, _ in seen})
            late = [t for t in times if t >= self.dup_from]
            line = (f"{topo}: container {cont} ran twice from {self.rel(times[0])} to {self.rel(times[-1])} "
                    f"({len(times)} censuses; {', '.join(sorted({r for _, r, _ in seen}))}; e.g. {seen[-1][2]})")
            self.note(line, times[0])
            if late:
                self.failures.append(f"{line}: still at {len(late)} censuses after {self.rel(self.dup_from)}")

    def _judge_lists(self):
        bad = defaultdict(list)  # rule -> [(time, text)]
        timeline = {n: [] for n in self.names}
        for ts, te, rc, states, err in self.lists.samples:
            if states is None:
                ok = any(ts < b and te > a for a, b in self.errors_ok) and "ZooKeeper" in err
                if not ok:
                    bad[f"T1 the CLI failed (exit {rc})"].append((ts, err[:200]))
                for n in self.names:
                    self._state_change(timeline[n], ts, f"error {rc}")
                continue
            for n in self.names:
                st = states.get(n, "absent")
                self._state_change(timeline[n], ts, st)
                if st in ("FAILED", "KILLED", "absent"):
                    bad[f"T1 {n} shown {st}"].append((ts, st))
                at = self.delivered_at.get(n)
                if st == "RUNNING" and (at is None or ts < at) and ts >= self.deliver_by[n] + RUNNING_AGAIN_SECS:
                    bad[f"T2 {n} RUNNING while numbers are overdue"].append((ts, st))
                if st == "RUNNING" and n == self.eo and self._stuck(n, ts):
                    bad[f"T2 {n} RUNNING with nothing committed for {STUCK_SECS:g}s"].append((ts, st))
                back = max(at or 0.0, self.ok_from, self.whole.get(n, 0.0))
                if at is not None and n in self.whole and ts >= back + RUNNING_AGAIN_SECS and st != "RUNNING":
                    bad[f"T3 {n} not RUNNING again after recovery"].append((ts, st))
        for n in self.names:
            if n in self.whole and self.whole[n] > self.t0:
                self.note(f"{n}: whole again by the engine's logs", self.whole[n])
        if self.awaited:
            self.failures.append(f"T3 the engine did not report the cluster whole again {WHOLE_CAP_SECS:g}s "
                                 f"after the fault's end: no {'; no '.join(self.awaited)}")
        for n, changes in timeline.items():
            self.note(f"{n} listed: " + ", ".join(f"{s} from {self.rel(t)}" for t, s in changes), self.t0)
        for rule, seen in bad.items():
            self.failures.append(f"bittern list: {rule}: {len(seen)} of {len(self.lists.samples)} samples, "
                                 f"{self.rel(seen[0][0])}..{self.rel(seen[-1][0])}, e.g. {seen[0][1]!r}")

    @staticmethod
    def _state_change(changes, t, state):
        if not changes or changes[-1][1] != state:
            changes.append((t, state))

    def _stuck(self, name, t):
        """Numbers remain, and nothing was delivered in the STUCK_SECS before ``t``."""
        with self._lock:
            prog = list(self.progress[name])
        before = [p for p in prog if p[0] <= t - STUCK_SECS]
        now = [p for p in prog if p[0] <= t]
        return bool(before) and now[-1][1] < N and now[-1][2] == before[-1][2]

    def report(self):
        lines = [f"fault {self.tag}: {self.lists.cadence()}, {len(self.census)} censuses; "
                 "deadlines " + ", ".join(f"{n} {self.rel(t)}" for n, t in self.deliver_by.items()) +
                 f"; duplicates judged from {self.rel(self.dup_from)}, RUNNING again from "
                 f"{self.rel(self.ok_from + RUNNING_AGAIN_SECS)} (and the delivery)"]
        lines += [f"  {self.rel(t)} {text}" for t, text in sorted(self.events, key=lambda e: e[0])]
        for n in self.names:
            at = self.delivered_at.get(n)
            with self._lock:
                prog = list(self.progress[n])
            marks, shown = [], None
            for i, (t, k, total, low) in enumerate(prog):  # when it changed, at most every 2 s
                if shown is None or t - shown >= 2.0 or i == len(prog) - 1:
                    marks.append(f"{self.rel(t)}:{k}" + (f"/{total}" if total != k else "")
                                 + (f"<{low}" if low < N else ""))
                    shown = t
            lines.append(f"  {n}: {self.count(n)}/{N} delivered" + (f", all at {self.rel(at)}" if at else "")
                         + "; progress (time:distinct numbers/deliveries<smallest missing) " + " ".join(marks))
        lines += [f"  FAIL {x}" for x in self.failures]
        return "\n".join(lines)


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
