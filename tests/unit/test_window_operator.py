"""The window operator (bittern/time/windowing.py) driven as the runtime drives it:
``add(key, ts, tup, wm)`` with the current input watermark for each tuple, and after the
watermark moves, the due event timers popped from the TimerQueue in order and handed to
``on_timer``. Checked against windows computed directly (brute force) on random
inputs, and on small cases written out."""
from __future__ import annotations

import math
import random

import pytest

from bittern.api.state import State
from bittern.api.windows import Count, Duration, Window
from bittern.time.timers import EVENT, PROCESSING, TimerQueue
from bittern.time.watermarks import NEG_INF, POS_INF
from bittern.time.windowing import TOO_LATE, WindowOperator

SEEDS = range(8)


class Ids:
    """An aggregate that keeps the ids of its tuples (tuples are ``(id, key, ts)``)."""

    def create(self):
        return []

    def add(self, acc, tup):
        return acc + [tup[0]]

    def merge(self, a, b):
        return a + b


def T(i, key, ts):
    return (i, key, ts)  # built at run time: a distinct object per call


class Run:
    """What the runtime does around the operator (instance/windowing.py, timekeeping.py)."""

    def __init__(self, window, agg=True, lateness=0.0, track=False, event_time=True):
        self.q = TimerQueue()
        self.agg = agg
        self.op = WindowOperator(window, self.q, aggregate=Ids() if agg else None, event_time=event_time,
                                 lateness=lateness, track=track)
        self.wm = NEG_INF
        self.firings = []  # every Firing, in order
        self.joined = {}  # tuple id -> windows it joined
        self.too_late = []

    def add(self, tup):
        i, key, ts = tup
        n, fs = self.op.add(key, ts, tup, self.wm)
        if n is TOO_LATE:
            assert fs == ()
            self.too_late.append(i)
        else:
            assert n >= 1
            self.joined[i] = n
        fs = list(fs)
        for f in fs:
            assert f.late or self.op.by_count
        self.firings += fs
        return n, fs

    def advance(self, wm):
        out = []
        if wm <= self.wm:
            return out
        self.wm = wm
        while True:
            t = self.q.pop_due(EVENT, wm)
            if t is None:
                break
            ts, key, tag = t
            f = self.op.on_timer(key, tag)
            for one in (f if isinstance(f, list) else [f] if f is not None else []):
                assert one.end == ts and one.end <= wm and not one.late
                out.append(one)
        ends = [f.end for f in out]
        assert ends == sorted(ends)  # windows fire in time order
        self.firings += out
        return out


def rec(f):
    """A firing as a comparable record."""
    res = sorted(f.result) if not f.result or not isinstance(f.result[0], tuple) else sorted(t[0] for t in f.result)
    return (repr(f.key), f.start, f.end, tuple(res), f.late)


def recs(fs):
    return sorted(rec(f) for f in fs)


# -- inputs -----------------------------------------------------------------------------------

def scenario(rnd, n=150, keys=3, disorder=6, late_every=0.1, very_late=40, lag=2, step=(0, 1, 1, 2), scale=1):
    """Events ("t", (id, key, ts)) and ("w", watermark): a source whose timestamps go
    forward with some disorder and a few very late tuples; its watermark is the largest
    timestamp so far minus ``lag`` (so some tuples come below it: late). Integer
    timestamps divided by ``scale`` (a power of 2: exact in floats)."""
    events, base, top = [], 0, NEG_INF
    for i in range(n):
        base += rnd.choice(step)
        ts = base - rnd.randint(0, disorder)
        if rnd.random() < late_every:
            ts -= rnd.randint(0, very_late)
        key = f"k{rnd.randrange(keys)}"
        events.append(("t", T(i, key, ts / scale)))
        top = max(top, ts)
        if rnd.random() < 0.3:
            events.append(("w", (top - lag) / scale))
    events.append(("w", POS_INF))
    return events


def play(run, events, upto=None):
    per_step = []
    for kind, x in events[:upto]:
        if kind == "t":
            per_step.append(("t", x[0], recs(run.add(x)[1])))
        else:
            per_step.append(("w", x, recs(run.advance(x))))
    return per_step


# -- the specification, computed directly ---------------------------------------------------------

def fixed_windows(ts, size, slide):
    """Every window [k*slide, k*slide + size) holding ts (by trying every k near it)."""
    lo = math.floor((ts - size) / slide) - 2
    hi = math.floor(ts / slide) + 2
    return [(k, k * slide, k * slide + size) for k in range(lo, hi + 1) if k * slide <= ts < k * slide + size]


class FixedModel:
    """Tumbling/sliding windows on event time with allowed lateness, as specified: a
    tuple joins each of its windows not yet over by more than the lateness; a window
    fires when the watermark reaches its end, and again at once for each late tuple;
    it is gone at end + lateness; a tuple that joins none is too late."""

    def __init__(self, size, slide, lateness):
        self.size, self.slide, self.lateness = size, slide, lateness
        self.wins = {}  # (key, k) -> [start, end, ids, armed]
        self.wm = NEG_INF
        self.joined, self.too_late = {}, []

    def add(self, tup):
        i, key, ts = tup
        out, n = [], 0
        for k, start, end in fixed_windows(ts, self.size, self.slide):
            if end + self.lateness <= self.wm:
                continue
            n += 1
            w = self.wins.get((key, k))
            if w is None:
                w = self.wins[(key, k)] = [start, end, [], end > self.wm]
            w[2].append(i)
            if end <= self.wm:
                out.append((repr(key), start, end, tuple(sorted(w[2])), True))
        if n:
            self.joined[i] = n
        else:
            self.too_late.append(i)
        return sorted(out)

    def advance(self, wm):
        out = []
        if wm <= self.wm:
            return out
        self.wm = wm
        for (key, k), w in list(self.wins.items()):
            if w[3] and w[1] <= wm:
                w[3] = False
                out.append((repr(key), w[0], w[1], tuple(sorted(w[2])), False))
            if w[1] + self.lateness <= wm:
                del self.wins[(key, k)]
        return sorted(out)


class SessionModel:
    """Sessions per key: a tuple's [ts, ts + gap) merges with every session it overlaps
    or touches; the merged session fires when the watermark reaches its end (at once,
    late, if it already has); gone at end + lateness; too late when it touches no kept
    session and its own end + lateness has passed."""

    def __init__(self, gap, lateness):
        self.gap, self.lateness = gap, lateness
        self.sessions = {}  # key -> [[start, end, ids, armed]]
        self.wm = NEG_INF
        self.joined, self.too_late = {}, []

    def add(self, tup):
        i, key, ts = tup
        ss = self.sessions.setdefault(key, [])
        start, end = ts, ts + self.gap
        touching = [s for s in ss if s[0] <= end and start <= s[1]]
        if not touching and end + self.lateness <= self.wm:
            self.too_late.append(i)
            return []
        self.joined[i] = 1
        for s in touching:
            ss.remove(s)
        new = [min([start] + [s[0] for s in touching]), max([end] + [s[1] for s in touching]),
               [i] + [x for s in touching for x in s[2]], False]
        ss.append(new)
        if new[1] > self.wm:
            new[3] = True
            return []
        return [(repr(key), new[0], new[1], tuple(sorted(new[2])), True)]

    def advance(self, wm):
        out = []
        if wm <= self.wm:
            return out
        self.wm = wm
        for key, ss in self.sessions.items():
            for s in list(ss):
                if s[3] and s[1] <= wm:
                    s[3] = False
                    out.append((repr(key), s[0], s[1], tuple(sorted(s[2])), False))
                if s[1] + self.lateness <= wm:
                    ss.remove(s)
        return sorted(out)


def play_model(model, events):
    per_step = []
    for kind, x in events:
        if kind == "t":
            per_step.append(("t", x[0], model.add(x)))
        else:
            per_step.append(("w", x, model.advance(x)))
    return per_step


def check_acks(run):
    """track=True: each tuple is handed out (for acking) once per window it joined, and
    only by windows that hold it."""
    handed = {}
    for f in run.firings:
        held = set(rec(f)[3])
        for t in f.pending:
            assert t[0] in held
            handed[t[0]] = handed.get(t[0], 0) + 1
    assert handed == run.joined


# -- time windows against the brute force ------------------------------------------------------------

WINDOWS = [
    ("tumbling 5", Window.tumbling(5), 5, 5),
    ("tumbling 1", Window.tumbling(Duration(1)), 1, 1),
    ("sliding 6/2", Window.sliding(6, 2), 6, 2),  # length a multiple of the interval
    ("sliding 5/2", Window.sliding(5, 2), 5, 2),  # and not a multiple
    ("sliding 7/3", Window.sliding(Duration(7), Duration(3)), 7, 3),
    ("sliding 4/4", Window.sliding(4, 4), 4, 4),  # (= tumbling)
    ("sliding 1.5/0.5", Window.sliding(1.5, 0.5), 1.5, 0.5),  # fractions exact in binary
]


@pytest.mark.parametrize("lateness", [0.0, 4.0])
@pytest.mark.parametrize("name,window,size,slide", WINDOWS, ids=[w[0] for w in WINDOWS])
@pytest.mark.parametrize("agg", [True, False], ids=["aggregating", "tuples"])
def test_fixed_windows_match_brute_force(name, window, size, slide, lateness, agg):
    for seed in SEEDS:
        rnd = random.Random(f"{name}-{seed}")
        events = scenario(rnd, scale=4 if size < 2 else 1)  # (quarters for the short windows)
        run = Run(window, agg=agg, lateness=lateness, track=True)
        got = play(run, events)
        model = FixedModel(size, slide, lateness)
        want = play_model(model, events)
        assert got == want, f"seed {seed}"
        assert run.too_late == model.too_late and run.joined == model.joined
        assert run.op.open_windows() == 0 and not run.op.windows  # all fired and cleaned at +inf
        assert len(run.q) == 0
        check_acks(run)


@pytest.mark.parametrize("lateness", [0.0, 5.0])
@pytest.mark.parametrize("gap", [3, 2.5])
@pytest.mark.parametrize("agg", [True, False], ids=["aggregating", "tuples"])
def test_sessions_match_brute_force(gap, lateness, agg):
    for seed in SEEDS:
        rnd = random.Random(f"session-{gap}-{lateness}-{seed}")
        events = scenario(rnd, n=120, step=(0, 1, 2, 3, 5, 8), disorder=5)
        run = Run(Window.session(gap), agg=agg, lateness=lateness, track=True)
        got = play(run, events)
        model = SessionModel(gap, lateness)
        want = play_model(model, events)
        assert got == want, f"seed {seed}"
        assert run.too_late == model.too_late and run.joined == model.joined
        assert not run.op.windows and len(run.q) == 0
        check_acks(run)


@pytest.mark.parametrize("seed", SEEDS)
def test_sessions_all_on_time_are_the_gap_split(seed):
    """With every tuple on time (at or above the watermark when it arrives), the sessions
    are those of the whole input split where two timestamps of a key are more than the
    gap apart, whatever the arrival order. (A gap of 2.5 with integer timestamps: no
    tuple lands exactly on a session's end.)"""
    rnd = random.Random(seed)
    gap, run, wm = 2.5, Run(Window.session(2.5)), NEG_INF
    pts, top = [], 0
    for i in range(200):
        ts = max(wm, top - rnd.randint(0, 8)) if wm > NEG_INF else top - rnd.randint(0, 8)
        ts = int(math.ceil(ts))
        top += rnd.choice([0, 1, 1, 3, 6])
        key = f"k{rnd.randrange(3)}"
        pts.append((i, key, ts))
        run.add(T(i, key, ts))
        if rnd.random() < 0.2:
            wm = max(wm, top - 8)
            run.advance(wm)
    run.advance(POS_INF)
    want = []
    for key in {p[1] for p in pts}:
        mine = sorted((ts, i) for i, k, ts in pts if k == key)
        cur, last = [], None
        for ts, i in mine:
            if cur and ts > last + gap:
                want.append((repr(key), cur[0][0], last + gap, tuple(sorted(x for _, x in cur)), False))
                cur = []
            cur.append((ts, i))
            last = ts
        want.append((repr(key), cur[0][0], last + gap, tuple(sorted(x for _, x in cur)), False))
    assert recs(run.firings) == sorted(want)
    assert not run.too_late


# -- count windows ----------------------------------------------------------------------------

@pytest.mark.parametrize("size,slide", [(4, 4), (1, 1), (5, 2), (6, 3), (3, 1), (7, 7)])
@pytest.mark.parametrize("agg", [True, False], ids=["aggregating", "tuples"])
def test_count_windows_match_brute_force(size, slide, agg):
    window = Window.tumbling(Count(size)) if size == slide else Window.sliding(Count(size), Count(slide))
    for seed in SEEDS[:4]:
        rnd = random.Random(seed)
        run = Run(window, agg=agg, track=True)
        seen, want = {}, []
        for i in range(120):
            key = rnd.choice(["a", "b", None])
            n, fs = run.add(T(i, key, rnd.uniform(-100, 100)))  # timestamps do not matter
            mine = seen.setdefault(key, [])
            mine.append(i)
            c = len(mine)
            assert n == sum(1 for e in range(c, c + size) if e % slide == 0)
            if c % slide == 0:
                want.append((repr(key), max(0, c - size), c, tuple(mine[max(0, c - size):]), False))
                assert [rec(f) for f in fs] == [want[-1]]
            else:
                assert fs == []
        assert run.advance(POS_INF) == []  # count windows have no timers
        assert recs(run.firings) == sorted(want)
        # handed out for acking: once per window that fired
        handed = {}
        for f in run.firings:
            for t in f.pending:
                handed[t[0]] = handed.get(t[0], 0) + 1
        for key, mine in seen.items():
            fired_ends = [e for e in range(slide, len(mine) + 1, slide)]
            for c, i in enumerate(mine, 1):
                assert handed.get(i, 0) == sum(1 for e in fired_ends if e - size < c <= e)


def test_count_window_new_and_expired():
    run = Run(Window.sliding(Count(4), Count(2)), agg=False)
    tups = [T(i, "k", 0) for i in range(8)]
    fired = [f for t in tups for f in run.add(t)[1]]
    assert [(f.start, f.end, [t[0] for t in f.result]) for f in fired] == [
        (0, 2, [0, 1]), (0, 4, [0, 1, 2, 3]), (2, 6, [2, 3, 4, 5]), (4, 8, [4, 5, 6, 7])]
    assert [[t[0] for t in f.new] for f in fired] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [[t[0] for t in f.expired] for f in fired] == [[], [], [0, 1], [2, 3]]


# -- small cases written out --------------------------------------------------------------------------

def test_tumbling_fires_when_watermark_reaches_end():
    run = Run(Window.tumbling(10))
    run.add(T(0, "a", 3))
    run.add(T(1, "a", 9.5))
    run.add(T(2, "b", 10))
    assert run.advance(9.999) == []
    assert [rec(f) for f in run.advance(10)] == [("'a'", 0, 10, (0, 1), False)]
    assert run.op.open_windows() == 1
    assert [rec(f) for f in run.advance(25)] == [("'b'", 10, 20, (2,), False)]
    assert run.op.open_windows() == 0


def test_sliding_tuple_joins_every_window_holding_it():
    run = Run(Window.sliding(5, 2))  # windows [2k, 2k + 5)
    assert run.add(T(0, None, 4.5))[0] == 3  # [0,5) [2,7) [4,9)
    assert run.add(T(1, None, -1))[0] == 2  # [-4,1) [-2,3) (not [-6,-1): it ends at -1)
    assert run.add(T(2, None, 6))[0] == 3  # [2,7) [4,9) [6,11)
    fired = run.advance(POS_INF)
    assert [(f.start, f.end, sorted(f.result)) for f in fired] == [
        (-4, 1, [1]), (-2, 3, [1]), (0, 5, [0]), (2, 7, [0, 2]), (4, 9, [0, 2]), (6, 11, [2])]


def test_tuples_mode_new_and_expired_on_sliding():
    run = Run(Window.sliding(4, 2), agg=False)
    for i, ts in enumerate([0, 1, 2, 3, 4, 5]):
        run.add(T(i, "k", ts))
    fired = run.advance(POS_INF)
    assert [(f.start, f.end, [t[0] for t in f.result], [t[0] for t in f.new], [t[0] for t in f.expired])
            for f in fired] == [
        (-2, 2, [0, 1], [0, 1], []),
        (0, 4, [0, 1, 2, 3], [2, 3], []),
        (2, 6, [2, 3, 4, 5], [4, 5], [0, 1]),
        (4, 8, [4, 5], [], [2, 3]),
    ]


def test_allowed_lateness_refires_with_late_tuple_then_cleans_up():
    run = Run(Window.tumbling(10), lateness=5, track=True)
    run.add(T(0, "a", 1))
    run.add(T(1, "a", 2))
    [f] = run.advance(10)
    assert rec(f) == ("'a'", 0, 10, (0, 1), False) and [t[0] for t in f.pending] == [0, 1]
    assert run.op.open_windows() == 1  # kept for the lateness
    n, fs = run.add(T(2, "a", 5))  # late, within the lateness: fires again at once
    assert n == 1 and [rec(f) for f in fs] == [("'a'", 0, 10, (0, 1, 2), True)]
    assert [t[0] for t in fs[0].pending] == [2]  # only the new tuple to ack
    n, fs = run.add(T(3, "a", 9.9))
    assert [rec(f) for f in fs] == [("'a'", 0, 10, (0, 1, 2, 3), True)]
    assert run.advance(14.9) == [] and run.op.open_windows() == 1
    assert run.add(T(4, "a", 6))[0] == 1  # still within (end + lateness = 15 > 14.9)
    assert run.advance(15) == [] and run.op.open_windows() == 0  # cleaned up, without firing
    n, fs = run.add(T(5, "a", 9))
    assert n is TOO_LATE and fs == [] and run.op.open_windows() == 0
    assert run.too_late == [5] and len(run.q) == 0


def test_late_tuple_creates_window_that_never_had_tuples():
    run = Run(Window.tumbling(10), lateness=5)
    run.advance(12)
    n, fs = run.add(T(0, "a", 3))
    assert n == 1 and [rec(f) for f in fs] == [("'a'", 0, 10, (0,), True)]
    assert run.op.open_windows() == 1
    run.advance(15)
    assert run.op.open_windows() == 0 and len(run.q) == 0


def test_too_late_without_lateness():
    run = Run(Window.tumbling(10))
    run.advance(15)
    assert run.add(T(0, "a", 12))[0] == 1  # below the watermark, but its window [10, 20) has not ended
    assert run.add(T(1, "a", 9))[0] is TOO_LATE
    assert run.op.windows.keys() == {"a"}
    assert run.add(T(2, "b", 9))[0] is TOO_LATE
    assert "b" not in run.op.windows  # a too-late tuple leaves nothing behind


def test_sliding_late_tuple_partly_too_late():
    run = Run(Window.sliding(10, 5), lateness=2)
    run.add(T(0, "k", 7))  # [0,10) [5,15)
    fired = run.advance(12)
    assert [rec(f) for f in fired] == [("'k'", 0, 10, (0,), False)]
    # at 12: [0,10) kept until 12 (gone), [5,15) open: a tuple at 8 joins only [5,15)
    n, fs = run.add(T(1, "k", 8))
    assert n == 1 and fs == []
    assert [rec(f) for f in run.advance(15)] == [("'k'", 5, 15, (0, 1), False)]


def test_sessions_merge_and_late_tuple_bridges_two_sessions():
    run = Run(Window.session(3), lateness=10, track=True)
    run.add(T(0, "u", 0))  # [0, 3)
    run.add(T(1, "u", 5))  # [5, 8)
    run.add(T(2, "u", 1))  # [0, 4)
    assert sorted((w.start, w.end) for w in run.op.windows["u"].values()) == [(0, 4), (5, 8)]
    fired = run.advance(9)
    assert [rec(f) for f in fired] == [("'u'", 0, 4, (0, 2), False), ("'u'", 5, 8, (1,), False)]
    # late (the watermark is 9), within the lateness: [3.5, 6.5) touches both: one session
    n, fs = run.add(T(3, "u", 3.5))
    assert n == 1 and [rec(f) for f in fs] == [("'u'", 0, 8, (0, 1, 2, 3), True)]
    assert [t[0] for t in fs[0].pending] == [3]
    assert run.op.open_windows() == 1
    run.advance(18)
    assert run.op.open_windows() == 0 and len(run.q) == 0
    check_acks(run)


def test_session_late_tuple_bridges_fired_and_open_session():
    run = Run(Window.session(3), lateness=10)
    run.add(T(0, "u", 0))  # [0, 3)
    run.advance(4)  # fires [0, 3)
    run.add(T(1, "u", 6))  # [6, 9), open
    n, fs = run.add(T(2, "u", 3))  # [3, 6): touches both; the merged [0, 9) has not ended
    assert n == 1 and fs == []
    assert [rec(f) for f in run.advance(9)] == [("'u'", 0, 9, (0, 1, 2), False)]


def test_session_tuple_inside_an_open_session_is_not_too_late():
    """A tuple whose own [ts, ts + gap) ended long ago but that falls inside a session
    still open joins it (its window is the merged one, which has not ended)."""
    run = Run(Window.session(5), lateness=1)
    for i, ts in enumerate(range(0, 100, 4)):
        run.add(T(i, "k", ts))
    run.advance(50)
    n, fs = run.add(T(99, "k", 10.5))
    assert n == 1 and fs == []
    [f] = run.advance(POS_INF)
    assert rec(f)[1:3] == (0, 101) and 99 in f.result and len(f.result) == 26


def test_session_touching_windows_merge():
    run = Run(Window.session(2))
    run.add(T(0, "k", 0))  # [0, 2)
    run.add(T(1, "k", 2))  # [2, 4) touches: one session
    [f] = run.advance(POS_INF)
    assert rec(f) == ("'k'", 0, 4, (0, 1), False)


def test_unkeyed_windows_key_none():
    run = Run(Window.tumbling(1))
    run.add(T(0, None, 0.5))
    [f] = run.advance(1)
    assert f.key is None and f.result == [0]


def test_processing_time():
    q = TimerQueue()
    op = WindowOperator(Window.tumbling(2), q, aggregate=Ids(), event_time=False, lateness=5)
    assert op.lateness == 0.0  # lateness is for event time only
    for i, now in enumerate([100.1, 100.5, 101.9, 102.0]):
        assert op.add("k", now, T(i, "k", now), now) == (1, ())
    assert q.pop_due(EVENT, POS_INF) is None  # processing timers only
    t = q.pop_due(PROCESSING, 102.0)
    assert t == (102, "k", ("w", 50))
    f = op.on_timer("k", t[2])
    assert (f.start, f.end, f.result) == (100, 102, [0, 1, 2])
    assert q.pop_due(PROCESSING, 103.9) is None


# -- checkpoints: snapshot_key / load_key ----------------------------------------------------------

def _checkpoint(run):
    """What a checkpoint keeps, through a real state snapshot (msgpack)."""
    st = State()
    st.system["windows"] = [[k, run.op.snapshot_key(k, list)] for k in run.op.keys()]
    st.system["timers"] = [[k, v] for k, v in run.q.by_key().items()]
    return State.restore(st.snapshot())


def _restore(st, window, agg, lateness, wm):
    run = Run(window, agg=agg, lateness=lateness)
    for key, doc in st.system["windows"]:
        if doc is not None:
            run.op.load_key(key, doc, tuple)
    for key, entries in st.system["timers"]:
        run.q.load(key, entries)
    run.wm = wm
    return run


def _full(f):
    """A firing with the tuple windows' new/expired too."""
    r = rec(f)
    if f.new is None:
        return r
    return r + (tuple(sorted(t[0] for t in f.new)), tuple(sorted(t[0] for t in f.expired)))


ROUND_TRIP = [
    ("tumbling", Window.tumbling(5), 0.0),
    ("sliding", Window.sliding(5, 2), 3.0),
    ("session", Window.session(2.5), 4.0),
    ("count", Window.tumbling(Count(3)), 0.0),
    ("count sliding", Window.sliding(Count(5), Count(2)), 0.0),
]


@pytest.mark.parametrize("name,window,lateness", ROUND_TRIP, ids=[r[0] for r in ROUND_TRIP])
@pytest.mark.parametrize("agg", [True, False], ids=["aggregating", "tuples"])
def test_snapshot_and_load_give_the_same_later_results(name, window, lateness, agg):
    for seed in SEEDS[:5]:
        rnd = random.Random(f"rt-{name}-{seed}")
        events = scenario(rnd, n=120)
        cut = len(events) // 2
        a = Run(window, agg=agg, lateness=lateness)
        play(a, events, cut)
        b = _restore(_checkpoint(a), window, agg, lateness, a.wm)
        assert b.op.open_windows() == a.op.open_windows()
        assert b.q.pending() == a.q.pending()
        before_a, before_b = len(a.firings), len(b.firings)
        for kind, x in events[cut:]:
            if kind == "t":
                ra, rb = a.add(x)[0], b.add(T(*x))[0]
                assert ra == rb
            else:
                a.advance(x)
                b.advance(x)
        got = [_full(f) for f in b.firings[before_b:]]
        want = [_full(f) for f in a.firings[before_a:]]
        assert sorted(got) == sorted(want), f"seed {seed}"
        assert [f.late for f in b.firings[before_b:]] == [f.late for f in a.firings[before_a:]]


def test_snapshot_of_an_empty_key_is_none():
    q = TimerQueue()
    op = WindowOperator(Window.tumbling(1), q, aggregate=Ids())
    assert op.snapshot_key("nobody", list) is None
    assert op.keys() == set()


# -- sliced sliding windows (bittern/time/slicing.py) give the per-window operator's results --------

@pytest.mark.parametrize("length,every,lateness", [(4, 1, 0.0), (4, 2, 3.0), (6, 3, 0.0), (2, 2, 1.0),
                                                   (1.5, 0.5, 0.0), (10, 1, 5.0)])
def test_sliced_sliding_windows_fire_exactly_as_the_per_window_operator(length, every, lateness):
    from bittern.time.slicing import SlicedWindowOperator, make_operator
    window = Window.sliding(length, every)
    assert isinstance(make_operator(window, TimerQueue(), Ids(), mergeable=True), SlicedWindowOperator)
    for seed in SEEDS:
        events = scenario(random.Random(seed), scale=2)
        plain = Run(window, lateness=lateness)
        sliced = Run(window, lateness=lateness)
        sliced.op = SlicedWindowOperator(window, sliced.q, Ids(), lateness=lateness)
        play(plain, events)
        play(sliced, events)
        assert recs(sliced.firings) == recs(plain.firings), seed
        assert sliced.too_late == plain.too_late
        assert sliced.op.open_windows() == 0 and not sliced.op.nxt and len(sliced.q) == 0


def test_sliced_sliding_windows_keep_one_accumulator_and_one_timer_per_key():
    from bittern.time.slicing import SlicedWindowOperator
    window = Window.sliding(10, 1)
    run = Run(window)
    run.op = SlicedWindowOperator(window, run.q, Ids())
    for i in range(1000):
        run.add(T(i, f"k{i}", 5.5))  # 1000 keys, each seen once
    assert run.op.open_windows() == 1000 and len(run.q) == 1  # per-window: 10,000 of each
    run.advance(POS_INF)
    assert len(run.firings) == 10 * 1000 and run.op.open_windows() == 0


def test_sliced_windows_survive_a_snapshot():
    from bittern.time.slicing import SlicedWindowOperator
    window = Window.sliding(4, 1)
    events = scenario(random.Random(3), scale=2)
    half = len(events) // 2
    whole = Run(window)
    whole.op = SlicedWindowOperator(window, whole.q, Ids())
    play(whole, events)
    first = Run(window)
    first.op = SlicedWindowOperator(window, first.q, Ids())
    play(first, events, upto=half)
    docs = {k: first.op.snapshot_key(k, list) for k in first.op.keys()}
    timers = first.q.by_key()
    again = Run(window)
    again.op = SlicedWindowOperator(window, again.q, Ids())
    again.wm = first.wm
    for k, entries in timers.items():
        again.q.load(k, entries)
    for k, doc in docs.items():
        if doc is not None:
            again.op.load_key(k, doc, tuple)
    play(again, events[half:])
    assert recs(first.firings + again.firings) == recs(whole.firings)
