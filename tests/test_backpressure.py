"""Backpressure end to end (Heron's scheme) with real processes, judged on what the
engine itself reports, never on rates or wall-clock phases.

Spouts emit as fast as they can into bolts that sleep 1 ms per tuple, over two
containers, with small watermarks (tests/topologies/backpressure_seq.py). Checked:

* every transition the stream managers log is the state machine's contract: "starting
  backpressure" with a queue at or above the high watermark, "clearing" with the queue
  that cleared it at or below the low one, strictly alternating per stream manager;
* the spouts were really held: between two reports taken inside one episode that every
  stream manager held throughout, neither spout emitted a single tuple (a spout that
  backpressure does not stop never shows such a pair), and their own
  ``__time-in-backpressure-ms`` grew;
* the bytes queued toward any destination, at every heartbeat the stream managers sent,
  stayed within the high watermark plus what the spouts could have handed to their
  sockets before the pause reached them (a structural bound, see QUEUE_BOUND);
* once the slow bolts speed up (a flag file), every stream manager logs a clearing
  transition after the speed-up and reports backpressure off;
* at the end (deactivated, drained): every number emitted was acked exactly once and
  reached the sink once, nothing failed or was dropped, the queues are empty and no
  stream manager holds backpressure.

The rates themselves (how much faster the sink goes without backpressure) are not
asserted here: they depend on the machine's load.
"""
from __future__ import annotations

import ast
import glob
import json
import os
import re
import time
from datetime import datetime

import pytest

from bittern.client import TMClient
from conftest import TOPOLOGIES, wait_for

pytestmark = pytest.mark.slow

TOPO = os.path.join(TOPOLOGIES, "backpressure_seq.py")
NAME = "bp"
SPOUT_TASKS = ("5", "6")  # one spout in each container (see the topology's docstring)
HIGH, LOW = 256 * 1024, 128 * 1024
HELD_SECS = 8.0  # the slow phase lasts until every stream manager reports this much backpressure
FLAT_SECS = 2.0  # the spouts emitted nothing for at least this long inside one held episode
# Small batches make the structural bound on the queues tight: after a queue crosses the
# high watermark, what can still arrive is what each spout had handed over before its
# pause message reached it: at most the instance socket's 100 batches (SNDHWM), the stream
# manager's receive pipe (libzmq's default RCVHWM, 1000) and, from the remote spout, a
# peer socket's 100 more, plus the kernel's socket buffers (a few hundred KB).
BATCH = 16
TUPLE_BYTES = 32  # a reliable [n] on the wire: msgpack'd value and its tree id (about 13 measured)
QUEUE_BOUND = HIGH + 2 * (100 + 1000 + 100) * BATCH * TUPLE_BYTES + 2 * 256 * 1024
TRANSITION = re.compile(r"^(\S+ \S+) INFO .*bittern\.stmgr: (starting|clearing) backpressure \(queued: (\{.*\})\)$")


class LineCounter:
    """Counts the lines of ``<out>/<prefix>*`` files, reading only what was appended."""

    def __init__(self, out, prefix):
        self.out, self.prefix = out, prefix
        self.offsets, self.count = {}, 0

    def __call__(self):
        if os.path.isdir(self.out):
            for f in os.listdir(self.out):
                if f.startswith(self.prefix):
                    path = os.path.join(self.out, f)
                    with open(path, "rb") as fh:
                        fh.seek(self.offsets.get(path, 0))
                        data = fh.read()
                    end = data.rfind(b"\n") + 1  # a line still being written is counted next time
                    self.offsets[path] = self.offsets.get(path, 0) + end
                    self.count += data.count(b"\n", 0, end)
        return self.count


def numbers(out, prefix):
    seen = []
    for f in sorted(os.listdir(out)):
        if f.startswith(prefix):
            with open(os.path.join(out, f), "rb") as fh:
                seen += [int(x) for x in fh.read().split()]
    return seen


def describe_difference(want, have):
    missing, extra = set(want) - set(have), set(have) - set(want)
    dups = len(have) - len(set(have))
    return (f"{len(missing)} missing (e.g. {sorted(missing)[:10]}), {len(extra)} unexpected "
            f"(e.g. {sorted(extra)[:10]}), {dups} duplicates")


def transitions(home):
    """``{container: [(wall time, "starting"|"clearing", {queue: bytes})]}`` from the
    stream managers' logs, in order."""
    out = {}
    for path in sorted(glob.glob(os.path.join(home, "logs", NAME, "stmgr-*.log"))):
        c = path.rsplit("-", 1)[1][:-4]
        rows = out.setdefault(c, [])
        with open(path, errors="replace") as f:
            for line in f:
                m = TRANSITION.match(line.rstrip("\n"))
                if m:
                    at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                    rows.append((at, m.group(2), ast.literal_eval(m.group(3))))
    return out


def held_throughout(trans, t_from, t_to):
    """Every stream manager was in one episode of its own backpressure from ``t_from`` to
    ``t_to`` (wall times): its last transition before ``t_from`` was a start and none
    came until ``t_to``."""
    for rows in trans.values():
        before = [kind for at, kind, _ in rows if at <= t_from]
        if not before or before[-1] != "starting" or any(t_from < at <= t_to for at, _, _ in rows):
            return False
    return bool(trans)


def spout_report(client):
    """A report in which both spouts answered (the slow bolts may not: their control
    messages queue behind their data), with the wall times it was asked and answered."""
    for _ in range(3):
        asked = time.time()
        rep = client.request("report", timeout=30)
        if not set(SPOUT_TASKS) & {str(t) for t in rep.get("missing", [])}:
            return asked, time.time(), {t: rep["tasks"][t] for t in SPOUT_TASKS}
    raise AssertionError(f"the spouts did not answer 3 reports: missing {rep.get('missing')}")


def test_backpressure_holds_the_spouts_bounds_the_queues_and_clears(bittern, home, tmp_path):
    out, flag = str(tmp_path / "out"), str(tmp_path / "fast.flag")
    bittern("submit", TOPO, "--name", NAME, "--config", f"test.out={out}", "--config", f"test.flag={flag}",
            "--config", f"topology.backpressure.high.watermark.bytes={HIGH}",
            "--config", f"topology.backpressure.low.watermark.bytes={LOW}",
            "--config", f"topology.producer.batch.size={BATCH}", check=True)
    client = None
    try:
        procs = bittern.processes(NAME)
        assert {procs[f"instance-{t}"]["container"] for t in SPOUT_TASKS} == {0, 1}
        client = TMClient(bittern.state("status", NAME)["tmaster"])
        peak = {}  # (container, queue) -> the most bytes any heartbeat reported queued
        on_seen = set()  # containers seen reporting backpressure on

        def sample():
            st = client.request("status")
            for c, s in st["stmgrs"].items():
                for t, q in (s.get("queued_by_task") or {}).items():
                    peak[(c, f"task {t}")] = max(peak.get((c, f"task {t}"), 0), q)
                peak[(c, "all")] = max(peak.get((c, "all"), 0), s.get("queued") or 0)
                if s.get("backpressure"):
                    on_seen.add(c)
            return st

        # -- slow phase: until the engine reports what we judge -------------------------------
        reports = []  # (asked, answered, {spout task: metrics})
        flat = []  # pairs of reports inside one held episode, with the spouts' emit counts

        def slow_phase_done():
            st = sample()
            reports.append(spout_report(client))
            trans = transitions(home)
            for a in reports[:-1]:
                b = reports[-1]
                if b[0] - a[1] >= FLAT_SECS and held_throughout(trans, a[0] - 1.0, b[1]) and \
                        all(a[2][t]["__emit-count"] == b[2][t]["__emit-count"] for t in SPOUT_TASKS):
                    flat.append((a, b))
            held = {c: s.get("backpressure_secs") or 0.0 for c, s in st["stmgrs"].items()}
            return len(held) == 2 and min(held.values()) >= HELD_SECS and flat
        wait_for(slow_phase_done, timeout=240, interval=0.5,
                 what=f"{HELD_SECS}s of backpressure on both stream managers, and two reports "
                      f"{FLAT_SECS}s apart inside one episode both held, between which the spouts emitted nothing")
        print(f"peak queued bytes in the slow phase: {peak} (bound {QUEUE_BOUND})")
        assert on_seen == {"0", "1"}, f"stream managers seen holding backpressure: {on_seen}"

        # the spouts were held: inside an episode every stream manager held, no emit at all
        # (a spout that backpressure does not stop emits thousands a second: no such pair)
        a, b = flat[-1]
        for t in SPOUT_TASKS:
            assert b[2][t]["__time-in-backpressure-ms"] > a[2][t]["__time-in-backpressure-ms"] > 0, (a[2], b[2])
            assert b[2][t]["__fail-count"] == 0 and b[2][t]["__pending"] > 0, b[2][t]
        print(f"spouts held: emit counts {[b[2][t]['__emit-count'] for t in SPOUT_TASKS]} unchanged over "
              f"{b[0] - a[1]:.1f}s; pending {[b[2][t]['__pending'] for t in SPOUT_TASKS]}")

        # -- the slow bolts speed up: every stream manager clears ------------------------------
        t_flip = time.time()
        open(flag, "w").close()

        def cleared():
            st = sample()
            trans = transitions(home)
            return all(not s.get("backpressure") for s in st["stmgrs"].values()) and all(
                any(at > t_flip and kind == "clearing" for at, kind, _ in trans.get(c, [])) for c in on_seen)
        wait_for(cleared, timeout=120, interval=0.5,
                 what="every stream manager to log a clearing after the speed-up and report backpressure off")

        # -- nothing is lost -----------------------------------------------------------------
        bittern("deactivate", NAME, check=True)
        emitted = {}
        for t in SPOUT_TASKS:
            path = os.path.join(out, f"emitted-{t}.json")
            emitted[t] = json.load(open(wait_for(lambda p=path: os.path.exists(p) and p, what=path)))
        expected = sorted(e["index"] + k * e["par"] for e in emitted.values() for k in range(e["emitted"]))
        acks, sink = LineCounter(out, "acks-"), LineCounter(out, "sink-")
        wait_for(lambda: acks() >= len(expected), timeout=120, what=f"{len(expected)} acks")
        wait_for(lambda: sink() >= len(expected), timeout=30, what=f"{len(expected)} numbers at the sink")
        assert numbers(out, "fails-") == [], "nothing may fail or time out"
        acked, got = sorted(numbers(out, "acks-")), sorted(numbers(out, "sink-"))
        if acked != expected:
            raise AssertionError("every emitted number must be acked exactly once: "
                                 + describe_difference(expected, acked))
        if got != acked:
            raise AssertionError("every acked number must reach the sink, once (no replays happened): "
                                 + describe_difference(acked, got))
        # drained: the next heartbeats report empty queues and no backpressure
        final = wait_for(lambda: (lambda st: all(s.get("queued") == 0 and not s.get("backpressure")
                                                  for s in st["stmgrs"].values()) and st)(sample()),
                         timeout=30, what="empty queues and no backpressure after the drain")
        assert all(s["counters"]["dropped"] == 0 for s in final["stmgrs"].values()), final["stmgrs"]

        # -- the transitions: the state machine's contract, as logged --------------------------
        trans = transitions(home)
        assert set(trans) == {"0", "1"}, trans.keys()
        for c, rows in trans.items():
            kinds = [k for _, k, _ in rows]
            assert kinds and kinds[0] == "starting" and all(x != y for x, y in zip(kinds, kinds[1:])), \
                f"stream manager {c}: transitions do not alternate: {kinds}"
            for at, kind, queued in rows:
                if kind == "starting":
                    assert max(queued.values()) >= HIGH, f"stream manager {c} started below {HIGH}: {queued}"
                else:
                    assert min(queued.values(), default=0) <= LOW, f"stream manager {c} cleared above {LOW}: {queued}"
        over = {k: v for k, v in peak.items() if k[1] != "all" and v > QUEUE_BOUND}
        assert not over, f"queues above {QUEUE_BOUND} bytes: {over}"
        print(f"{len(expected)} numbers emitted, acked and sunk once; transitions per stream manager: "
              f"{ {c: len(r) for c, r in trans.items()} }")
    finally:
        if client is not None:
            client.close()
        bittern("kill", NAME, check=True)
