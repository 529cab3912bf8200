"""Timers in a running topology (real processes): tests/topologies/timers_seq.py's
keyed bolt sets event-time timers (out of order, one twice, one deleted before it is
due, one past the end of the input, one set from ``on_timer``) and processing-time
timers (one twice) for every key it sees, and reports each firing with the watermark
``self.timers.watermark`` showed in ``on_timer``. Each timer fires once, in timestamp
order per task and kind; an event timer only once the watermark reached it; a
processing timer only once the wall clock did; a timer for a key the task does not own
is refused with one line naming the component."""
from __future__ import annotations

import glob
import json
import math
import os
import sys
from collections import Counter

from conftest import TOPOLOGIES, wait_for

sys.path.insert(0, TOPOLOGIES)
import timers_seq as ts_topo  # noqa: E402  (the offsets the bolt uses)

SEQ = os.path.join(TOPOLOGIES, "timers_seq.py")
N, K, EPS, RATE = 2400, 6, 100.0, 400


def rows_of(out):
    rows = []
    for path in glob.glob(os.path.join(out, "rows", "rows-*.jsonl")):
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def test_timers_fire_once_in_order_after_the_watermark_or_the_clock(bittern, tmp_path):
    out = str(tmp_path / "out")
    event_offsets = sorted(set(o for o in ts_topo.EVENT_OFFSETS if o != ts_topo.FAR))
    proc_offsets = sorted(set(ts_topo.PROC_OFFSETS))
    per_key = len(event_offsets) + 1 + len(proc_offsets)  # + the one set from on_timer
    want_rows = K * per_key + 2  # + one refusal per timer task
    final_wm = min((N - 1 - k) // 2 * 2 + k for k in range(2)) / EPS  # the slower spout task's last ts
    bittern("submit", SEQ, "--name", "timers", "--config", f"test.out={out}", "--config", f"test.count={N}",
            "--config", f"test.keys={K}", "--config", f"test.eps={EPS}", "--config", f"test.rate={RATE}",
            check=True)
    try:
        wait_for(lambda: len(rows_of(out)) >= want_rows, timeout=90, interval=0.25, what=f"{want_rows} rows")

        def settled():
            comps = bittern.json("metrics", "timers", "--json")["components"]
            t, s = comps["timer"], comps["sink"]
            return (t["input_watermark"] is not None and t["input_watermark"] >= final_wm
                    and s["executed"] == t["emitted"] and t["emitted"] >= want_rows)
        # every timer due by the end of the input fired and its row reached the sink
        wait_for(settled, timeout=60, interval=0.5, what=f"timer input watermark {final_wm}, sink caught up")
        rows = rows_of(out)
    finally:
        bittern("kill", "timers", check=True)

    errors = [r for r in rows if r[0] == "errors"]
    fired = [r[1:] for r in rows if r[0] == "default"]
    assert len(rows) == want_rows, f"{len(rows)} rows, want {want_rows}: {Counter(r[0] for r in rows)}"

    # each key's timers fire in one task (its owner), each once
    owner = {}
    for task, seq, key, ts, kind, wm, wall, set_at, t0 in fired:
        assert owner.setdefault(key, task) == task, f"key {key} fired in tasks {owner[key]} and {task}"
    assert sorted(owner) == [f"k{i}" for i in range(K)]
    by_key = {}
    for task, seq, key, ts, kind, wm, wall, set_at, t0 in fired:
        by_key.setdefault(key, []).append((kind, ts, t0))
    for key, got in by_key.items():
        t0 = got[0][2]
        assert round(t0 * EPS) % K == int(key[1:]), (key, t0)
        want_event = sorted([t0 + o for o in event_offsets] + [(t0 + ts_topo.CHAIN_FROM) + ts_topo.CHAIN_STEP])
        ev = sorted(ts for kind, ts, _ in got if kind == "event")
        assert ev == want_event, f"key {key}: event timers fired at {ev}, want each of {want_event} once " \
                                 f"(not the deleted t0+{ts_topo.DELETED}, not the far t0+{ts_topo.FAR})"
        assert Counter(kind for kind, _, _ in got)["processing"] == len(proc_offsets), (key, got)

    for task, seq, key, ts, kind, wm, wall, set_at, t0 in fired:
        if kind == "event":
            # only once the watermark reached it, and while the input ran (finite watermark)
            assert wm is not None and ts <= wm <= final_wm, (key, ts, wm)
        else:
            assert set_at is not None, f"processing timer {key} {ts} fired but was never set"
            assert wall >= ts, f"processing timer {key} at {ts} fired {ts - wall:.3f}s early"
            assert min(abs((ts - set_at) - o) for o in proc_offsets) < 1e-3, (ts - set_at)

    # in timestamp order per task and kind (seq: the order the task fired them)
    for task in set(owner.values()):
        assert sorted(r[1] for r in fired if r[0] == task) == list(range(1, 1 + sum(r[0] == task for r in fired)))
        for kind in ("event", "processing"):
            seq_order = [r[3] for r in sorted((r for r in fired if r[0] == task and r[4] == kind),
                                              key=lambda r: r[1])]
            assert seq_order == sorted(seq_order), f"task {task} fired {kind} timers out of order: {seq_order}"

    # a timer for a key the task does not own: refused, one line naming the component
    assert len(errors) == 2 and len({e[1] for e in errors}) == 2, errors
    for _, task, msg in errors:
        assert "\n" not in msg and msg.startswith("component 'timer': timer for key "), msg
        key = msg.split("timer for key ")[1].split("'")[1]
        assert owner[key] != task, f"task {task} refused key {key}, which it owns: {msg}"
        assert f"task {task} does not own" in msg, msg
    assert not any(math.isinf(r[5]) for r in fired if r[5] is not None)
