"""Checkpoint cost with a large keyed state: full snapshot vs incremental delta.

The measurement behind the ``ckpt-1m`` rows of scripts/bench.py and behind
scripts/ckpt_measure.py (its command line). It imports the engine (and sets the
process's GC thresholds as an instance does), so scripts/bench.py runs it in a
process of its own (``ckpt_measure.py --json``), never in its own.

:func:`measure` builds a State with ``keys`` keyed entries, then for each fraction of
the keys changed per interval (0.1 %, 1 %, 10 %) takes ``rounds`` checkpoints through
the instance's own machinery (instance/ckptwriter.py ``Checkpointing``: the change log
detached, the delta encoded, the file written by the writer, CKPT_COMMIT making it the
next parent) and records, per fraction:

* full: the bytes of a full snapshot (what every checkpoint wrote before deltas);
* delta: the bytes of each delta file, and their share of the full snapshot;
* pause: what stops the instance's loop, the detach + encode, per checkpoint;
* write: the writer thread's part (write + fsync), per checkpoint;

then ``compactions`` compactions (the chain merged into a new base on the writer
thread) with the longest gap a busy loop on the main thread saw meanwhile (the GIL is
shared), and the same loop's longest gap alone for as long (what the machine does to
any thread); finally it checks that the last compacted base restores to exactly the
live state.
"""
from __future__ import annotations

import random
import statistics
import sys
import time
from types import SimpleNamespace

from .common import ROOT

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bittern.api.state import State  # noqa: E402
from bittern.checkpoint import CheckpointStore  # noqa: E402
from instance.ckptwriter import Checkpointing  # noqa: E402
from instance.incremental import COMPACT  # noqa: E402
from instance.runtime import tune_gc  # noqa: E402

FRACTIONS = (0.001, 0.01, 0.1)


class _Inst:
    """What ``Checkpointing`` needs of an instance."""

    def __init__(self, task):
        self.task = task
        self.saved = []

    def send_ctrl(self, op, **fields):
        self.saved.append(fields)

    def report_error(self, where, exc, fatal=False):
        raise exc


class _NoMeta:
    def get(self, path):
        return None

    def children(self, path):
        return []


def busy(cond):
    """Gaps (seconds) between iterations of a loop doing ~10 us of work while ``cond()``."""
    gaps, last = [], time.perf_counter()
    while cond():
        x = 0
        for i in range(200):
            x += i
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    return gaps


def wait_results(ck):
    while True:
        got = ck.writer.results()
        if got:
            assert all(r.ok for r in got), got
            return got
        time.sleep(0.001)


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def build(n, key_groups=128):
    st = State(key_groups)
    put = st.keyed.put
    for i in range(n):
        put(f"key-{i:07d}", i)
    st.keyed.detach_log()
    return st


def _quiet(line):
    pass


def measure(root, keys=1_000_000, rounds=5, fractions=FRACTIONS, compactions=3, say=_quiet, seed=1):
    """Run the measurement with its checkpoint files in directory ``root`` (the caller
    creates and removes it); ``say(line)`` gets the human-readable lines as they come.
    Returns the figures as a JSON-able dict (times in ms, sizes in bytes)."""
    rng = random.Random(seed)
    out = {"keys": keys, "rounds": rounds, "python": sys.version.split()[0]}
    t0 = time.perf_counter()
    st = build(keys)
    tune_gc({"bittern.instance.gc.threshold": 50000})  # as an instance does after initialize
    out["build_s"] = time.perf_counter() - t0
    say(f"{keys:,} keys in keyed state (built in {out['build_s']:.1f} s); python {out['python']}")
    t0 = time.perf_counter()
    full = len(st.snapshot())
    out.update(full_bytes=full, full_encode_ms=(time.perf_counter() - t0) * 1000)
    say(f"full snapshot: {full:,} bytes, encoded in {out['full_encode_ms']:.0f} ms (on the loop, before "
        f"deltas)\n")
    conf = SimpleNamespace(max_deltas=1000, keep=3, incremental=True)  # (CheckpointSettings' fields)
    store = CheckpointStore(root, _NoMeta(), "measure", keep=3)
    ck = Checkpointing(_Inst(1), store, conf, st.key_groups)
    cid = 1
    # the first checkpoint after a restore to an existing checkpoint: a base on disk
    store.save(cid, 1, st.snapshot())
    ck.policy.reset(cid, 0)
    names = [f"key-{i:07d}" for i in range(keys)]
    say(f"{'changed':>8} {'keys':>8} {'delta bytes':>12} {'of full':>8} {'pause med':>10} "
        f"{'pause max':>10} {'write med':>10}")
    out["fractions"] = []
    try:
        for frac in fractions:
            k = int(keys * frac)
            sizes, pauses, writes = [], [], []
            for _ in range(rounds):
                put = st.keyed.put
                for key in rng.sample(names, k):
                    put(key, rng.randrange(1 << 30))
                cid += 1
                job = ck.prepare(cid, st, epoch=1)
                ck.submit(job)
                (r,) = ck.writer.results()
                assert r.ok, r.error
                ck.complete(cid)
                sizes.append(r.nbytes)
                pauses.append(job.pause_ms)
                writes.append(r.write_ms)
            row = {"changed_pct": frac * 100, "keys_changed": k, "delta_bytes": sizes, "pause_ms": pauses,
                   "write_ms": writes, "delta_bytes_med": statistics.median(sizes),
                   "share_pct": statistics.median(sizes) / full * 100, "pause_med_ms": statistics.median(pauses),
                   "pause_max_ms": max(pauses), "write_med_ms": statistics.median(writes)}
            out["fractions"].append(row)
            say(f"{frac * 100:>7g}% {k:>8,} {row['delta_bytes_med']:>12,.0f} {row['share_pct']:>7.2f}% "
                f"{row['pause_med_ms']:>8.2f}ms {row['pause_max_ms']:>8.2f}ms {row['write_med_ms']:>8.1f}ms")
        # compactions on the writer thread while the main thread plays a busy loop (the
        # first merges the whole chain above; the next ones a base and one delta)
        ck.start()
        say("")
        out["compactions"] = []
        for trial in range(compactions):
            if ck.policy.depth == 0:  # (after a compaction: one delta first)
                ck.policy.max_deltas = 1000
                for key in rng.sample(names, keys // 100):
                    st.keyed.put(key, -trial)
                cid += 1
                ck.submit(ck.prepare(cid, st, epoch=1))
                wait_results(ck)
                ck.complete(cid)
            ck.policy.max_deltas = ck.policy.depth  # the next checkpoint must compact
            depth = ck.policy.depth
            for key in rng.sample(names, keys // 100):
                st.keyed.put(key, trial)
            cid += 1
            job = ck.prepare(cid, st, epoch=1)
            assert job.kind == COMPACT, job.kind
            t0 = time.perf_counter()
            ck.submit(job)
            gaps = busy(lambda: not ck.writer._done)
            took = time.perf_counter() - t0
            (r,) = ck.writer.results()
            assert r.ok, r.error
            ck.complete(cid)
            alone = busy(lambda t_end=time.perf_counter() + took: time.perf_counter() < t_end)
            c = {"deltas": depth + 1, "base_bytes": r.nbytes, "took_ms": took * 1000, "pause_ms": job.pause_ms,
                 "gap_max_ms": max(gaps) * 1000, "gap_p999_ms": percentile(gaps, 99.9) * 1000,
                 "alone_max_ms": max(alone) * 1000, "alone_p999_ms": percentile(alone, 99.9) * 1000}
            out["compactions"].append(c)
            say(f"compaction of a base + {c['deltas']} deltas into a {r.nbytes:,}-byte base on the writer "
                f"thread: {c['took_ms']:.0f} ms (loop pause to encode its delta {c['pause_ms']:.2f} ms). A busy "
                f"loop on the main thread meanwhile: longest gap {c['gap_max_ms']:.1f} ms, 99.9th percentile "
                f"{c['gap_p999_ms']:.2f} ms; alone: longest gap {c['alone_max_ms']:.1f} ms, 99.9th percentile "
                f"{c['alone_p999_ms']:.2f} ms")
    finally:
        ck.close()
    resolved = State.restore(store.load(cid, 1))
    out["restored_exact"] = dict(resolved.keyed.items()) == dict(st.keyed.items())
    say("the compacted base restores to exactly the live state" if out["restored_exact"]
        else "ERROR: the compacted base differs from the live state")
    return out
