"""Windows and timers under exactly once with real processes
(tests/topologies/windows_eo_seq.py): a windowed bolt whose windows are open and whose
event-time and processing-time timers are pending while its process, a stream
manager and a spout are killed with -9, or while it is rebalanced 2 -> 3 -> 2 (keyed)
or 2 -> 1 (not keyed). Watermarks, timers and window contents are part of each task's
checkpoint and move with their key groups, so the committed output (a FileSink
committed with each checkpoint) is exactly what a direct computation gives: every
window's result once, every timer's firing once.
"""
from __future__ import annotations

import glob
import json
import os
import random
import time
from collections import Counter

import pytest

from conftest import TOPOLOGIES, instance_log, wait_for
from eokit import Gates, checkpoint_metrics, kill9
from windowkit import normalise, tumbling

SEQ = os.path.join(TOPOLOGIES, "windows_eo_seq.py")
K, EPS, LENGTH, TIMER_EVERY = 5, 100.0, 1.0, 50
EVENT_DELAY = 2.35  # as in the topology


def committed(out):
    """The sink's committed rows: ``[stream, *values]``."""
    rows = []
    for path in glob.glob(os.path.join(out, "sink", "win-*-*.jsonl")):
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def merge_partials(rows):
    """A bolt that is not keyed: each task fires its own part of a window; add them up."""
    by_win = {}
    for key, start, end, count, total, lo, hi in rows:
        c = by_win.setdefault((key, start, end), [0, 0, lo, hi])
        c[0] += count
        c[1] += total
        c[2], c[3] = min(c[2], lo), max(c[3], hi)
    return sorted((k[0], k[1], k[2], *v) for k, v in by_win.items())


def expected(n, keyed=True):
    """(window rows, timer rows) a run over 0..n-1 must commit."""
    wins = tumbling(n, K, EPS, LENGTH)
    if not keyed:
        wins = merge_partials([(None,) + r[1:] for r in wins])
    timers = []
    for x in range(0, n, TIMER_EVERY):
        key = f"k{x % K}" if keyed else None
        timers.append((key, "event", x / EPS + EVENT_DELAY))
        timers.append((key, "processing", x))
    return normalise(wins), sorted(timers, key=repr)


def check_exact(rows, n, keyed=True):
    want_wins, want_timers = expected(n, keyed)
    wins = [tuple(r[1:]) for r in rows if r[0] == "default"]
    timers = [tuple(r[1:]) for r in rows if r[0] == "timers"]
    assert Counter(r[0] for r in rows).keys() <= {"default", "timers"}
    tc = Counter(timers)
    dup = {t: c for t, c in tc.items() if c > 1}
    missing = set(want_timers) - set(tc)
    extra = set(tc) - set(want_timers)
    assert not dup, f"{len(dup)} timers committed more than once, e.g. {sorted(dup.items(), key=repr)[:5]}"
    assert not missing, f"{len(missing)} timers never committed, e.g. {sorted(missing, key=repr)[:5]}"
    assert not extra, f"{len(extra)} unexpected timer rows, e.g. {sorted(extra, key=repr)[:5]}"
    got = normalise(wins)
    if not keyed:
        got = merge_partials(got)
    else:
        wc = Counter((r[0], r[1], r[2]) for r in got)
        dup = {w: c for w, c in wc.items() if c > 1}
        assert not dup, f"{len(dup)} windows committed more than once, e.g. {sorted(dup.items(), key=repr)[:5]}"
    if got != want_wins:
        g, w = set(got), set(want_wins)
        raise AssertionError(f"{len(got)} window rows, want {len(want_wins)}; wrong or missing "
                             f"{sorted(w - g, key=repr)[:5]}; unexpected {sorted(g - w, key=repr)[:5]}")


def total_rows(n, keyed=True):
    wins, timers = expected(n, keyed)
    return len(wins) + len(timers)


def pid_of(out, component, task):
    with open(os.path.join(out, "pids", f"{component}-{task}")) as f:
        return int(f.read())


def tasks_of(out, component):
    return sorted(int(n.rsplit("-", 1)[1]) for n in os.listdir(os.path.join(out, "pids"))
                  if n.startswith(component + "-"))


def submit(bittern, name, out, n, rate, extra=()):
    args = ["submit", SEQ, "--name", name, "--config", f"test.out={out}", "--config", f"test.count={n}",
            "--config", f"test.rate={rate}", "--config", f"test.keys={K}", "--config", f"test.eps={EPS}",
            "--config", f"test.timer.every={TIMER_EVERY}"]
    for kv in extra:
        args += ["--config", kv]
    bittern(*args, check=True)


def wait_all(out, n, keyed=True):
    """Wait for every window's row (the last ones fire when the watermark reaches +inf,
    with the last event timers), then for the timers' rows (a processing timer is due
    PROC_DELAY after it was set), then a little more: anything committed late (a
    duplicate) shows up too. Returns the committed rows; check_exact says what is wrong."""
    wins, timers = expected(n, keyed)
    ends = {w[2] for w in wins}
    wait_for(lambda: {round(r[3], 6) for r in committed(out) if r[0] == "default"} >= ends, timeout=120,
             interval=0.25, what="every window committed")
    try:
        wait_for(lambda: sum(r[0] == "timers" for r in committed(out)) >= len(timers), timeout=20,
                 interval=0.25, what="every timer committed")
    except AssertionError:
        pass
    time.sleep(1.5)
    return committed(out)


# the seeds pick the kill times and victims: a win task, a stream manager, a spout task
@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 11])
def test_windows_and_timers_exactly_once_when_processes_are_killed(bittern, tmp_path, seed):
    rng = random.Random(seed)
    out = str(tmp_path / "out")
    name = f"weo{seed}"
    n, rate = 6000, 500
    want = total_rows(n)
    t_start = time.monotonic()
    # each kill with numbers still to come: the spouts hold back those past the gate (not a
    # race with the rate, which a loaded machine loses), raised after each kill
    gate = Gates(tmp_path / "gate", n, 4)
    submit(bittern, name, out, n, rate, extra=(gate.config,))
    log = []
    try:
        def progress(at_least, what):
            wait_for(lambda: len(committed(out)) >= at_least, timeout=60, interval=0.1,
                     what=f"{at_least} committed rows {what}")

        def killed(what):
            c = len(committed(out))
            log.append((round(time.monotonic() - t_start, 1), what, c))
            assert c < want, f"the kill of {what} came after the last window was committed"
            gate.more()
            return c

        progress(40, "(first checkpoints complete)")
        time.sleep(rng.uniform(0.0, 1.0))
        task = rng.choice(tasks_of(out, "win"))
        kill9(pid_of(out, "win", task))
        progress(killed(f"win task {task}") + 40, "after killing a win task")
        time.sleep(rng.uniform(0.0, 1.0))
        container = rng.choice([0, 1])
        kill9(bittern.processes(name)[f"stmgr-{container}"]["pid"])
        progress(killed(f"stmgr-{container}") + 40, f"after killing stmgr-{container}")
        time.sleep(rng.uniform(0.0, 1.0))
        task = rng.choice(tasks_of(out, "spout"))
        kill9(pid_of(out, "spout", task))
        killed(f"spout task {task}")
        rows = wait_all(out, n)
        restarts = {k: v["restarts"] for k, v in bittern.processes(name).items() if v["restarts"]}
        ck = checkpoint_metrics(bittern, name)
        print(f"seed {seed}: kills (s, what, committed rows then) {log}; restarts {restarts}; checkpoints {ck}; "
              f"{len(rows)} rows; {time.monotonic() - t_start:.1f}s")
        check_exact(rows, n)
        assert restarts.get(f"stmgr-{container}", 0) >= 1, restarts
        assert sum(v for k, v in restarts.items() if k.startswith("instance-")) >= 2, restarts
        assert ck["restores"] >= 3, f"each kill must have rolled the topology back: {ck}"
    finally:
        bittern("kill", name, check=True)


def component_tasks(bittern, name):
    doc = bittern.json("metrics", name, "--json")
    return {c: v["tasks"] for c, v in doc["components"].items()}, doc


def last_window_committed(out, n):
    return any(r[0] == "default" and round(r[3], 6) >= n / EPS for r in committed(out))


def rebalance_while_running(bittern, name, out, steps, n, gate):
    """Each rebalance with numbers held back by the gate (not a race with the rate, which a
    loaded machine loses: the windows past the gate are still to come), let go after it."""
    for par, ntasks in steps:
        r = bittern("rebalance", name, "--parallelism", f"win={par}", timeout=240, check=True)
        assert f"rebalanced: {ntasks} tasks" in r.stdout, r.stdout
        tasks, doc = component_tasks(bittern, name)
        assert tasks == {"spout": 2, "win": par, "sink": 2} and doc["active"], tasks
        assert not last_window_committed(out, n), "the last window committed before the gate let it go"
        before = len(committed(out))
        gate.more()
        wait_for(lambda: len(committed(out)) > before + 30, timeout=60, interval=0.25,
                 what=f"committed output at win par {par}")


@pytest.mark.slow
def test_rebalance_keyed_windows_and_timers_2_3_2_exactly_once(bittern, tmp_path):
    out = str(tmp_path / "out")
    n, rate = 4500, 250
    steps = ((3, 7), (2, 6))
    gate = Gates(tmp_path / "gate", n, len(steps) + 1)
    submit(bittern, "werb", out, n, rate, extra=(gate.config,))
    try:
        wait_for(lambda: len(committed(out)) > 40, timeout=60, interval=0.25, what="committed output")
        rebalance_while_running(bittern, "werb", out, steps, n, gate)
        rows = wait_all(out, n)
        check_exact(rows, n)
        log = instance_log(bittern.home, "werb", "win")
        assert "2 -> 3 tasks" in log and "3 -> 2 tasks" in log, "the win tasks did not restore rescaled"
        assert not glob.glob(os.path.join(out, "sink", ".pending-*")), "sink output left pending"
    finally:
        bittern("kill", "werb", check=True)


@pytest.mark.slow
def test_rebalance_unkeyed_windows_2_to_1_loses_no_window_content(bittern, tmp_path):
    """Shuffle grouping: each win task windows what it gets (key None). On 2 -> 1 the
    old tasks' open windows (the same window ids) merge into the one new task."""
    out = str(tmp_path / "out")
    n, rate = 4000, 250
    bittern.env["TEST_GROUPING"] = "shuffle"
    steps = ((1, 5),)
    gate = Gates(tmp_path / "gate", n, len(steps) + 1)
    submit(bittern, "weun", out, n, rate, extra=(gate.config,))
    try:
        wait_for(lambda: len(committed(out)) > 20, timeout=60, interval=0.25, what="committed output")
        rebalance_while_running(bittern, "weun", out, steps, n, gate)
        wait_all(out, n, keyed=False)
        check_exact(committed(out), n, keyed=False)
        assert "2 -> 1 tasks" in instance_log(bittern.home, "weun", "win")
    finally:
        bittern("kill", "weun", check=True)
