"""The health manager's policy loop (Dhalion), pure: metrics documents in, decisions out.

Each round (at most one per ``interval.secs``): measure, estimate (DS2's true-rate
model over the topology's streams, ds2.py, when the manager is given the
:class:`~streammgr.health.ds2.Graph`), detect, diagnose, resolve, and take at most
one action, which may scale several components at once (Heron runs one resolver per
round, then delays the policy until the topology has settled). The topology master
carries out a decision whose ``outcome`` is PENDING (scale: a rebalance; restart: kill the
instance, its supervisor restarts it) and calls :meth:`HealthManager.action_failed`
if it cannot. ``post.action.wait.secs`` later, the next round compares the symptom
the action was meant to relieve with what it was before, and with the model, what it
promised (backpressure gone, the demand executed): HELPED, FELL_SHORT (better, not
there: the same round acts again from the fresh rates), DID_NOT_HELP or UNKNOWN.
An action that did not help (or failed) blacklists its (diagnosis, component) for
each component it scaled: Dhalion's blacklist, so the same fix is never tried again
for the same problem and the manager cannot oscillate (e.g. scale down, backpressure, scale up,
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

from . import ds2
from .detectors import detect
from .diagnosers import diagnose
from .model import (BACKPRESSURE, BLACKLISTED, DATA_SKEW, DID_NOT_HELP, EXCESS_PARALLELISM, FAILED, LOW_UTILIZATION,
                    OVER_PROVISIONED, PENDING, PROCESSING_RATE_SKEW, REPORT, REPORTED, RESTART, SCALE, SLOW_INSTANCE,
                    UNATTRIBUTED_BACKPRESSURE, UNDER_PROVISIONED, Action, Diagnosis, Settings, Symptom)
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
    model: dict = field(default_factory=dict)  # component -> the true-rate model's numbers (ds2.Estimate)

    def to_dict(self):
        return jsonable({
            "id": self.id, "time": self.time,
            "symptoms": [x.to_dict() for x in self.symptoms],
            "diagnosis": {"kind": self.diagnosis.kind, "component": self.diagnosis.component,
                          "task": self.diagnosis.task},
            "action": self.action.to_dict(), "outcome": self.outcome,
            "evidence": self.diagnosis.evidence, "outcome_time": self.outcome_time,
            "outcome_evidence": self.outcome_evidence, "model": self.model})

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
                   d.get("outcome_time"), dict(d.get("outcome_evidence") or {}), dict(d.get("model") or {}))

    def summary(self):
        a = self.action
        what = (f"{a.kind} " + ", ".join(f"{c} {a.froms()[c]} -> {n}" for c, n in a.scales().items())
                if a.kind == SCALE
                else f"{a.kind} {a.component}" + (f" task {a.task}" if a.task is not None else ""))
        return f"#{self.id} {self.diagnosis.kind} {self.diagnosis.component}: {what} [{self.outcome}] {a.reason}"


@dataclass
class Pending:
    decision: Decision
    started: float
    before: object  # Measurements
    back: float | None = None  # a restart: when its new incarnation first reported


class HealthManager:
    def __init__(self, config=None, now=0.0, caps=None, graph=None):
        """``caps``: component -> the largest parallelism it may have, where lower than
        topology.healthmgr.max.parallelism (e.g. a stateful one: its key groups).
        ``graph``: the topology's streams (ds2.Graph); without it there is no true-rate
        model and the resolvers use Dhalion's rules alone."""
        self.settings = Settings.from_config(config)
        self.caps = dict(caps or {})
        self.graph = graph
        self.model = None  # the last round's ds2 estimates (component -> Estimate)
        self.known_demand = {}  # spout -> the last demand measured exactly
        self.down = {}  # component -> the model's required parallelism in calm rounds in a row below its own
        self.pressured = {}  # component -> {parallelism: what it executed when under-provisioned there}
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
        model = None
        if self.graph is not None:
            model = ds2.estimate(m, self.graph, s, self.caps, self.known_demand)
            self.known_demand.update(ds2.trusted_demands(model))
        self.model = model
        out = []
        if self.pending is not None:
            if self._restarting(m, now):  # its wait counts from the new incarnation's first report
                return out
            if now - self.pending.started < s.post_action_wait_secs:
                return out
            out.append(self._settle(m, now))
        symptoms = detect(m, s)
        # "sustained": rounds in a row of low utilisation with no backpressure anywhere
        calm = (m.throttled or 0.0) <= s.backpressure_threshold and \
            not any(x.kind in (BACKPRESSURE, UNATTRIBUTED_BACKPRESSURE) for x in symptoms)
        low = {x.component for x in symptoms if x.kind == LOW_UTILIZATION} if calm else set()
        self.low_windows = {c: self.low_windows.get(c, 0) + 1 for c in low}
        floors = self._floors(model)
        excess = {c: e for c, e in (ds2.excess(model) if (model is not None and calm) else {}).items()
                  if floors.get(c, 1) < e.current}
        self.down = {c: (self.down.get(c, []) + [max(e.required, floors.get(c, 1))])[-s.scale_down_windows:]
                     for c, e in excess.items()}
        symptoms += [Symptom(EXCESS_PARALLELISM, c, None, {
            "required": e.required, "parallelism": e.current, "rounds": len(self.down[c]),
            "demand": round(e.demand, 2), "true_rate_per_task": round(e.true_rate_per_task, 2)
            if e.true_rate_per_task is not None else None}) for c, e in excess.items()]
        modeled = {c for c, e in (model or {}).items() if e.required is not None}
        diagnoses = diagnose(symptoms, m, s, self.low_windows, self.down, modeled,
                             self.graph.evenly_fed() if self.graph is not None else ())
        self._remember_pressure(diagnoses, model)
        # what may not be scaled along with another component: more tasks do not fix it
        not_up = {d.component for d in diagnoses if d.kind in (DATA_SKEW, SLOW_INSTANCE)} | \
            {x.component for x in symptoms if x.kind == PROCESSING_RATE_SKEW} | \
            {c for k, c in self.blacklist if k == UNDER_PROVISIONED}
        not_down = {c for k, c in self.blacklist if k == OVER_PROVISIONED}
        for d in diagnoses:
            action = resolve(d, m, s, self.caps.get(d.component), model=model,
                             exclude=not_down if d.kind == OVER_PROVISIONED else not_up, down=self.down,
                             floors=floors)
            if action is None:
                if d.kind == OVER_PROVISIONED:  # held at its parallelism: the count starts over
                    self.down.pop(d.component, None)
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
                self.low_windows, self.down = {}, {}  # the topology changes: "sustained" starts over
                out.append(dec)
        return out

    def _restarting(self, m, now):
        """True while the pending action is a restart whose new incarnation first
        reported less than ``post.action.wait.secs`` ago: its wait counts from then, not
        from when the restart was sent, so the window judged is not the time it was down
        and the backlog that built up meanwhile (a restart that takes a few seconds
        looked as if it did not help). A new incarnation is a pid other than the one
        the decision was made on; none seen (or no pids reported): judged as usual."""
        p = self.pending
        a = p.decision.action
        if a.kind != RESTART:
            return False
        old, new = p.before.instances.get(a.task), m.instances.get(a.task)
        if p.back is None and old is not None and new is not None and None not in (old.pid, new.pid) \
                and new.pid != old.pid:
            p.back = now
        return p.back is not None and now - p.back < self.settings.post_action_wait_secs

    def _remember_pressure(self, diagnoses, model):
        """What a component executed where it was under-provisioned (saturated: that
        is all its tasks could do): it is never scaled down to that parallelism again
        while the demand is at least that (no flapping on a model that is optimistic
        about it)."""
        for d in diagnoses:
            e = (model or {}).get(d.component)
            if d.kind == UNDER_PROVISIONED and e is not None and e.observed and e.current:
                seen = self.pressured.setdefault(d.component, {})
                seen[e.current] = min(seen.get(e.current, e.observed), e.observed)

    def _floors(self, model):
        """component -> the fewest tasks it may be scaled down to now."""
        out = {}
        for c, seen in self.pressured.items():
            e = (model or {}).get(c)
            if e is None or e.demand is None:
                continue
            short = [p for p, could in seen.items() if e.demand >= (1 - ds2.NOISE) * could]
            if short:
                out[c] = max(short) + 1
        return out

    def _fresh(self, key, now):
        t = self._reported.get(key)
        if t is not None and now - t < REPORT_REPEAT_SECS:
            return False
        self._reported[key] = now
        return True

    def _record(self, now, d, action, symptoms, outcome, outcome_evidence=None):
        names = {d.component, *action.scales()}
        mine = [x for x in symptoms if x.component in names or x.component is None]
        numbers = jsonable(ds2.summary(self.model, names)) if self.model is not None else {}
        dec = Decision(next(self._ids), now, d, action, mine, outcome,
                       now if outcome not in (PENDING,) else None, outcome_evidence or {}, numbers)
        self.log.append(dec)
        lvl = logging.INFO if outcome in (PENDING, REPORTED) else logging.DEBUG
        log.log(lvl, "health: %s; evidence %s", dec.summary(), jsonable(d.evidence.get("component", {})))
        return dec

    def _settle(self, m, now):
        p, self.pending = self.pending, None
        dec = p.decision
        outcome, ev = evaluate(dec.action, dec.diagnosis, p.before, m, self.settings, self.model, dec.model)
        self._close(dec, now, outcome, ev)
        return dec

    def _close(self, dec, now, outcome, ev):
        dec.outcome, dec.outcome_time, dec.outcome_evidence = outcome, now, jsonable(ev)
        if outcome in (DID_NOT_HELP, FAILED):
            names = ev.get("blacklist") or [dec.diagnosis.component, *dec.action.scales()]
            for c in dict.fromkeys(names):
                self.blacklist[(dec.diagnosis.kind, c)] = dec.id
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
            "scale_down_rounds": {c: len(r) for c, r in self.down.items()},
            "model": ds2.summary(self.model) if self.model is not None else None,
            "decisions": len(self.log)})


__all__ = ["Decision", "HealthManager", "Pending", "describe"]
