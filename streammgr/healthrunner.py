"""The health manager at work in the topology master: the thin I/O around the pure
policy loop of :mod:`streammgr.health` (``topology.healthmgr.enabled``).

Every ``topology.healthmgr.interval.secs`` the topology master's loop calls
:meth:`HealthRunner.tick`; it hands the metrics document to
:meth:`HealthManager.observe` and carries out what comes back:

* ``restart`` (a slow instance): ``restart(task, reason)``; the topology master
  sends RESTART_TASK to the stream manager of the task's container, which SIGTERMs
  the instance on its own host; its supervisor starts it again. Counted as applied
  once sent.
* ``scale``: ``scale({component: parallelism, ...})`` (every component the action
  scales, in one rebalance), which blocks until the rebalance is done and raises if
  it failed, runs in a background thread, so the topology
  master's loop never waits for it. No policy round runs while it is in flight;
  when it returns, :meth:`HealthManager.action_applied` (the post-action wait counts
  from then) or :meth:`HealthManager.action_failed` (blacklisted).
* ``report``: logged only.

Every decision is logged with its evidence (the topology master's log), kept in
memory (the last ones go into the metrics document as ``healthmgr``, which
``bittern healthmgr NAME`` and ``bittern top NAME`` show, locally and through
nimbus), and saved in the state manager at ``healthmgr/NAME/log`` so that a
topology master restarted (by a rebalance, or a crash) keeps the history and the
blacklist.

How a scale is carried out is the caller's: :func:`local_scaler` runs
``python -m bittern rebalance`` in its own session (it outlives this process if the
rebalance restarts the topology master); :func:`cluster_scaler` writes the request
document ``healthmgr/NAME/request`` for nimbus (nimbus/daemon.py carries it out as
a rebalance), and waits for nimbus to mark it done.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
import threading
import time

from bittern.wire import Op

from .health import HealthManager, measure
from .health.ds2 import Graph
from .health.manager import Decision
from .health.model import FAILED, PENDING, RESTART, SCALE

log = logging.getLogger("bittern.healthmgr")

DOC_DECISIONS = 20  # decisions in the metrics document
KEEP_DECISIONS = 100  # decisions saved in the state manager
SCALE_TIMEOUT = 300.0  # seconds a cluster scale request may wait for nimbus


# what the sensors read of a metrics document (streammgr/health/sensors.py): the copy
# saved with a pending action keeps only these
_TASK_KEYS = ("component", "container", "pid", "window_secs", "backpressure_initiated_fraction",
              "backpressure_fraction", "queued_bytes", "execute_rate", "emit_rate", "cpu_percent", "capacity",
              "execute_latency_count")
_STMGR_KEYS = ("backpressure_secs", "backpressure_secs_by_task", "queued_by_task")


def slim(doc):
    """The part of a metrics document the sensors read (None stays None)."""
    if not isinstance(doc, dict):
        return None
    return {"uptime_secs": doc.get("uptime_secs"),
            "components": {n: {"kind": (c or {}).get("kind")} for n, c in (doc.get("components") or {}).items()},
            "tasks": {t: {k: v[k] for k in _TASK_KEYS if k in v} for t, v in (doc.get("tasks") or {}).items()},
            "stmgrs": {c: {k: v[k] for k in _STMGR_KEYS if k in v} for c, v in (doc.get("stmgrs") or {}).items()}}


def log_path(name):
    return f"healthmgr/{name}/log"


def request_path(name):
    return f"healthmgr/{name}/request"


class HealthRunner:
    """``doc()``: the metrics document of a round; ``restart(task, reason)``;
    ``scale({component: parallelism})``: blocking, raises on failure; ``state``: where
    the decision log is saved (None: nowhere); ``ready()``: False while the topology
    is not running (no round then); ``busy()``: a rebalance is under way (no round
    then); ``parallelism(component)``: its number of tasks in this topology master's
    plan (to tell whether a predecessor's scale took effect); ``graph``: the
    topology's streams (:class:`~streammgr.health.ds2.Graph`) for the true-rate model
    (None: Dhalion's rules alone)."""

    def __init__(self, name, config, doc, restart, scale, state=None, clock=time.monotonic,
                 ready=lambda: True, caps=None, busy=lambda: False, parallelism=None, submission=None,
                 graph=None):
        self.name = name
        self.submission = submission  # the topology's submitted_at: a log of another submission is not ours
        self.doc, self.restart, self.scale, self.state = doc, restart, scale, state
        self.clock = clock
        self.ready, self.busy = ready, busy
        self.parallelism = parallelism
        self.hm = HealthManager(config, now=clock(), caps=caps, graph=graph)
        self.settings = self.hm.settings
        self.earlier = []  # decisions of earlier topology masters (dicts), oldest first
        self.in_flight = None  # (decision, thread, result dict) of a scale under way
        self._before = None  # (doc, previous doc) the pending decision was made on
        self._takeover = False  # a predecessor's pending action: its wait starts when we run
        self._wall = {}  # decision id -> wall-clock time it was made
        self._load()

    # -- persistence ----------------------------------------------------------------------
    def _load(self):
        if self.state is None:
            return
        try:
            saved = self.state.get(log_path(self.name)) or {}
        except Exception as e:  # noqa: BLE001 - the state manager is not the policy's business
            log.warning("health: cannot read the saved decision log: %s", e)
            return
        if saved and self.submission is not None and saved.get("submission") != self.submission:
            log.info("health: the saved decision log belongs to an earlier submission of %s; starting afresh",
                     self.name)
            return
        self.earlier = list(saved.get("decisions") or [])
        for b in saved.get("blacklist") or ():
            self.hm.blacklist[(b["diagnosis"], b["component"])] = b.get("decision")
        last = max((d.get("id") or 0 for d in self.earlier), default=0)
        self.hm._ids = itertools.count(last + 1)
        pending = saved.get("pending") or {}
        for i, d in enumerate(self.earlier):
            if d.get("outcome") != PENDING:
                continue
            if d.get("id") == pending.get("id") and i == len(self.earlier) - 1:
                del self.earlier[i]
                self._resume(d, pending)
            else:  # its topology master went away before it settled
                d["outcome"] = "INTERRUPTED"
        if self.earlier or self.hm.pending:
            log.info("health: %d earlier decision(s), a blacklist of %d%s loaded", len(self.earlier),
                     len(self.hm.blacklist), " and a pending action" if self.hm.pending else "")

    def _resume(self, d, pending):
        """Take over the pending decision of the previous topology master (a local
        rebalance restarts it): judged after the post-action wait if it took effect,
        FAILED if it did not."""
        now = self.clock()
        try:
            dec = Decision.from_dict(d)
            before = measure(pending.get("before"), pending.get("prev"))
        except Exception as e:  # noqa: BLE001 - a log from another version
            log.warning("health: cannot take over decision #%s: %s", d.get("id"), e)
            d["outcome"] = "INTERRUPTED"
            self.earlier.append(d)
            return
        if d.get("at"):
            self._wall[dec.id] = d["at"]
            dec.time = now - (time.time() - d["at"])  # its time on this process's clock
        a, applied = dec.action, True
        if a.kind == SCALE and self.parallelism is not None:
            for comp, want in a.scales().items():
                have = self.parallelism(comp)
                if have != want:
                    applied = f"the rebalance did not take effect: {comp} has {have} task(s), not {want}"
                    break
        self.hm.resume(dec, before, now, applied)
        self._takeover = applied is True
        self._before = (pending.get("before"), pending.get("prev"))
        log.info("health: took over decision #%d from the previous topology master: %s", dec.id,
                 "judged after the post-action wait" if applied is True else f"FAILED ({applied})")
        self._log(dec)
        self._save()

    def _save(self):
        if self.state is None:
            return
        doc = {"submission": self.submission, "decisions": self.decisions(KEEP_DECISIONS),
               "blacklist": [{"diagnosis": k, "component": c, "decision": i}
                             for (k, c), i in self.hm.blacklist.items()]}
        if self.hm.pending is not None and self._before is not None:
            doc["pending"] = {"id": self.hm.pending.decision.id, "before": slim(self._before[0]),
                              "prev": slim(self._before[1])}
        try:
            self.state.put(log_path(self.name), doc)
        except Exception as e:  # noqa: BLE001
            log.warning("health: cannot save the decision log: %s", e)

    # -- the loop -------------------------------------------------------------------------
    def tick(self, now=None):
        """Called from the topology master's loop (often); returns the decisions made
        or settled now. Cheap when no round is due."""
        now = self.clock() if now is None else now
        out = []
        if self.in_flight is not None:
            dec, thread, result = self.in_flight
            if thread.is_alive():
                return out  # no round while a rebalance is under way
            self.in_flight = None
            if result.get("error") is not None:
                self.hm.action_failed(now, result["error"])
                out.append(dec)
            else:
                log.info("health: #%d carried out: %s", dec.id, _scales(dec.action))
                self.hm.action_applied(now)
            self._save()
        last = self.hm.last_round
        if last is not None and now - last < self.settings.interval_secs:
            return out
        if not self.ready() or self.busy():
            return out
        if self._takeover:  # the topology runs again (a rebalance activates it last)
            self._takeover = False
            self.hm.action_applied(now)
        try:
            doc = self.doc()
        except Exception as e:  # noqa: BLE001
            log.warning("health: no metrics document this round: %s", e)
            return out
        # (kept a round as prev_doc: without the 10-minute chart series it has no use for)
        doc = {k: v for k, v in doc.items() if k not in ("healthmgr", "throughput")}
        doc["components"] = {c: {k: v for k, v in view.items() if k != "series"}
                             for c, view in (doc.get("components") or {}).items()}
        prev = self.hm.prev_doc
        decisions = self.hm.observe(doc, now)
        for d in decisions:
            if d.outcome == PENDING:
                self._before = (doc, prev)
        for d in decisions:
            self._log(d)
            if d.outcome == PENDING:
                self._carry_out(d, now)
        out += decisions
        if decisions:
            self._save()
        return out

    def _log(self, d):
        e = d.to_dict()
        log.info("health decision %s | symptoms %s | evidence %s%s", d.summary(),
                 json.dumps(e["symptoms"], sort_keys=True), json.dumps(e["evidence"], sort_keys=True),
                 f" | outcome evidence {json.dumps(e['outcome_evidence'], sort_keys=True)}"
                 if e["outcome_evidence"] else "")

    def _carry_out(self, d, now):
        a = d.action
        if a.kind == RESTART:
            try:
                self.restart(a.task, a.reason)
            except Exception as e:  # noqa: BLE001
                log.warning("health: #%d restart of task %s failed: %s", d.id, a.task, e)
                self.hm.action_failed(now, f"{type(e).__name__}: {e}")
                return
            self.hm.action_applied(now)
        elif a.kind == SCALE:
            result = {}

            def run():
                try:
                    self.scale(a.scales())
                    result["error"] = None
                except Exception as e:  # noqa: BLE001 - reported as the action's outcome
                    result["error"] = f"{type(e).__name__}: {e}"
                    log.warning("health: #%d scale (%s) failed: %s", d.id, _scales(a), result["error"])

            t = threading.Thread(target=run, name=f"healthmgr-scale-{d.id}", daemon=True)
            self.in_flight = (d, t, result)
            log.info("health: #%d scaling %s in the background", d.id, _scales(a))
            t.start()

    def wait(self, timeout=None):
        """Wait for a scale under way (tests; shutdown)."""
        if self.in_flight is not None:
            self.in_flight[1].join(timeout)

    # -- what is shown ----------------------------------------------------------------------
    def decisions(self, limit=None):
        """Decision-log entries, oldest first; ``at`` is the wall-clock time of each
        (``time`` is this process's monotonic clock, meaningless to a reader)."""
        mine = self.hm.decisions(limit)
        for d in mine:
            d["at"] = self._wall.get(d["id"]) or self._wall.setdefault(
                d["id"], round(time.time() - (self.clock() - d["time"]), 3))
            if d.get("outcome_time") is not None:
                d["outcome_at"] = round(d["at"] + d["outcome_time"] - d["time"], 3)
        items = self.earlier + mine
        return items[-limit:] if limit else items

    def describe(self, limit=DOC_DECISIONS):
        """The ``healthmgr`` part of the metrics document."""
        st = self.hm.status()
        st["in_flight"] = self.in_flight[0].id if self.in_flight is not None else None
        st["interval_secs"] = self.settings.interval_secs
        st["post_action_wait_secs"] = self.settings.post_action_wait_secs
        st["decisions"] = self.decisions(limit)
        st["failed"] = sum(1 for d in st["decisions"] if d.get("outcome") == FAILED)
        return st


# -- carrying out a scale ---------------------------------------------------------------------
def _scales(action):
    froms = action.froms()
    return ", ".join(f"{c} {froms.get(c)} -> {n}" for c, n in action.scales().items())


def _parallelisms(parallelisms):
    """``{component: n}`` checked: a one-line error naming what is wrong."""
    if not isinstance(parallelisms, dict) or not parallelisms:
        raise ValueError(f"a scale needs {{component: parallelism}}, got {parallelisms!r}")
    for c, n in parallelisms.items():
        if not isinstance(c, str) or not c or isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"a scale of component {c!r} to {n!r}: needs a name and a parallelism >= 1")
    return dict(parallelisms)


def local_scaler(name, home, timeout=SCALE_TIMEOUT):
    """Scale by running ``python -m bittern --home HOME rebalance NAME --parallelism C=N
    [C=N ...]`` (bittern/rebalance.py: every component in one rebalance) in its own session, its output in
    ``<home>/logs/NAME/healthmgr-rebalance.log`` rather than a pipe: a local rebalance
    restarts every process of the topology, this topology master included, and the
    rebalance must outlive it (the next topology master finds the outcome: see
    :meth:`HealthRunner._resume`)."""
    from bittern import logs

    def scale(parallelisms):
        par = _parallelisms(parallelisms)
        cmd = [sys.executable, "-m", "bittern", "--home", home, "rebalance", name,
               "--parallelism", *(f"{c}={n}" for c, n in par.items())]
        path = os.path.join(logs.log_dir(home, name), "healthmgr-rebalance.log")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        log.info("health: running %s (output in %s)", " ".join(cmd), path)
        with open(path, "ab") as out:
            start = out.tell()
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
            out.flush()
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                               timeout=timeout, start_new_session=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
        if r.returncode != 0:
            with open(path, "rb") as f:
                f.seek(start)
                tail = f.read().decode(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"bittern rebalance exited with {r.returncode}: {' / '.join(tail)}")
    return scale


def cluster_scaler(state, name, timeout=SCALE_TIMEOUT, poll=1.0, clock=time.monotonic, sleep=time.sleep):
    """Scale in cluster mode: write ``healthmgr/NAME/request`` for nimbus and wait until
    nimbus marks it ``done`` (or ``error``); a request nimbus does not answer fails
    after ``timeout`` seconds (and is blacklisted, so it is not repeated). The request
    names every component in ``parallelisms`` ({component: n}); ``component`` and
    ``parallelism`` repeat the first, for a nimbus that reads only those."""
    def scale(parallelisms):
        par = _parallelisms(parallelisms)
        first = next(iter(par))
        req = {"component": first, "parallelism": par[first], "parallelisms": par, "time": time.time(),
               "state": "REQUESTED"}
        state.put(request_path(name), req)
        deadline = clock() + timeout
        while clock() < deadline:
            doc = state.get(request_path(name)) or {}
            if doc.get("time") != req["time"]:
                raise RuntimeError("the request was replaced by another")
            if doc.get("state") == "DONE":
                return
            if doc.get("state") == "ERROR":
                raise RuntimeError(f"nimbus: {doc.get('error')}")
            sleep(poll)
        raise RuntimeError(f"nimbus did not carry out {request_path(name)} in {timeout:.0f}s "
                           "(is a nimbus leader running?)")
    return scale


def attach(tm):
    """A :class:`HealthRunner` for topology master ``tm``, or None when
    ``topology.healthmgr.enabled`` is off."""
    conf = tm.plan.config
    if not conf.get("topology.healthmgr.enabled"):
        return None
    def restart(task, reason):
        reg = tm.tasks.get(task)
        if reg is None:
            raise RuntimeError(f"task {task} is not registered")
        c = tm.plan.packing.task_container[task]
        if c not in tm.stmgrs:
            raise RuntimeError(f"the stream manager of container {c} is not connected")
        tm._send(tm.stmgr_ident(c), Op.RESTART_TASK, task=task, pid=reg.get("pid"), reason=reason)

    if tm.plan.state_url:
        scale = cluster_scaler(tm.state, tm.name)
    else:
        scale = local_scaler(tm.name, tm.plan.home)
    caps = None
    if conf.get("topology.reliability.mode") == "EFFECTIVELY_ONCE":
        groups = int(conf.get("bittern.state.key.groups") or 0)
        caps = {c: groups for c in tm.kinds} if groups else None
    # rates over the last metrics report when rounds are short, over the last minute otherwise
    window = "1m" if float(conf["topology.healthmgr.interval.secs"]) >= 60 else "interval"
    def busy():  # a rebalance holds its marker (bittern/rebalance.py MARKER) while it runs
        try:
            return tm.state.get(f"rebalance/{tm.name}") is not None
        except Exception:  # noqa: BLE001 - cannot tell: no round
            return True

    def parallelism(component):
        return len(tm.plan.packing.component_tasks.get(component) or ())

    runner = HealthRunner(tm.name, conf, lambda: tm.metrics_doc(window), restart, scale, state=tm.state,
                          ready=lambda: tm.phase == "RUNNING" and tm.active, caps=caps, busy=busy,
                          parallelism=parallelism,
                          submission=(tm.state.topology(tm.name) or {}).get("submitted_at"),
                          graph=Graph.from_topology(tm.plan.topology))
    log.info("health manager on: a round every %gs, %gs after an action before it is judged",
             runner.settings.interval_secs, runner.settings.post_action_wait_secs)
    return runner

