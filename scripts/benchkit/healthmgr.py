"""``healthmgr`` (a row group, scripts/benchkit/groups.py): auto-scaling by the health
manager (issue 19), on the end-to-end topologies of tests/test_healthmgr.py
(tests/topologies/healthmgr_pipe.py and healthmgr_skew.py: a spout at a steady pace,
bolts that wait per tuple), submitted in local mode under ``--home`` with short
rounds (interval 3 s, post-action wait 6 s, scale-down after 2 calm rounds,
``target.utilization`` 1.0). Per run, one record per scenario:

* ``hm-up`` (the pipeline at 400/s: ``work`` 5.5 ms per tuple needs 3 tasks, ``more``
  3.5 ms needs 2, both at 1): scale actions until a scale up is judged HELPED and two
  quiet rounds follow, seconds from the submission to that verdict, the final
  parallelism and the over-provisioning ratio = final tasks / needed tasks (summed over
  the two bolts; needed = ceil(rate x ms per tuple)), and whether both bolts were in the
  first decision.
* ``hm-down`` (the same topology, the rate then dropped to a quarter: both need 1):
  scale actions and seconds from the drop to the scale down judged, final / needed.
* ``hm-skew`` (healthmgr_skew.py: 75 % of the ids on one key, fields grouping, 3 tasks):
  seconds to the DATA_SKEW report, scale or restart actions (0 wanted), final / needed
  (3 / 3: nothing scaled).

Every scenario ends with the spout stopped and every id it emitted acked and at the
sink (``ok`` needs it, exact ids), then ``bittern kill``.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time

from .common import ROOT
from .report import f1, f2, fmt, median_or_none, table

TOPOLOGIES = os.path.join(ROOT, "tests", "topologies")
HM_CONF = {"topology.healthmgr.enabled": "true", "topology.healthmgr.interval.secs": 3,
           "topology.healthmgr.post.action.wait.secs": 6, "topology.healthmgr.sustained.windows": 2,
           "topology.healthmgr.scale.down.windows": 2, "topology.healthmgr.target.utilization": 1.0,
           "topology.backpressure.high.watermark.bytes": 64 * 1024,
           "topology.backpressure.low.watermark.bytes": 32 * 1024}
HIGH, LOW = 400.0, 100.0
MS = {"work": 5.5, "more": 3.5}
TARGET_OVER = 1.0  # final / needed
TARGET_UP_ACTIONS = 2


def needed(rate):
    return {c: max(1, math.ceil(round(rate * ms / 1000.0, 9))) for c, ms in MS.items()}


def _ids(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return set()
    return {int(x) for x in data[:data.rfind(b"\n") + 1].split()}


def _scaled(d):
    a = d["action"]
    return {c: list(ft) for c, ft in a["targets"].items()} if a.get("targets") else \
        {a["component"]: [a["parallelism_from"], a["parallelism_to"]]}


class Topo:
    """One submitted topology: the CLI, its metrics document, its rate file."""

    def __init__(self, bt, name, topo, conf, rate, work):
        self.bt, self.name, self.work = bt, name, work
        self.out, self.rate_file = os.path.join(work, "out"), os.path.join(work, "rate")
        os.makedirs(work, exist_ok=True)
        self.set_rate(rate)
        pp = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.env = dict(os.environ, BITTERN_HOME=bt.home, PYTHONUNBUFFERED="1", PYTHONPATH=pp)
        args = ["submit", os.path.join(TOPOLOGIES, topo), "--name", name, "--wait", "0"]
        for k, v in {"test.out": self.out, "test.rate_file": self.rate_file, **HM_CONF, **conf}.items():
            args += ["--config", f"{k}={v}"]
        self.cli(*args)
        self.t0 = time.time()
        self.doc = None

    def cli(self, *args, timeout=120):
        r = subprocess.run([self.bt.py, "-m", "bittern", *args], env=self.env, capture_output=True, text=True,
                           timeout=timeout, cwd=ROOT)
        if r.returncode != 0:
            raise RuntimeError(f"bittern {args[0]} exited {r.returncode}: {r.stderr.strip()[-300:]}")
        return r.stdout

    def set_rate(self, rate):
        with open(self.rate_file + ".tmp", "w") as f:
            f.write(str(rate))
        os.replace(self.rate_file + ".tmp", self.rate_file)

    def poll(self):
        try:
            self.doc = json.loads(self.cli("metrics", self.name, "--json", "--window", "interval", timeout=30))
        except (RuntimeError, ValueError, subprocess.TimeoutExpired):
            return None
        return self.doc

    def decisions(self):
        return ((self.doc or {}).get("healthmgr") or {}).get("decisions") or []

    def scales(self):
        return [d for d in self.decisions() if d["action"]["kind"] == "scale"
                and d["outcome"] not in ("BLACKLISTED", "REPORTED")]

    def par(self, c):
        return ((self.doc or {}).get("components", {}).get(c) or {}).get("tasks")

    def settled(self):
        hm = (self.doc or {}).get("healthmgr") or {}
        return self.doc is not None and hm.get("in_flight") is None and not hm.get("pending") \
            and self.doc.get("active") and self.doc.get("phase") == "RUNNING"

    def until(self, pred, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if self.poll() is not None and pred():
                return True
        return False

    def nothing_lost(self):
        """Stop the spout; '' when every id emitted was acked and reached the sink."""
        self.set_rate(0)
        time.sleep(0.5)
        emitted = _ids(os.path.join(self.out, "emitted.txt"))
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not emitted <= _ids(os.path.join(self.out, "acks.txt")):
            time.sleep(0.5)
        unacked = emitted - _ids(os.path.join(self.out, "acks.txt"))
        sunk = set()
        for f in os.listdir(self.out):
            if f.startswith("sink-"):
                sunk |= _ids(os.path.join(self.out, f))
        lost = emitted - sunk
        if unacked or lost:
            return f"{len(unacked)} of {len(emitted)} ids never acked, {len(lost)} never at the sink"
        return ""

    def close(self, ok):
        """Kill it; its logs stay (under ``--home``) only when the run failed."""
        try:
            self.cli("kill", self.name)
        finally:
            shutil.rmtree(self.work, ignore_errors=True)
            if ok:
                self.bt._clean_logs(self.name)


class HealthGroup:
    row = "healthmgr"
    kind = "healthmgr"

    def __init__(self, args, bt, workload):
        self.args, self.bt = args, bt

    def run(self, run):
        return self._pipe() + self._skew()

    def _rec(self, row, problems, **kw):
        return {"peer": "bittern", "row": row, "ok": not problems, "problems": problems, **kw}

    def _pipe(self):
        name = self.bt.name("hm")
        t = Topo(self.bt, name, "healthmgr_pipe.py", {"test.work.ms": MS["work"], "test.more.ms": MS["more"]},
                 HIGH, os.path.join(self.args.home, "hm-bench", name))
        recs = []
        try:
            def helped():
                ups = t.scales()
                return t.settled() and ups and ups[-1]["outcome"] == "HELPED"
            p = [] if t.until(helped, 120) else ["no scale up judged HELPED in 120 s"]
            ups = t.scales()
            secs = (ups[-1].get("outcome_at") or time.time()) - t.t0 if ups else None
            time.sleep(7.0)  # two quiet rounds
            t.poll()
            ups = t.scales()
            need = needed(HIGH)
            final = {c: t.par(c) for c in MS}
            if len(ups) > TARGET_UP_ACTIONS:
                p.append(f"{len(ups)} scale actions up")
            both = bool(ups) and all(c in _scaled(ups[0]) for c in MS)
            recs.append(self._rec("hm-up", p, actions=len(ups), converge_s=secs, final=final, needed=need,
                                  over=sum(final.values()) / sum(need.values()) if None not in final.values()
                                  else None, both_first=both, most=max((x for d in ups for _, x in
                                                                        _scaled(d).values()), default=None)))
            t.set_rate(LOW)
            t_low = time.time()
            p = [] if t.until(lambda: t.settled() and all(t.par(c) == n for c, n in needed(LOW).items()), 90) \
                else ["not scaled down to what a quarter of the rate needs in 90 s"]
            downs = t.scales()[len(ups):]
            secs = (downs[-1].get("outcome_at") or time.time()) - t_low if downs else None
            need, final = needed(LOW), {c: t.par(c) for c in MS}
            lost = t.nothing_lost()
            p += [lost] if lost else []
            recs.append(self._rec("hm-down", p, actions=len(downs), converge_s=secs, final=final, needed=need,
                                  over=sum(final.values()) / sum(need.values()) if None not in final.values()
                                  else None))
            if lost:
                recs[0]["ok"], recs[0]["problems"] = False, recs[0]["problems"] + [lost]
        finally:
            t.close(bool(recs) and all(r["ok"] for r in recs))
        return recs

    def _skew(self):
        name = self.bt.name("hmskew")
        conf = {"test.work.ms": 5.5, "test.hot.percent": 75, "topology.healthmgr.queue.bytes.threshold": 16384}
        t = Topo(self.bt, name, "healthmgr_skew.py", conf, 300.0, os.path.join(self.args.home, "hm-bench", name))
        rec = None
        try:
            def skew():
                return next((d for d in t.decisions() if d["diagnosis"]["kind"] == "DATA_SKEW"), None)
            p = [] if t.until(lambda: skew() is not None, 60) else ["no DATA_SKEW report in 60 s"]
            d = skew()
            secs = (d.get("at") or time.time()) - t.t0 if d else None
            time.sleep(12.0)  # four more rounds
            t.poll()
            acted = [x for x in t.decisions() if x["action"]["kind"] != "report"]
            if acted:
                p.append(f"{len(acted)} action(s) taken on a hot key")
            lost = t.nothing_lost()
            p += [lost] if lost else []
            final = t.par("work")
            rec = self._rec("hm-skew", p, actions=len(acted), converge_s=secs, final={"work": final},
                            needed={"work": 3}, over=final / 3 if final else None)
            return [rec]
        finally:
            t.close(rec is not None and rec["ok"])

    def render(self, records):
        every = [r for r in records if r.get("kind") == self.kind]
        if not every:
            return ""
        rows = []
        for row, what in (("hm-up", "pipeline 400/s: work needs 3, more 2 (both at 1)"),
                          ("hm-down", "then 100/s: both need 1"),
                          ("hm-skew", "hot key (75%), 3 tasks: report, no scaling")):
            rs = [r for r in every if r["row"] == row]
            if not rs:
                continue
            ok = [r for r in rs if r["ok"]]
            finals = sorted({" ".join(f"{c}={n}" for c, n in r["final"].items()) for r in rs})
            rows.append([row, what, f"{len(ok)}/{len(rs)}", fmt([r["actions"] for r in rs], lambda v: "%g" % v),
                         fmt([r["converge_s"] for r in rs], f1), ", ".join(finals),
                         fmt([r["over"] for r in rs], f2)])
        head = ("\nauto-scaling (healthmgr: scripts/benchkit/healthmgr.py, the topologies of "
                "tests/test_healthmgr.py; rounds every 3 s, judged 6 s after an action, target.utilization 1.0): "
                "scale actions, seconds to converge (submission or rate drop -> the last action judged; hm-skew: "
                "-> the DATA_SKEW report), final parallelism, over-provisioning = final / needed tasks")
        out = [head, table(["row", "scenario", "ok", "actions", "converge s", "final", "final/needed"], rows)]
        up = [r for r in every if r["row"] == "hm-up"]
        if up:
            out.append(f"both bottlenecks in the first decision: {sum(1 for r in up if r.get('both_first'))}/"
                       f"{len(up)} runs; most tasks any action asked for: "
                       f"{max((r['most'] or 0) for r in up)}")
        for r in every:
            if r["problems"]:
                out.append(f"{r['row']}: {'; '.join(r['problems'])}")
        return "\n".join(out)

    def targets(self, records):
        out = []
        for row in ("hm-up", "hm-down", "hm-skew"):
            rs = [r for r in records if r.get("kind") == self.kind and r.get("row") == row and r.get("ok")]
            over = [r["over"] for r in rs if r.get("over") is not None]
            if over:
                out.append((f"{row}: final / needed tasks", fmt(over, f2), f"= {TARGET_OVER:g}",
                            median_or_none(over), lambda m: abs(m - TARGET_OVER) < 1e-9))
            if row == "hm-up" and rs:
                acts = [r["actions"] for r in rs]
                out.append((f"{row}: scale actions to converge", fmt(acts, lambda v: "%g" % v),
                            f"<= {TARGET_UP_ACTIONS}", median_or_none(acts), lambda m: m <= TARGET_UP_ACTIONS))
        return out
