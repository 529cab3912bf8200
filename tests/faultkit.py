"""The fault matrix's observer (tests/test_cluster_faults.py): the two topologies of one
fault, what is sampled while it happens (deliveries, a census of processes, ``bittern list``,
the engine's own logs), and the judgement against the rules in that file's docstring. The
constants say what each bound is made of: the suite's defaults, nothing tuned for a test."""
from __future__ import annotations

import inspect
import os
import threading
import time
from collections import defaultdict

from bittern import config as cfg
from bittern.packing import PackingPlan
from bittern.topostatus import stall_bound
from clusterkit import EngineLog, ListSampler, doubled_containers, topology_processes
from conftest import TOPOLOGIES, wait_for
from eokit import check_exactly_once, committed_rows
from nimbus.daemon import RECONCILE_SECS
from supervisor.cluster import POLL_SECS, ClusterSupervisor
from supervisor.session import DEFAULT_GRACE_SECS

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
