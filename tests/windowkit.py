"""Brute-force expectations for the window tests (tests/topologies/windowed_seq.py):
the rows ``[key, start, end, count, sum, lo, hi]`` every window must produce, computed
directly from the input, and readers of what a run wrote."""
from __future__ import annotations

import glob
import json
import math
import os


def numbers(n, keys, eps, skip=None, par=1, stop=None):
    """The input: (number, key, event time) for 0..n-1; with ``skip=(P, R)`` only the
    numbers with ``n % P < R`` (``test.skip``); with ``stop={K: M}`` spout task K of
    ``par`` emits only its numbers below M (``test.stop``)."""
    out = []
    stop = stop or {}
    for x in range(n):
        if skip and x % skip[0] >= skip[1]:
            continue
        if x % par in stop and x >= stop[x % par]:
            continue
        out.append((x, f"k{x % keys}", x / eps))
    return out


def _row(key, start, end, ns):
    return (key, start, end, len(ns), sum(ns), min(ns), max(ns))


def tumbling(n, keys, eps, length, points=None):
    wins = {}
    for x, key, ts in numbers(n, keys, eps) if points is None else points:
        k = math.floor(ts / length)
        wins.setdefault((key, k), []).append(x)
    return sorted(_row(key, k * length, k * length + length, ns) for (key, k), ns in wins.items())


def sliding(n, keys, eps, length, every, points=None):
    wins = {}
    for x, key, ts in numbers(n, keys, eps) if points is None else points:
        k = math.floor(ts / every)
        while k * every + length > ts:
            wins.setdefault((key, k), []).append(x)
            k -= 1
    return sorted(_row(key, k * every, k * every + length, ns) for (key, k), ns in wins.items())


def session(points, gap):
    """``points``: (number, key, ts); sessions per key (a gap larger than ``gap`` ends one)."""
    by_key, out = {}, []
    for x, key, ts in points:
        by_key.setdefault(key, []).append((ts, x))
    for key, pts in by_key.items():
        pts.sort()
        cur, start, last = [], None, None
        for ts, x in pts:
            if cur and ts > last + gap:
                out.append(_row(key, start, last + gap, cur))
                cur = []
            if not cur:
                start = ts
            cur.append(x)
            last = ts
        out.append(_row(key, start, last + gap, cur))
    return sorted(out)


def read_rows(out):
    """Rows a run wrote: the sink's committed files (exactly once) or its JSON lines."""
    rows = []
    for path in glob.glob(os.path.join(out, "sink", "win-*-*.jsonl")) + \
            glob.glob(os.path.join(out, "rows", "rows-*.jsonl")):
        with open(path) as f:
            rows += [tuple(json.loads(line)) for line in f if line.strip()]
    return sorted(rows)


def normalise(rows):
    """Window bounds as floats, rounded (they are computed as k * length)."""
    return sorted((r[0], round(float(r[1]), 6), round(float(r[2]), 6)) + tuple(r[3:]) for r in rows)


# -- count windows: arrival order across spout tasks is not deterministic, so these
#    check structure (rows carry their numbers: TEST_SETS=1) ------------------------------
def _by_key(rows):
    out = {}
    for r in rows:
        out.setdefault(r[0], []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r[2])  # by end (the count of the key's tuples at the fire)
    return out


def _check_chunks(key, chunks, want, size, par):
    """``chunks``: the key's tuples in consecutive groups of ``size`` arrivals, in order.
    They are disjoint, hold exactly ``size`` numbers, cover all of the key's numbers but
    the last ``len(want) % size`` arrivals, and each spout task's numbers arrive in order."""
    seen = []
    for i, c in enumerate(chunks):
        assert len(c) == size, f"key {key}: arrivals {i * size + 1}..{(i + 1) * size} hold {len(c)} numbers: {c}"
        seen += c
    assert len(seen) == len(set(seen)), f"key {key}: a number in two windows: {sorted(seen)}"
    assert set(seen) <= set(want), f"key {key}: numbers not of this key: {sorted(set(seen) - set(want))}"
    left = sorted(set(want) - set(seen))
    assert len(seen) == len(want) // size * size and len(left) == len(want) % size, \
        f"key {key}: {len(seen)} of {len(want)} numbers windowed, left over {left}"
    for task in range(par):  # each spout task's numbers come in order: windows in order, leftovers last
        mine = [x for c in chunks for x in sorted(c) if x % par == task] + [x for x in left if x % par == task]
        assert mine == sorted(mine), f"key {key}: spout task {task}'s numbers out of order across windows: {mine}"


def check_count_tumbling(rows, n, keys, size, par):
    """Tumbling ``Count(size)``: per key windows (0, N], (N, 2N], ... of exactly N numbers."""
    want = {}
    for x, key, _ in numbers(n, keys, 1):
        want.setdefault(key, []).append(x)
    got = _by_key(rows)
    assert set(got) == {k for k, xs in want.items() if len(xs) >= size}, sorted(got)
    for key, rs in got.items():
        bounds = [(r[1], r[2]) for r in rs]
        assert bounds == [(i * size, i * size + size) for i in range(len(want[key]) // size)], \
            f"key {key}: windows {bounds}"
        for r in rs:
            assert r[3] == size and sorted(r[7]) == r[7] and len(r[7]) == size, r
            assert (r[4], r[5], r[6]) == (sum(r[7]), min(r[7]), max(r[7])), r
        _check_chunks(key, [r[7] for r in rs], want[key], size, par)


def check_count_sliding(rows, n, keys, length, every, par):
    """Sliding ``Count(length)`` every ``Count(every)`` (``every`` divides ``length``):
    per key a fire every ``every`` arrivals, each holding the last min(length, seen)."""
    assert length % every == 0
    want = {}
    for x, key, _ in numbers(n, keys, 1):
        want.setdefault(key, []).append(x)
    got = _by_key(rows)
    assert set(got) == {k for k, xs in want.items() if len(xs) >= every}, sorted(got)
    for key, rs in got.items():
        ends = [r[2] for r in rs]
        assert ends == [every * (i + 1) for i in range(len(want[key]) // every)], f"key {key}: fires at {ends}"
        chunks, before = [], set()
        for r in rs:
            e = r[2]
            assert r[1] == max(0, e - length) and r[3] == min(length, e) == len(r[7]), r
            assert (r[4], r[5], r[6]) == (sum(r[7]), min(r[7]), max(r[7])), r
            new = set(r[7]) - before
            chunks.append(sorted(new))
            before |= new
            # the window is the last length / every groups of arrivals
            assert set(r[7]) == set().union(*map(set, chunks[-(length // every):])), \
                f"key {key}: window ending at arrival {e} is not the last {length} arrivals: {r[7]}"
        _check_chunks(key, chunks, want[key], every, par)
