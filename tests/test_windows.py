"""Windows end to end with real processes: what windowed bolts emit equals a brute-force
computation from the input (tests/windowkit.py), and nothing is lost.

* event-time tumbling, sliding and session windows, two spout tasks in two containers
  and two keyed window tasks: exactly once (committed rows) and at most once (``bittern
  run --until-done``);
* count windows (arrival order across spout tasks is not deterministic: the structure
  of every window is checked) and processing-time windows;
* the watermark is the minimum over the spout tasks (a slow task holds windows back)
  and an idle source does not hold them back forever;
* late and too-late tuples, from a spout that sends its own watermarks in band
  (tests/topologies/windows_manual.py), and the counters ``bittern metrics`` shows;
* at least once: kill -9 of a window task, the spout replays, no window loses a tuple;
* bad window declarations refused by ``bittern run``/``submit`` with one line.

Most of these run tests/topologies/windowed_seq.py, whose shape the environment
chooses (TEST_WINDOW, TEST_MODE, ...): see its docstring.
"""
from __future__ import annotations

import glob
import json
import os
import signal
import time
from collections import Counter

import pytest

from conftest import TOPOLOGIES, wait_for
import windowkit as wk

SEQ = os.path.join(TOPOLOGIES, "windowed_seq.py")
MANUAL = os.path.join(TOPOLOGIES, "windows_manual.py")
RELIABLE = os.path.join(TOPOLOGIES, "windows_reliable.py")
BAD = os.path.join(TOPOLOGIES, "windows_bad.py")


def shape(bittern, window, mode="EFFECTIVELY_ONCE", spouts=2, **env):
    """Choose windowed_seq's shape (read when the topology file is imported)."""
    bittern.env.update(TEST_WINDOW=window, TEST_MODE=mode, TEST_SPOUTS=str(spouts), TEST_WIN_PAR="2")
    for k in ("TEST_TUPLES", "TEST_TIME", "TEST_SETS"):
        bittern.env.pop(k, None)
    bittern.env.update({k: str(v) for k, v in env.items()})


def configs(out, conf):
    args = ["--config", f"test.out={out}"]
    for k, v in conf.items():
        args += ["--config", f"{k}={v}"]
    return args


def submit(bittern, path, name, out, conf=None):
    bittern("submit", path, "--name", name, *configs(out, conf or {}), check=True)


def run_until_done(bittern, path, out, conf):
    r = bittern("run", path, "--until-done", "--duration", "90", "--json", *configs(out, conf), timeout=150,
                check=True)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["drained"], r.stdout
    return summary


def wait_rows(out, n, timeout=60, read=wk.read_rows):
    wait_for(lambda: len(read(out)) >= n, timeout=timeout, interval=0.2, what=f"{n} window rows in {out}")
    time.sleep(1.0)  # anything more (a duplicate) would show up too
    return read(out)


def components(bittern, name):
    return bittern.json("metrics", name, "--json")["components"]


def event_counts(bittern, name, component, fired):
    """The component's event-time counters, once its metrics show ``fired`` windows
    (metrics are reported every few seconds: older ones would show fewer)."""
    def ready():
        c = components(bittern, name)[component]
        return c if c["windows_fired"] >= fired else None
    c = wait_for(ready, timeout=60, interval=0.5, what=f"{fired} windows fired in the metrics of {component}")
    return {k: c[k] for k in ("late", "too_late", "bad_timestamps", "windows_fired", "open_windows",
                              "input_watermark", "output_watermark")}


def tasks_of(out, component):
    return sorted(int(n.rsplit("-", 1)[1]) for n in os.listdir(os.path.join(out, "pids"))
                  if n.startswith(component + "-"))


def containers_of(bittern, name, out, component):
    procs = bittern.processes(name)
    return sorted(procs[f"instance-{t}"]["container"] for t in tasks_of(out, component))


def diff(got, want):
    g, w = Counter(got), Counter(want)
    return f"{len(got)} rows, {len(want)} expected; missing {sorted(w - g)[:5]}, unexpected {sorted(g - w)[:5]}"


# -- 1. event-time windows: exact ----------------------------------------------------------
N, KEYS, EPS = 3000, 5, 100  # numbers, keys, numbers per event second (30 event seconds)

EXACT = {
    # name: (TEST_WINDOW, extra config, brute force)
    "tumbling": ("tumbling:1", {}, lambda pts: wk.tumbling(0, 0, 0, 1.0, points=pts)),
    "sliding": ("sliding:2:0.5", {}, lambda pts: wk.sliding(0, 0, 0, 2.0, 0.5, points=pts)),
    # per key, one spout task's numbers are 0.1 s apart: only with the other task's
    # numbers (0.05 s) between them do they make one session (they merge), and the gaps
    # of 0.4 s end the sessions; task 1 slower, so that its tuples come after task 0's
    "session": ("session:0.08", {"test.skip": "100:60", "test.slow": "1:500"},
                lambda pts: wk.session(pts, 0.08)),
}


@pytest.mark.parametrize("kind", sorted(EXACT))
def test_event_time_windows_exactly_once_equal_the_brute_force(bittern, tmp_path, kind):
    window, extra, brute = EXACT[kind]
    shape(bittern, window)
    out = str(tmp_path / "out")
    skip = tuple(int(x) for x in extra["test.skip"].split(":")) if "test.skip" in extra else None
    want = wk.normalise(brute(wk.numbers(N, KEYS, EPS, skip=skip)))
    if kind == "session":  # (the input: no session of one spout task's numbers alone)
        assert all(r[3] > 1 and r[5] % 2 != r[6] % 2 for r in want)
    submit(bittern, SEQ, kind, out, {"test.count": N, "test.keys": KEYS, "test.eps": EPS, "test.rate": 1000,
                                     **extra})
    try:
        rows = wk.normalise(wait_rows(out, len(want)))
        assert containers_of(bittern, kind, out, "spout") == [0, 1]
        assert len(tasks_of(out, "win")) == 2
        assert rows == want, diff(rows, want)
    finally:
        bittern("kill", kind, check=True)


def test_session_windows_at_most_once_with_tuple_lists_run_until_done(bittern, tmp_path):
    """Storm-style WindowedBolt (the window's tuples) on merging sessions, ATMOST_ONCE,
    ``bittern run --until-done``: the run ends by itself with every session emitted."""
    shape(bittern, "session:0.08", mode="ATMOST_ONCE", TEST_TUPLES=1)
    out = str(tmp_path / "out")
    run_until_done(bittern, SEQ, out, {"test.count": N, "test.keys": KEYS, "test.eps": EPS,
                                       "test.skip": "100:70", "test.slow": "0:800"})
    want = wk.normalise(wk.session(wk.numbers(N, KEYS, EPS, skip=(100, 70)), 0.08))
    rows = wk.normalise(wk.read_rows(out))
    assert rows == want, diff(rows, want)


# -- 2. count windows: structure -------------------------------------------------------------
CN, CKEYS = 3000, 7  # 429 or 428 numbers per key


def test_tumbling_count_windows_exactly_once(bittern, tmp_path):
    shape(bittern, "count:10", TEST_SETS=1)
    out = str(tmp_path / "out")
    submit(bittern, SEQ, "ctumble", out, {"test.count": CN, "test.keys": CKEYS, "test.rate": 1500})
    try:
        per_key = Counter(f"k{x % CKEYS}" for x in range(CN))
        rows = wait_rows(out, sum(c // 10 for c in per_key.values()))
        wk.check_count_tumbling(rows, CN, CKEYS, 10, par=2)
    finally:
        bittern("kill", "ctumble", check=True)


def test_sliding_count_windows_with_tuple_lists_run_until_done(bittern, tmp_path):
    shape(bittern, "pcount:12:4", mode="ATMOST_ONCE", TEST_SETS=1, TEST_TUPLES=1)
    out = str(tmp_path / "out")
    run_until_done(bittern, SEQ, out, {"test.count": CN, "test.keys": CKEYS, "test.rate": 1500})
    rows = wk.read_rows(out)
    per_key = Counter(f"k{x % CKEYS}" for x in range(CN))
    assert len(rows) == sum(c // 4 for c in per_key.values())
    wk.check_count_sliding(rows, CN, CKEYS, 12, 4, par=2)


# -- 3. processing time ---------------------------------------------------------------------
@pytest.mark.parametrize("window,per_tuple", [("tumbling:0.5", 1), ("sliding:1:0.5", 2)])
def test_processing_time_windows_count_every_tuple(bittern, tmp_path, window, per_tuple):
    """No timestamp_field: tuples are timed by the wall clock when they arrive. At least
    once, so that ``--until-done`` waits for the last windows to fire (tuples are acked
    when their windows have fired). Every number is in exactly ``length / interval``
    windows of its key; bounds are aligned to the interval."""
    shape(bittern, window, mode="ATLEAST_ONCE", TEST_TIME="processing", TEST_SETS=1)
    out = str(tmp_path / "out")
    n, keys = 3000, 5
    t0 = time.time()
    run_until_done(bittern, SEQ, out, {"test.count": n, "test.keys": keys, "test.rate": 600})
    t1 = time.time()
    rows = wk.read_rows(out)
    parts = window.split(":")
    length = float(parts[1])
    every = float(parts[2]) if len(parts) > 2 else length
    seen = Counter()
    for key, start, end, count, total, lo, hi, ns in rows:
        assert end - start == length and (start / every) == int(start / every), (start, end)
        assert t0 - length <= start and end <= t1 + length, (t0, start, end, t1)
        assert count == len(ns) and total == sum(ns) and (lo, hi) == (min(ns), max(ns))
        assert all(f"k{x % keys}" == key for x in ns)
        seen.update(ns)
    assert len({(r[0], r[1]) for r in rows}) == len(rows), "a window emitted twice"
    assert set(seen) == set(range(n)), f"missing {sorted(set(range(n)) - set(seen))[:10]}"
    assert set(seen.values()) == {per_tuple}, Counter(seen.values())
    per_key = Counter()
    for r in rows:
        per_key[r[0]] += r[3]
    assert per_key == {f"k{k}": n // keys * per_tuple for k in range(keys)}


# -- 4. the watermark is the minimum; idle sources --------------------------------------------
def test_a_slow_spout_task_holds_the_windows_back(bittern, tmp_path):
    """Spout task 0 emits all its numbers at once and ends (its watermark goes to +inf);
    task 1 is paced slowly. No window may fire before task 1's data passed it: every
    window is complete, none of task 1's tuples is late."""
    shape(bittern, "tumbling:0.5", mode="ATMOST_ONCE")
    out = str(tmp_path / "out")
    n = 2000
    submit(bittern, SEQ, "slow", out, {"test.count": n, "test.keys": KEYS, "test.eps": EPS, "test.slow": "1:300"})
    try:
        want = wk.normalise(wk.tumbling(n, KEYS, EPS, 0.5))
        rows = wk.normalise(wait_rows(out, len(want)))
        assert rows == want, diff(rows, want)
        ev = event_counts(bittern, "slow", "win", len(want))
        assert (ev["late"], ev["too_late"], ev["windows_fired"]) == (0, 0, len(want)), ev
    finally:
        bittern("kill", "slow", check=True)


def test_idle_spout_tasks_do_not_hold_the_windows_back_forever(bittern, tmp_path):
    """Three spout tasks: 1 never emits; 2 stops early without ending; 0 goes on (paced)
    and then stops too, without ending. With topology.watermark.idle.secs = 1, tasks 1
    and 2 go idle and no longer hold the windows back: they fire as far as task 0's
    watermark (its last timestamp: when it goes idle too, every input is idle and the
    watermark stays there), and hold exactly the data that came.

    (An ended source beside idle ones does not move the watermark to +inf: an idle
    source may still send. So task 0 does not call done() here.)"""
    shape(bittern, "sliding:1:0.5", mode="ATMOST_ONCE", spouts=3)
    out = str(tmp_path / "out")
    n, stop = 3000, {0: 3000, 1: 0, 2: 300}
    submit(bittern, SEQ, "idle", out, {"test.count": n, "test.keys": KEYS, "test.eps": EPS, "test.rate": 1000,
                                       "test.slow": "0:300", "test.stop": "0:3000,1:0,2:300",
                                       "topology.watermark.idle.secs": 1})
    try:
        points = wk.numbers(n, KEYS, EPS, par=3, stop=stop)
        last = max(x for x, _, _ in points if x % 3 == 0) / EPS  # task 0's watermark at the end
        want = [r for r in wk.normalise(wk.sliding(0, 0, 0, 1.0, 0.5, points=points)) if r[2] <= last]
        assert {r[1] for r in want} >= {0.0, 5.0, 25.0}  # windows after task 2 stopped too
        rows = wk.normalise(wait_rows(out, len(want)))
        assert rows == want, diff(rows, want)
        ev = event_counts(bittern, "idle", "win", len(want))
        assert (ev["late"], ev["too_late"]) == (0, 0), ev
        wait_for(lambda: components(bittern, "idle")["win"]["input_watermark"] == last, timeout=30, interval=0.5,
                 what=f"the window tasks' input watermark at task 0's last, {last}")
    finally:
        bittern("kill", "idle", check=True)


# -- 5. late and too late ---------------------------------------------------------------------
def test_late_and_too_late_tuples_with_manual_watermarks(bittern, tmp_path):
    """windows_manual.py's script: watermarks in band between tuples fix which tuples are
    late. A late tuple within the allowed lateness makes its window fire again with it;
    one beyond goes to the late stream with its values and the reason; so does a tuple
    whose timestamp is not a number. Every input tuple is in a result or on the late
    stream, and the counters say how many of each."""
    out = str(tmp_path / "out")
    submit(bittern, MANUAL, "manual", out)
    try:
        path = os.path.join(out, "rows.jsonl")
        wait_for(lambda: os.path.exists(path) and len(open(path).readlines()) >= 13, timeout=60,
                 what="13 rows from the manual-watermark topology")
        time.sleep(1.0)  # a negative check: anything more (a duplicate) would show up too
        recs = [json.loads(line) for line in open(path)]
        fires = [r["values"] for r in recs if r["stream"] == "default"]
        late = [r["values"] for r in recs if r["stream"] == "late"]
        # per window, its fires in order: [key, start, end, count, numbers, late]
        by_window = {}
        for key, start, end, count, ns, is_late in fires:
            assert count == len(ns)
            by_window.setdefault((key, start, end), []).append((ns, is_late))
        assert by_window == {
            ("a", 0.0, 1.0): [([0, 1], False)],
            ("a", 1.0, 2.0): [([2, 3], False), ([2, 3, 6], True)],   # 6 (ts 1.5) late, in time
            ("b", 0.0, 1.0): [([5], False), ([5, 7], True)],         # 7 (ts 0.9) late, in time
            ("a", 2.0, 3.0): [([4], False), ([4, 12], True)],        # 12 (ts 2.6) after watermark 4.5
            ("a", 3.0, 4.0): [([10], True)],                         # never fired on time: late at once
            ("a", 4.0, 5.0): [([11], False)],                        # fired at the end (+inf)
        }, by_window
        late_by_n = {values[0]: (values, ts, reason) for values, ts, reason in late}
        assert sorted(late_by_n) == [8, 9, 13, 14] and len(late) == 4, late
        assert late_by_n[8][:2] == ([8, "a", 1.8], 1.8) and "allowed lateness" in late_by_n[8][2]
        assert late_by_n[14][:2] == ([14, "b", 0.2], 0.2) and "allowed lateness" in late_by_n[14][2]
        assert late_by_n[9][0] == [9, "a", "x"] and "not a number" in late_by_n[9][2], late_by_n[9]
        assert late_by_n[13][0] == [13, "b", None] and "not a number" in late_by_n[13][2], late_by_n[13]
        # nothing dropped silently: every tuple of the script is in a result or on the late stream
        placed = {x for ns, _ in sum(by_window.values(), []) for x in ns} | set(late_by_n)
        assert placed == set(range(15))
        ev = event_counts(bittern, "manual", "win", 9)
        assert ev == {"late": 4, "too_late": 2, "bad_timestamps": 2, "windows_fired": 9, "open_windows": 0,
                      "input_watermark": "inf", "output_watermark": "inf"}, ev
    finally:
        bittern("kill", "manual", check=True)


# -- 6. at least once, kill -9 of a window task ---------------------------------------------------
@pytest.mark.slow
def test_at_least_once_windows_lose_nothing_when_a_window_task_is_killed(bittern, tmp_path):
    """ATLEAST_ONCE, message timeout 6 s, allowed lateness 60 s, a spout that replays
    (windows_reliable.py). A window task is killed with kill -9 while windows are open:
    what it held times out and is replayed, late but within the lateness, into its
    windows in the restarted task. Every window's result covers all of its tuples
    (duplicates allowed, nothing lost)."""
    out = str(tmp_path / "out")
    n, keys, eps = 3000, 5, 100
    name = "reliable"
    submit(bittern, RELIABLE, name, out, {"test.count": n, "test.keys": keys, "test.eps": eps, "test.rate": 150})
    try:
        def rows():
            return [json.loads(line) for path in glob.glob(os.path.join(out, "rows", "*.jsonl"))
                    for line in open(path) if line.strip()]
        wait_for(lambda: len(rows()) >= 30, timeout=60, what="the first windows")
        victim = tasks_of(out, "win")[0]
        with open(os.path.join(out, "pids", f"win-{victim}")) as f:
            pid = int(f.read())
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        at_kill = len(rows())
        want = {}
        for x, key, ts in wk.numbers(n, keys, eps):
            want.setdefault((key, float(int(ts))), set()).add(x)

        def complete():
            m = components(bittern, name)
            return m["spout"]["exhausted"] == 2 and m["spout"]["pending"] == 0 and m
        m = wait_for(complete, timeout=120, interval=1.0, what="every spout task exhausted, nothing pending")
        got_rows = rows()
        last, fullest = {}, {}
        for key, start, end, count, ns in got_rows:
            assert end - start == 1.0 and count == len(ns)
            w = (key, float(start))
            last[w] = set(ns)
            if len(ns) >= len(fullest.get(w, ())):
                fullest[w] = set(ns)
        assert set(last) == set(want), sorted(set(last) ^ set(want))[:5]
        lost = {w: sorted(want[w] - fullest[w]) for w in want if not fullest[w] >= want[w]}
        assert not lost, f"windows missing tuples: {sorted(lost.items())[:5]}"
        restarts = bittern.processes(name)[f"instance-{victim}"]["restarts"]
        print(f"killed win task {victim} at {at_kill} rows; {len(got_rows)} rows for {len(want)} windows; "
              f"replayed {m['spout']['failed']}, late {m['win']['late']}, too late {m['win']['too_late']}; "
              f"restarts {restarts}; last results partial: "
              f"{sum(1 for w in want if not last[w] >= want[w])}")
        assert restarts >= 1
        assert m["spout"]["failed"] > 0, "nothing was replayed: the kill came after the last window"
        assert m["win"]["too_late"] == 0, m["win"]
    finally:
        bittern("kill", name, check=True)


# -- 7. bad declarations ------------------------------------------------------------------------
BAD_CASES = {
    "sliding": (BAD, {"TEST_BAD": "sliding"}, [], ["component 'counts'", "interval (3.0)", "window (2.0)"]),
    "field": (BAD, {"TEST_BAD": "field"}, [], ["component 'counts'", "timestamp_field 'when'", "'stamps'"]),
    "timeout": (BAD, {"TEST_BAD": "timeout"}, [], ["component 'counts'", "10 s", "timeout.secs = 4"]),
    # the same through --config on a topology that is fine with its own timeout
    "timeout-config": (SEQ, {"TEST_WINDOW": "sliding:2:0.5", "TEST_MODE": "ATLEAST_ONCE"},
                       ["--config", "topology.message.timeout.secs=2"],
                       ["component 'win'", "2.5 s", "timeout.secs = 2"]),
}


@pytest.mark.parametrize("verb", ["run", "submit"])
@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_window_declarations_are_refused_with_one_line(bittern, home, tmp_path, case, verb):
    path, env, extra, needles = BAD_CASES[case]
    bittern.env.update(env)
    args = [verb, path, "--name", "bad", "--config", f"test.out={tmp_path / 'out'}", "--config", "test.count=100",
            *extra]
    if verb == "run":
        args += ["--duration", "5"]
    r = bittern(*args, timeout=60)
    assert r.returncode != 0, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert "Traceback" not in r.stdout + r.stderr
    topo_dir = os.path.join(home, "state", "topologies")
    assert not os.path.isdir(topo_dir) or os.listdir(topo_dir) == [], os.listdir(topo_dir)
    assert not os.path.exists(tmp_path / "out"), "an instance started"
