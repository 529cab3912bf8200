"""DS2's true-rate model (Kalavri et al., "Three steps is all you need", OSDI 2018):
how many tasks each component needs, for the whole topology at once. Pure.

Dhalion's detectors and diagnosers say *why* (under-provisioned, slow instance, data
skew, over-provisioned); this says *how much*:

* **true processing rate per task** of a bolt = tuples executed / seconds busy, summed
  over its tasks (busy = the sensors' ``utilization``: the larger of capacity, the
  fraction of the window spent executing, and the CPU share). It is what a task can
  do, whatever it was offered: it does not depend on backpressure (a task held up by
  backpressure is idle, not busy; one saturated is busy all the time).
* **demand at each spout** = its emit rate corrected for the time it was paused by
  backpressure: ``rate / (1 - throttled)``. Above ``MAX_TRUSTED_THROTTLE`` that
  correction is noise over a sliver of the window, so the demand is only known to be
  *at least* what it emitted (or the last trusted estimate): ``exact`` is False.
* **selectivity** of a bolt = tuples emitted per tuple executed (its own counts, so
  queues filling up downstream do not bias it). The metrics count emits on all
  streams together; a component that declares one output stream sends them all on
  it; for several, each stream's share is inferred from the input rate of a consumer
  fed by that stream alone (else all of them are assumed on each: an upper bound).
* **demand** is propagated in topological order over the topology's streams
  (:class:`Graph`, from the topology definition): a bolt's demand is the sum over its
  inputs of the upstream output demand times that stream's share.
* **required parallelism** = ``ceil(demand / (true rate per task x target.utilization))``,
  bounded by 1, the component's cap and ``max.parallelism``. Rates are noisy: a
  demand within ``NOISE`` (5%) of a whole number of tasks is rounded down (the target
  utilization leaves more room than that; never past half of it, so not at all at a
  target of 1), so noise in the measurements of up to 5% does not ask for more than
  needed. An ``all``-grouped input reaches every task and
  a ``global`` one the first: that part of the load does not shrink with more tasks.

Spouts set the demand and are never scaled. Anything not measured leaves the numbers
None and says why (``why``), which the resolvers then fall back from.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

MAX_TRUSTED_THROTTLE = 0.9  # a spout paused more than this: its demand is a lower bound
NOISE = 0.05  # relative: rates this close to a whole number of tasks round down
UNSPLIT = ("all", "global")  # groupings whose load more tasks do not split
EVEN_GROUPINGS = ("shuffle", "none")  # round robin from each emitter: no instance gets more than another
DEFAULT_STREAM = "default"


def _r(v, n=2):
    return None if v is None else round(v, n)


def _rate(v):
    return "?" if v is None else f"{v:.0f}/s" if v >= 10 else f"{v:.2g}/s"


@dataclass(frozen=True)
class Graph:
    """The topology's streams: ``edges`` (source, stream, target, grouping kind),
    ``outputs`` (component -> its declared streams), ``kinds`` (component -> "spout" |
    "bolt")."""
    edges: tuple = ()
    outputs: dict = field(default_factory=dict)
    kinds: dict = field(default_factory=dict)

    @classmethod
    def from_topology(cls, tdef):
        """From a :class:`bittern.api.topology.TopologyDef`."""
        edges, outputs, kinds = [], {}, {}
        for c in tdef.components.values():
            kinds[c.name] = c.kind
            outputs[c.name] = tuple(c.outputs)
            for i in c.inputs:
                edges.append((i.component, i.stream, c.name, i.grouping.kind))
        return cls(tuple(edges), outputs, kinds)

    @classmethod
    def of(cls, *edges, outputs=None, kinds=None):
        """From ``(source, target)``, ``(source, target, grouping)`` or ``(source, target,
        grouping, stream)`` tuples (tests, and hand-made graphs); a component that is
        never a target is a spout unless ``kinds`` says otherwise."""
        out = []
        for e in edges:
            if not isinstance(e, (tuple, list)) or not 2 <= len(e) <= 4 or \
                    not all(isinstance(x, str) and x for x in e):
                raise ValueError(f"a graph edge must be (source, target[, grouping[, stream]]), got {e!r}")
            src, dst = e[0], e[1]
            grouping = e[2] if len(e) > 2 else "shuffle"
            stream = e[3] if len(e) > 3 else DEFAULT_STREAM
            out.append((src, stream, dst, grouping))
        targets = {e[2] for e in out}
        names = {e[0] for e in out} | targets
        k = {n: ("bolt" if n in targets else "spout") for n in names}
        k.update(kinds or {})
        return cls(tuple(out), dict(outputs or {}), k)

    def inputs(self, component):
        """[(source, stream, grouping)] into ``component``."""
        return [(s, st, g) for s, st, d, g in self.edges if d == component]

    def evenly_fed(self):
        """Bolts whose every input is spread round robin (shuffle, none), so that no
        instance of theirs can get more data than another over time."""
        fed = {}
        for _s, _st, d, g in self.edges:
            fed[d] = fed.get(d, True) and g in EVEN_GROUPINGS
        return {c for c, ok in fed.items() if ok}

    def streams(self, component):
        """The streams ``component`` declares (or, not known, those it has subscribers on)."""
        declared = self.outputs.get(component)
        if declared:
            return tuple(declared)
        return tuple(sorted({st for s, st, _, _ in self.edges if s == component}))

    def order(self, names=()):
        """(components in topological order, components on a cycle)."""
        nodes = set(names) | set(self.kinds) | {e[0] for e in self.edges} | {e[2] for e in self.edges}
        ups = {n: {e[0] for e in self.edges if e[2] == n and e[0] != n} for n in nodes}
        self_loop = {e[0] for e in self.edges if e[0] == e[2]}
        done, order = set(), []
        while True:
            ready = sorted(n for n in nodes - done if ups[n] <= done and n not in self_loop)
            if not ready:
                break
            order += ready
            done.update(ready)
        return order, nodes - done


@dataclass
class Estimate:
    """The model's numbers for one component (tuples/s). ``demand``: offered to a bolt
    (all inputs), or a spout's own unthrottled rate; ``observed``: what it executed (a
    bolt) or emitted (a spout); ``selectivity``: stream -> tuples out per tuple in (a
    spout: stream -> its share of the output); ``output``: the demand it passes on (all
    streams); ``required``: the tasks it needs at ``target.utilization`` (a spout: its
    own, never scaled); ``exact`` False: the demand is only a lower bound."""
    component: str
    kind: str | None
    current: int
    demand: float | None = None
    observed: float | None = None
    true_rate_per_task: float | None = None
    selectivity: dict = field(default_factory=dict)
    output: float | None = None
    required: int | None = None
    exact: bool = True
    why: str = ""

    def to_dict(self):
        return {"component": self.component, "kind": self.kind, "current": self.current,
                "demand": _r(self.demand), "observed": _r(self.observed),
                "true_rate_per_task": _r(self.true_rate_per_task),
                "selectivity": {k: _r(v, 4) for k, v in self.selectivity.items()},
                "output": _r(self.output), "required": self.required, "exact": self.exact, "why": self.why}


def required_tasks(demand, true_rate, target, fixed=0.0):
    """``ceil(demand / (true_rate x target))`` with the noise margin; ``fixed``: load
    every task carries whatever the parallelism (all/global groupings). None when
    ``fixed`` alone fills a task."""
    room = true_rate * target - fixed
    if room <= 0:
        return None
    if demand <= 0:
        return 1
    return max(1, math.ceil(round(demand / room / (1.0 + margin(target)), 9)))


def margin(target):
    """How far above the target rounding down may go: ``NOISE``, but never past half
    the room between the target and saturation (none at a target of 1)."""
    return min(NOISE, (1.0 - target) / (2.0 * target))


def _spout(e, insts, known):
    """A spout's demand: its tasks' emit rates, each corrected for the time it was paused."""
    if any(i.emit_rate is None for i in insts) or not insts:
        e.why = "no emit rate in the window"
        return
    e.observed = sum(i.emit_rate for i in insts)
    demand, lower, unknown_t, worst = 0.0, False, False, 0.0
    for i in insts:
        t = i.throttled
        if t is None:
            unknown_t, t = True, 0.0
        worst = max(worst, t)
        if t > MAX_TRUSTED_THROTTLE:
            lower = True
            demand += i.emit_rate
        else:
            demand += i.emit_rate / (1.0 - t)
    e.demand, e.exact = demand, not lower
    if lower:
        e.why = (f"paused {worst:.0%} of the window: demand at least the {_rate(e.observed)} it emitted "
                 f"(a correction over {1 - worst:.1%} of the window is noise)")
        if known is not None and known > demand:
            e.demand = known
            e.why += f"; {_rate(known)} as last measured"
    elif worst > 0:
        e.why = f"emitted {_rate(e.observed)}, paused {worst:.0%} of the window: demand {_rate(demand)}"
    else:
        e.why = f"emitted {_rate(e.observed)}, never paused"
    if unknown_t:
        e.why += " (no paused time reported: taken as 0)"


def _true_rate(insts):
    """(tuples per busy second per task, why not)."""
    both = [i for i in insts if i.execute_rate is not None and i.utilization is not None]
    if not both:
        return None, "no execute rate or busy time (capacity, CPU) measured"
    executed, busy = sum(i.execute_rate for i in both), sum(i.utilization for i in both)
    if executed <= 0:
        return None, "executed nothing in the window: its true rate is unknown"
    if busy <= 0:
        return None, "no busy time measured (capacity and CPU both 0)"
    return executed / busy, ""


def _shares(graph, name, out_rate, comps):
    """stream -> the share of ``name``'s emitted tuples that goes on it, and a note."""
    streams = graph.streams(name)
    subscribed = sorted({st for s, st, _, _ in graph.edges if s == name})
    if len(streams) <= 1:
        return {st: 1.0 for st in subscribed}, ""
    shares, assumed = {}, []
    for st in subscribed:
        share = None
        for s, st2, dst, g in graph.edges:
            if s != name or st2 != st:
                continue
            ins = graph.inputs(dst)
            c = comps.get(dst)
            if len(ins) != 1 or c is None or c.execute_rate is None or not out_rate:
                continue
            logical = c.execute_rate / (c.parallelism if g == "all" and c.parallelism else 1)
            share = min(1.0, logical / out_rate)
            break
        if share is None:
            assumed.append(st)
            share = 1.0
        shares[st] = share
    note = (f"no per-stream counts: all of its output assumed on {', '.join(assumed)}" if assumed else "")
    return shares, note


def estimate(m, graph, s, caps=None, known=None):
    """component -> :class:`Estimate`, for every component of ``graph`` (and any other
    measured). ``m``: Measurements; ``s``: Settings; ``caps``: component -> its own
    largest parallelism; ``known``: spout -> the last demand measured exactly."""
    caps, known = caps or {}, known or {}
    comps = m.components
    order, cyclic = graph.order(comps)
    est, shares = {}, {}
    for name in order + sorted(cyclic):
        c = comps.get(name)
        kind = graph.kinds.get(name) or (c.kind if c is not None else None)
        e = est[name] = Estimate(name, kind, c.parallelism if c is not None else 0)
        if c is None:
            e.why = "not measured (no task reported)"
            continue
        insts = m.of(name)
        if kind == "spout":
            _spout(e, insts, known.get(name))
            e.output, e.required = e.demand, e.current
            shares[name], note = _shares(graph, name, c.emit_rate, comps)
            e.selectivity = dict(shares[name])
            if note:
                e.why += "; " + note
            continue
        if name in cyclic:
            e.why = "on a cycle of the topology's streams: not modeled"
            continue
        ins = graph.inputs(name)
        if not ins:
            e.why = "no inputs in the topology"
            continue
        split = unsplit_all = unsplit_global = 0.0
        exact, gap = True, None
        for src, st, g in ins:
            up = est.get(src)
            if up is None or up.output is None:
                gap = f"upstream {src}: {up.why if up is not None else 'unknown'}"
                break
            d = up.output * shares.get(src, {}).get(st, 1.0)
            exact = exact and up.exact
            if g == "all":
                unsplit_all += d
            elif g == "global":
                unsplit_global += d
            else:
                split += d
        e.observed = c.execute_rate
        if gap is not None:
            e.why = f"demand unknown ({gap})"
            continue
        e.demand, e.exact = split + unsplit_all + unsplit_global, exact
        rate, no_rate = _true_rate(insts)
        e.true_rate_per_task = rate
        limit = min(s.max_parallelism, caps[name]) if caps.get(name) else s.max_parallelism
        if e.demand <= 0:
            e.required, e.why = 1, "no demand"
        elif rate is None:
            e.why = no_rate
        else:
            req = required_tasks(split, rate, s.target_utilization, unsplit_all + unsplit_global)
            if req is None:
                e.why = (f"its all/global-grouped input ({_rate(unsplit_all + unsplit_global)}) fills a task at "
                         f"{s.target_utilization:.0%} of {_rate(rate)}: more tasks do not help")
            else:
                e.required = min(req, limit)
                raw = e.demand / (rate * s.target_utilization)
                e.why = (f"demand {_rate(e.demand)}{'' if exact else ' (at least)'} / ({_rate(rate)} per busy "
                         f"task x {s.target_utilization:g}) = {raw:.2f} -> {e.required}"
                         + (f" (capped at {limit})" if req > limit else ""))
        # output: tuples out per tuple executed (an all-grouped input executes once per task)
        executions = split + unsplit_global + unsplit_all * (e.required or e.current)
        out_rate, exec_rate = c.emit_rate, c.execute_rate
        shares[name], note = _shares(graph, name, out_rate, comps)
        if exec_rate and out_rate is not None:
            sel = out_rate / exec_rate
            e.selectivity = {st: sel * sh for st, sh in shares[name].items()} or {DEFAULT_STREAM: sel}
            e.output = executions * sel
            if note:
                e.why += "; " + note
        elif executions <= 0:
            e.output = 0.0
        else:
            e.why += "; selectivity unknown (nothing executed or no emit rate)"
    return est


def trusted_demands(model):
    """spout -> demand, for the spouts whose demand was measured exactly."""
    return {n: e.demand for n, e in model.items() if e.kind == "spout" and e.exact and e.demand is not None}


def under(model, exclude=()):
    """Bolts the model needs more tasks for than they have (component -> Estimate)."""
    return {n: e for n, e in model.items() if e.kind != "spout" and n not in exclude
            and e.required is not None and e.required > e.current}


def excess(model):
    """Bolts the model needs fewer tasks for than they have, on exact numbers."""
    return {n: e for n, e in model.items() if e.kind != "spout" and e.exact
            and e.required is not None and e.required < e.current}


def summary(model, names=None):
    """The numbers a decision carries (component -> dict), for ``names`` (all: None)."""
    return {n: e.to_dict() for n, e in model.items() if names is None or n in names}


__all__ = ["Estimate", "Graph", "estimate", "excess", "required_tasks", "summary", "trusted_demands", "under"]
