"""Checkpoint cost with a large keyed state: full snapshot vs incremental delta.

    .venv/bin/python scripts/ckpt_measure.py [--keys 1000000] [--rounds 5] [--dir D]

Builds a State with ``--keys`` keyed entries, then for 0.1 %, 1 % and 10 % of the
keys changed per interval takes ``--rounds`` checkpoints through the instance's own
machinery (instance/ckptwriter.py ``Checkpointing``: the change log detached, the
delta encoded, the file written by the writer, CKPT_COMMIT making it the next parent)
and prints, per row:

* full: the bytes of a full snapshot (what every checkpoint wrote before deltas);
* delta: the bytes of the delta file, and its share of the full snapshot;
* pause: what stops the instance's loop, the detach + encode (median and max);
* write: the writer thread's part (write + fsync), median;

then three compactions (the chain merged into a new base on the writer thread) with
the longest gap a busy loop on the main thread saw meanwhile (the GIL is shared), and
the same loop's longest gap alone for as long (what the machine does to any thread).

A standalone measurement (not a test, not the benchmark): scripts/bench* are owned
elsewhere.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bittern.api.state import State  # noqa: E402
from bittern.checkpoint import CheckpointStore  # noqa: E402
from instance.ckptwriter import Checkpointing  # noqa: E402
from instance.incremental import COMPACT  # noqa: E402
from instance.runtime import tune_gc  # noqa: E402


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


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def build(n, key_groups=128):
    st = State(key_groups)
    put = st.keyed.put
    for i in range(n):
        put(f"key-{i:07d}", i)
    st.keyed.detach_log()
    return st


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=None, help="checkpoint directory (default: a temp dir, removed)")
    args = ap.parse_args(argv)
    root = args.dir or tempfile.mkdtemp(prefix="ckpt-measure-")
    rng = random.Random(1)
    try:
        t0 = time.perf_counter()
        st = build(args.keys)
        tune_gc({"bittern.instance.gc.threshold": 50000})  # as an instance does after initialize
        print(f"{args.keys:,} keys in keyed state (built in {time.perf_counter() - t0:.1f} s); python "
              f"{sys.version.split()[0]}")
        t0 = time.perf_counter()
        full = len(st.snapshot())
        full_ms = (time.perf_counter() - t0) * 1000
        print(f"full snapshot: {full:,} bytes, encoded in {full_ms:.0f} ms (on the loop, before deltas)\n")
        conf = SimpleNamespace(max_deltas=1000, keep=3, incremental=True)  # (CheckpointSettings' fields)
        store = CheckpointStore(root, _NoMeta(), "measure", keep=3)
        inst = _Inst(1)
        ck = Checkpointing(inst, store, conf, st.key_groups)
        cid = 1
        # the first checkpoint after a restore to an existing checkpoint: a base on disk
        store.save(cid, 1, st.snapshot())
        ck.policy.reset(cid, 0)
        keys = [f"key-{i:07d}" for i in range(args.keys)]
        print(f"{'changed':>8} {'keys':>8} {'delta bytes':>12} {'of full':>8} {'pause med':>10} "
              f"{'pause max':>10} {'write med':>10}")
        for frac in (0.001, 0.01, 0.1):
            k = int(args.keys * frac)
            sizes, pauses, writes = [], [], []
            for _ in range(args.rounds):
                put = st.keyed.put
                for key in rng.sample(keys, k):
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
            print(f"{frac * 100:>7g}% {k:>8,} {statistics.median(sizes):>12,.0f} "
                  f"{statistics.median(sizes) / full * 100:>7.2f}% {statistics.median(pauses):>8.2f}ms "
                  f"{max(pauses):>8.2f}ms {statistics.median(writes):>8.1f}ms")
        # compactions on the writer thread while the main thread plays a busy loop (the
        # first merges the whole chain above; the next ones a base and one delta)
        ck.start()
        print()
        for trial in range(3):
            if ck.policy.depth == 0:  # (after a compaction: one delta first)
                ck.policy.max_deltas = 1000
                for key in rng.sample(keys, args.keys // 100):
                    st.keyed.put(key, -trial)
                cid += 1
                ck.submit(ck.prepare(cid, st, epoch=1))
                wait_results(ck)
                ck.complete(cid)
            ck.policy.max_deltas = ck.policy.depth  # the next checkpoint must compact
            depth = ck.policy.depth
            for key in rng.sample(keys, args.keys // 100):
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
            print(f"compaction of a base + {depth + 1} deltas into a {r.nbytes:,}-byte base on the writer "
                  f"thread: {took * 1000:.0f} ms (loop pause to encode its delta {job.pause_ms:.2f} ms). A busy "
                  f"loop on the main thread meanwhile: longest gap {max(gaps) * 1000:.1f} ms, 99.9th "
                  f"percentile {pct(gaps, 99.9) * 1000:.2f} ms; alone: longest gap {max(alone) * 1000:.1f} ms, "
                  f"99.9th percentile {pct(alone, 99.9) * 1000:.2f} ms")
        ck.close()
        resolved = State.restore(store.load(cid, 1))
        assert dict(resolved.keyed.items()) == dict(st.keyed.items()), "the compacted base differs"
        print("the compacted base restores to exactly the live state")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
