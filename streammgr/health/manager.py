"""The health manager's policy loop (Dhalion), pure: metrics documents in, decisions out.

Each round (at most one per ``interval.secs``): measure, detect, diagnose, resolve,
and take at most one action (Heron runs one resolver per round, then delays the
policy until the topology has settled). The topology master carries out a
decision whose ``outcome`` is PENDING (scale: a rebalance; restart: kill the
instance, its supervisor restarts it) and calls :meth:`HealthManager.action_failed`
if it cannot. ``post.action.wait.secs`` later, the next round compares the symptom
the action was meant to relieve with what it was before: HELPED, DID_NOT_HELP or
UNKNOWN. An action that did not help (or failed) blacklists its (diagnosis,
component): Dhalion's blacklist, so the same fix is never tried again for the same
problem and the manager cannot oscillate (e.g. scale down, backpressure, scale up,
scale down again...). Reports (data skew, nothing left to scale) are logged, not
acted on, and not repeated for ``REPORT_REPEAT_SECS``.

The decision log (the last ``LOG_MAX``) is what ``bittern top`` and
``bittern healthmgr NAME`` show: :meth:`HealthManager.decisions`.
"""
from __future__ import annotations

import itertools
import logging
from collections import deque
from dataclasses import dataclass, field

from bittern.health_fmt import describe  # re-exported; it lives on the ground floor for the CLI

from .detectors import detect
from .diagnosers import diagnose
from .model import (BACKPRESSURE, BLACKLISTED, DID_NOT_HELP, FAILED, LOW_UTILIZATION, PENDING, REPORT, REPORTED,
                    UNATTRIBUTED_BACKPRESSURE, Action, Diagnosis, Settings, Symptom)
from .resolvers import evaluate, resolve
from .sensors import measure

log = logging.getLogger("bittern.healthmgr")

LOG_MAX = 200
REPORT_REPEAT_SECS = 600.0


def jsonable(v):
    """Plain JSON/msgpack data: dict keys as strings, tuples as lists, floats rounded."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)):
        return [jsonable(x) for x in v]
    if isinstance(v, float):
        return round(v, 4)
    return v


@dataclass
class Decision:
    id: int
    time: float
    diagnosis: object  # Diagnosis
    action: object  # Action
    symptoms: list
    outcome: str = PENDING
    outcome_time: float | None = None
    outcome_evidence: dict = field(default_factory=dict)

    def to_dict(self):
        return jsonable({
            "id": self.id, "time": self.time,
            "symptoms": [x.to_dict() for x in self.symptoms],
            "diagnosis": {"kind": self.diagnosis.kind, "component": self.diagnosis.component,
                          "task": self.diagnosis.task},
            "action": self.action.to_dict(), "outcome": self.outcome,
            "evidence": self.diagnosis.evidence, "outcome_time": self.outcome_time,
            "outcome_evidence": self.outcome_evidence})

    @classmethod
    def from_dict(cls, d):
        """A decision back from :meth:`to_dict` (a topology master that took over a
        pending one from its predecessor). The diagnosis keeps its evidence; its
        symptoms are the decision's."""
        symptoms = [Symptom(**x) for x in d.get("symptoms") or ()]
        dg = d.get("diagnosis") or {}
        diagnosis = Diagnosis(dg.get("kind"), dg.get("component"), dg.get("task"), tuple(symptoms),
                              dict(d.get("evidence") or {}))
        return cls(d["id"], d["time"], diagnosis, Action(**d["action"]), symptoms, d.get("outcome", PENDING),
                   d.get("outcome_time"), dict(d.get("outcome_evidence") or {}))

    def summary(self):
        a = self.action
        what = (f"{a.kind} {a.component} {a.parallelism_from} -> {a.parallelism_to}" if a.kind == "scale"
                else f"{a.kind} {a.component}" + (f" task {a.task}" if a.task is not None else ""))
        return f"#{self.id} {self.diagnosis.kind} {self.diagnosis.component}: {what} [{self.outcome}] {a.reason}"


@dataclass
class Pending:
    decision: Decision
    started: float
    before: object  # Measurements


class HealthManager:
    def __init__(self, config=None, now=0.0, caps=None):
        """``caps``: component -> the largest parallelism it may have, where lower than
        topology.healthmgr.max.parallelism (e.g. a stateful one: its key groups)."""
        self.settings = Settings.from_config(config)
        self.caps = dict(caps or {})
        self.started = now
        self.pending = None
        self.blacklist = {}  # (diagnosis kind, component) -> id of the decision that did not help
        self.log = deque(maxlen=LOG_MAX)
        self.low_windows = {}  # component -> rounds in a row with LOW_UTILIZATION
        self.last_round = None
        self.prev_doc = None
        self.last = None  # the last round's Measurements
        self._reported = {}  # (kind, component, task) -> time last logged
        self._ids = itertools.count(1)

    # -- the loop -----------------------------------------------------------------------
    def observe(self, doc, now):
        """One round over a metrics document; returns the decisions made or settled in
        it (carry out those whose ``outcome`` is PENDING). Sooner than ``interval.secs``
        after the last round, nothing happens."""
        s = self.settings
        if self.last_round is not None and now - self.last_round < s.interval_secs:
            return []
        elapsed = now - self.last_round if self.last_round is not None else None
        m = measure(doc, self.prev_doc, elapsed)
        self.last_round, self.prev_doc, self.last = now, doc, m
        out = []
        if self.pending is not None:
            if now - self.pending.started < s.post_action_wait_secs:
                return out
            out.append(self._settle(m, now))
        symptoms = detect(m, s)
        # "sustained": rounds in a row of low utilisation with no backpressure anywhere
        calm = (m.throttled or 0.0) <= s.backpressure_threshold and \
            not any(x.kind in (BACKPRESSURE, UNATTRIBUTED_BACKPRESSURE) for x in symptoms)
        low = {x.component for x in symptoms if x.kind == LOW_UTILIZATION} if calm else set()
        self.low_windows = {c: self.low_windows.get(c, 0) + 1 for c in low}
        for d in diagnose(symptoms, m, s, self.low_windows):
            action = resolve(d, m, s, self.caps.get(d.component))
            if action is None:
                continue
            key = (d.kind, d.component)
            if action.kind == REPORT:
                if self._fresh((d.kind, d.component, d.task), now):
                    out.append(self._record(now, d, action, symptoms, REPORTED))
                continue
            if key in self.blacklist:
                if self._fresh((BLACKLISTED,) + key, now):
                    out.append(self._record(now, d, action, symptoms, BLACKLISTED,
                                            {"blacklisted_by": self.blacklist[key]}))
                continue
            if self.pending is None:
                dec = self._record(now, d, action, symptoms, PENDING)
                self.pending = Pending(dec, now, m)
                self.low_windows = {}  # the topology changes: "sustained" starts over
                out.append(dec)
        return out

    def _fresh(self, key, now):
        t = self._reported.get(key)
        if t is not None and now - t < REPORT_REPEAT_SECS:
            return False
        self._reported[key] = now
        return True

    def _record(self, now, d, action, symptoms, outcome, outcome_evidence=None):
        mine = [x for x in symptoms if x.component in (d.component, None)]
        dec = Decision(next(self._ids), now, d, action, mine, outcome,
                       now if outcome not in (PENDING,) else None, outcome_evidence or {})
        self.log.append(dec)
        lvl = logging.INFO if outcome in (PENDING, REPORTED) else logging.DEBUG
        log.log(lvl, "health: %s; evidence %s", dec.summary(), jsonable(d.evidence.get("component", {})))
        return dec

    def _settle(self, m, now):
        p, self.pending = self.pending, None
        dec = p.decision
        outcome, ev = evaluate(dec.action, dec.diagnosis, p.before, m, self.settings)
        self._close(dec, now, outcome, ev)
        return dec

    def _close(self, dec, now, outcome, ev):
        dec.outcome, dec.outcome_time, dec.outcome_evidence = outcome, now, jsonable(ev)
        if outcome in (DID_NOT_HELP, FAILED):
            self.blacklist[(dec.diagnosis.kind, dec.diagnosis.component)] = dec.id
        log.log(logging.WARNING if outcome in (DID_NOT_HELP, FAILED) else logging.INFO,
                "health: %s (evidence %s)%s", dec.summary(), dec.outcome_evidence,
                "; blacklisted" if outcome in (DID_NOT_HELP, FAILED) else "")

    # -- from the topology master -------------------------------------------------------
    def action_failed(self, now, error):
        """The pending action could not be carried out: FAILED, and blacklisted."""
        if self.pending is None:
            return None
        dec, self.pending = self.pending.decision, None
        self._close(dec, now, FAILED, {"error": str(error)})
        return dec

    def action_applied(self, now):
        """The pending action took effect only now (a rebalance takes a while): the
        post-action wait counts from here."""
        if self.pending is not None:
            self.pending.started = now

    def resume(self, decision, before, now, applied=True):
        """Take over a PENDING ``decision`` (:meth:`Decision.from_dict`) made by an earlier
        manager, with the Measurements it was made on (``before``): it is judged
        ``post.action.wait.secs`` after ``now`` (``applied``), or, not applied, it is FAILED
        at once (pass ``applied`` as the error). Decision ids go on after it."""
        self.log.append(decision)
        self._ids = itertools.count(max(decision.id, max((d.id for d in self.log), default=0)) + 1)
        self.pending = Pending(decision, now, before)
        if applied is not True:
            return self.action_failed(now, applied)
        return decision

    def clear_blacklist(self):
        self.blacklist.clear()

    # -- what `bittern top` / `bittern healthmgr NAME` show ------------------------------
    def decisions(self, limit=None):
        items = list(self.log)[-limit:] if limit else list(self.log)
        return [d.to_dict() for d in items]

    def status(self):
        s = self.settings
        return jsonable({
            "enabled": s.enabled,
            "pending": self.pending.decision.to_dict() if self.pending else None,
            "blacklist": [{"diagnosis": k, "component": c, "decision": i} for (k, c), i in self.blacklist.items()],
            "last_round": self.last_round, "missing": self.last.missing if self.last else {},
            "low_utilization_rounds": dict(self.low_windows),
            "decisions": len(self.log)})


__all__ = ["Decision", "HealthManager", "Pending", "describe"]
