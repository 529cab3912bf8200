"""The health manager end to end (local mode, real processes).

A spout at a fixed rate, a bolt that can do about a third of it per task with
parallelism 1; with the health manager on (short windows for the test), the bolt is
scaled up until backpressure disappears and the spout's target rate is met, within
a bounded number of actions; then the rate drops and the bolt is scaled back down.
The test asserts the final parallelism range and that no tuple was lost.
"""
from __future__ import annotations

import os
import time

from bittern.errors import BitternError
from bittern.monitor import LocalSource
from bittern.state import LocalStateManager
from conftest import TOPOLOGIES, wait_for

TOPO = os.path.join(TOPOLOGIES, "healthmgr_seq.py")
NAME = "hm"
HIGH_RATE = 450.0  # tuples/s
WORK_MS = 5.5  # about 180 tuples/s per task: 0.4 of the high rate
LOW_RATE = 45.0
MAX_ACTIONS = 4  # scale actions in all, up and down


def ids(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [int(x) for x in data[:data.rfind(b"\n") + 1].split()]


def sink_ids(out):
    return [n for f in sorted(os.listdir(out)) if f.startswith("sink-") for n in ids(os.path.join(out, f))]


class Watch:
    """The metrics document (with its ``healthmgr`` part) through whichever topology
    master runs now (each rebalance starts a new one)."""

    def __init__(self, home):
        self.src = LocalSource(LocalStateManager(home), timeout=3.0)
        self.doc = None
        self.log = []

    def poll(self):
        try:
            self.doc = self.src.metrics(NAME, "interval")
        except BitternError:
            return None
        hm = self.doc.get("healthmgr") or {}
        for d in hm.get("decisions") or ():
            key = (d["id"], d["outcome"])
            if key not in self.log:
                self.log.append(key)
                print(f"{time.strftime('%H:%M:%S')} decision #{d['id']} {d['diagnosis']['kind']} "
                      f"{d['action']['kind']} {d['action'].get('parallelism_from')} -> "
                      f"{d['action'].get('parallelism_to')} [{d['outcome']}] {d['action'].get('reason')}")
        return self.doc

    def par(self):
        return (self.doc["components"].get("work") or {}).get("tasks") if self.doc else None

    def settled(self):
        """No action under way or waiting for its verdict, no rebalance running."""
        hm = (self.doc or {}).get("healthmgr") or {}
        return self.doc is not None and hm.get("in_flight") is None and not hm.get("pending") \
            and self.doc.get("active") and self.doc.get("phase") == "RUNNING"

    def scales(self):
        hm = (self.doc or {}).get("healthmgr") or {}
        return [d for d in hm.get("decisions") or () if d["action"]["kind"] == "scale"
                and d["outcome"] not in ("BLACKLISTED", "REPORTED")]


def stable(watch, out, rate, secs=5.0):
    """Over ``secs``: no stream manager in backpressure at any poll, its time in
    backpressure not growing, and the spout emitting at least 85% of ``rate``."""
    t0, n0 = time.monotonic(), len(ids(os.path.join(out, "emitted.txt")))
    bp0 = sum(s.get("backpressure_secs") or 0 for s in watch.doc["stmgrs"].values())
    par0 = watch.par()
    while time.monotonic() - t0 < secs:
        time.sleep(1.0)
        if watch.poll() is None or watch.doc.get("backpressure") or watch.par() != par0 or not watch.settled():
            return False
    span = time.monotonic() - t0
    emitted = (len(ids(os.path.join(out, "emitted.txt"))) - n0) / span
    bp = sum(s.get("backpressure_secs") or 0 for s in watch.doc["stmgrs"].values()) - bp0
    print(f"work x{par0}: spout {emitted:.0f}/s of {rate:.0f}/s, {bp:.1f}s of backpressure in {span:.1f}s")
    return emitted >= 0.85 * rate and bp <= 0.05 * span


def test_health_manager_scales_the_bottleneck_up_then_down_and_loses_nothing(bittern, home, tmp_path):
    out, rate_file = str(tmp_path / "out"), str(tmp_path / "rate")
    with open(rate_file, "w") as f:
        f.write(str(HIGH_RATE))
    conf = {"test.out": out, "test.rate_file": rate_file, "test.work.ms": WORK_MS,
            "topology.healthmgr.enabled": "true", "topology.healthmgr.interval.secs": 3,
            "topology.healthmgr.post.action.wait.secs": 6, "topology.healthmgr.sustained.windows": 2,
            "topology.backpressure.high.watermark.bytes": 64 * 1024,
            "topology.backpressure.low.watermark.bytes": 32 * 1024}
    args = ["submit", TOPO, "--name", NAME, "--wait", "0"]
    for k, v in conf.items():
        args += ["--config", f"{k}={v}"]
    t_start = time.monotonic()
    bittern(*args, check=True)
    watch = Watch(home)
    try:
        # -- scaled up until backpressure is gone and the spout's rate is met ----------------------
        deadline = time.monotonic() + 75
        high_par = None
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if watch.poll() is None or not watch.settled() or (watch.par() or 0) < 2:
                continue
            if stable(watch, out, HIGH_RATE):
                high_par = watch.par()
                break
        t_up = time.monotonic() - t_start
        assert high_par is not None, f"not scaled up to a stable state in time: decisions {watch.log}"
        ups = watch.scales()
        print(f"scaled up to {high_par} in {t_up:.0f}s with {len(ups)} action(s)")
        assert 3 <= high_par <= 6, high_par
        assert 1 <= len(ups) <= 3 and all(d["action"]["parallelism_to"] > d["action"]["parallelism_from"]
                                          for d in ups), ups
        assert ups[0]["action"]["parallelism_from"] == 1 and ups[0]["diagnosis"]["kind"] == "UNDER_PROVISIONED"
        assert ups[-1]["outcome"] in ("HELPED", "UNKNOWN"), ups[-1]

        # -- the rate drops: scaled back down -------------------------------------------------------
        with open(rate_file, "w") as f:
            f.write(str(LOW_RATE))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if watch.poll() is not None and watch.settled() and watch.par() < high_par:
                break
        low_par = watch.par()
        scales = watch.scales()
        print(f"scaled down to {low_par} after {time.monotonic() - t_start:.0f}s; decisions {watch.log}")
        assert low_par is not None and 1 <= low_par <= 2, (low_par, watch.log)
        assert len(scales) <= MAX_ACTIONS, scales
        down = scales[-1]
        assert down["diagnosis"]["kind"] == "OVER_PROVISIONED" and down["action"]["parallelism_to"] == low_par
        assert down["outcome"] in ("HELPED", "UNKNOWN"), down
        assert not [d for d in scales if d["outcome"] in ("FAILED", "DID_NOT_HELP")], scales

        # -- nothing lost: every id emitted was acked and reached the sink ---------------------------
        with open(rate_file, "w") as f:
            f.write("0")
        emitted = set(ids(os.path.join(out, "emitted.txt")))
        assert len(emitted) > 5000, len(emitted)
        wait_for(lambda: emitted <= set(ids(os.path.join(out, "acks.txt"))), timeout=40, interval=0.5,
                 what=f"acks of all {len(emitted)} emitted ids")
        missing = emitted - set(sink_ids(out))
        assert not missing, f"{len(missing)} ids never reached the sink, e.g. {sorted(missing)[:10]}"
        print(f"{len(emitted)} ids emitted, all acked and at the sink; {time.monotonic() - t_start:.0f}s in all")
    finally:
        watch.src.close()
        bittern("kill", NAME, check=True)


def test_health_manager_restarts_a_slow_instance(bittern, home, tmp_path):
    """One of three instances is slow (its first incarnation only): it alone initiates
    the backpressure and holds the only large queue while the three execute at the same
    rate, so it is SLOW_INSTANCE, restarted through its stream manager, and that helped.
    Nothing is lost (what the killed incarnation held is replayed)."""
    out, rate_file = str(tmp_path / "out"), str(tmp_path / "rate")
    with open(rate_file, "w") as f:
        f.write("300")
    conf = {"test.out": out, "test.rate_file": rate_file, "test.work.ms": 2.5, "test.slow.index": 0,
            "test.slow.ms": 12, "topology.message.timeout.secs": 5,
            "topology.healthmgr.enabled": "true", "topology.healthmgr.interval.secs": 3,
            "topology.healthmgr.post.action.wait.secs": 6,
            "topology.healthmgr.queue.bytes.threshold": 16 * 1024,
            "topology.backpressure.high.watermark.bytes": 64 * 1024,
            "topology.backpressure.low.watermark.bytes": 32 * 1024}
    args = ["submit", TOPO, "--name", NAME, "--wait", "0"]
    for k, v in conf.items():
        args += ["--config", f"{k}={v}"]
    bittern(*args, check=True)
    bittern("rebalance", NAME, "--parallelism", "work=3", check=True)  # three instances, one slow
    watch = Watch(home)
    try:
        slow_task = wait_for(lambda: next((int(f[5:]) for f in os.listdir(out) if f.startswith("slow-")), None)
                             if os.path.isdir(out) else None, what="the slow instance")
        pid = bittern.processes(NAME)[f"instance-{slow_task}"]["pid"]

        def restart_judged():
            watch.poll()
            hm = (watch.doc or {}).get("healthmgr") or {}
            return next((d for d in hm.get("decisions") or ()
                         if d["action"]["kind"] == "restart" and d["outcome"] != "PENDING"), None)
        try:
            d = wait_for(restart_judged, timeout=60, interval=1.0, what="a judged restart")
        except AssertionError:
            print(open(os.path.join(home, "logs", NAME, "tmaster.log")).read()[-6000:])
            raise
        assert d["diagnosis"]["kind"] == "SLOW_INSTANCE" and d["action"]["task"] == slow_task, d
        assert d["outcome"] == "HELPED", d
        proc = bittern.processes(NAME)[f"instance-{slow_task}"]
        assert proc["pid"] != pid and proc["restarts"] >= 1, proc
        r = bittern("healthmgr", NAME, check=True)
        assert f"SLOW_INSTANCE work task {slow_task}: restart task {slow_task} [HELPED]" in r.stdout, r.stdout
        log = open(os.path.join(home, "logs", NAME, "tmaster.log")).read()
        assert "health decision #" in log and "SLOW_INSTANCE" in log

        with open(rate_file, "w") as f:
            f.write("0")
        emitted = set(ids(os.path.join(out, "emitted.txt")))
        wait_for(lambda: emitted <= set(ids(os.path.join(out, "acks.txt"))), timeout=40, interval=0.5,
                 what=f"acks of all {len(emitted)} emitted ids")
        missing = emitted - set(sink_ids(out))
        assert not missing, f"{len(missing)} ids never reached the sink, e.g. {sorted(missing)[:10]}"
    finally:
        watch.src.close()
        bittern("kill", NAME, check=True)
