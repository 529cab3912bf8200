"""Exactly once with real processes (topology.reliability.mode = EFFECTIVELY_ONCE):
whatever is killed, the committed output holds every number once, and the keyed
counts are the ones a direct computation gives.

The checkpoint store's own crash tests (a writer killed before or at the rename
leaves no visible file, the old file stays whole) are in
tests/unit/test_checkpoint_store.py; here a spout process dies inside its
checkpoint save, in the running topology, and the topology recovers from the
previous complete checkpoint.
"""
from __future__ import annotations

import glob
import os
import random
import sys
import time

import pytest

from conftest import EXAMPLES, TOPOLOGIES, wait_for
from eokit import check_exactly_once, checkpoint_metrics, committed_rows, kill9, Gates

SEQ = os.path.join(TOPOLOGIES, "exactly_once_seq.py")
N = 20000
K = 7
RATE = 1500


def pid_of(out, component, task=None):
    names = sorted(os.listdir(os.path.join(out, "pids")))
    picks = [n for n in names if n.startswith(component + "-") and (task is None or n == f"{component}-{task}")]
    with open(os.path.join(out, "pids", picks[0])) as f:
        return int(f.read()), int(picks[0].rsplit("-", 1)[1])


def submit(bittern, name, out, n=N, rate=RATE, extra=()):
    args = ["submit", SEQ, "--name", name, "--config", f"test.out={out}", "--config", f"test.count={n}",
            "--config", f"test.rate={rate}", "--config", f"test.keys={K}"]
    for kv in extra:
        args += ["--config", kv]
    bittern(*args, check=True)


def wait_committed(out, n, timeout, what):
    t0 = time.monotonic()
    wait_for(lambda: len(committed_rows(out)) >= n, timeout=timeout, interval=0.25, what=what)
    return time.monotonic() - t0


# the seeds pick the kill times and the victims: count task 1 and stmgr-1 (seed 1),
# count task 2 and stmgr-0, the spout's container (5), count task 1 and stmgr-0 (7)
@pytest.mark.parametrize("seed,backend", [(1, "memory"), (5, "memory"), (7, "memory"), (5, "disk")])
def test_exactly_once_when_a_bolt_a_stmgr_and_the_spout_are_killed(bittern, tmp_path, seed, backend):
    rng = random.Random(seed)
    out = str(tmp_path / "out")
    name = f"eo{seed}{backend[0]}"
    t_start = time.monotonic()
    # each kill with numbers still to come: the spout holds back those past the gate (not a
    # race with the rate, which a loaded machine loses), raised after each kill
    gate = Gates(tmp_path / "gate", N, 4)
    submit(bittern, name, out, extra=[f"bittern.state.backend={backend}", gate.config])
    log = []
    try:
        def progress(at_least, timeout=40, what=""):
            wait_for(lambda: len(committed_rows(out)) >= at_least, timeout=timeout, interval=0.1,
                     what=f"{at_least} committed rows {what}")

        progress(1000, timeout=60, what="(first checkpoints complete)")
        # 1. a count bolt instance
        time.sleep(rng.uniform(0.0, 1.5))
        task = rng.choice(sorted(int(n.rsplit("-", 1)[1]) for n in os.listdir(os.path.join(out, "pids"))
                                 if n.startswith("count-")))
        pid, _ = pid_of(out, "count", task)
        kill9(pid)
        log.append((round(time.monotonic() - t_start, 1), f"count task {task}", len(committed_rows(out))))
        gate.more()
        base = len(committed_rows(out))
        progress(base + 2000, what="after killing a count bolt")
        # 2. a stream manager
        time.sleep(rng.uniform(0.0, 1.5))
        container = rng.choice([0, 1])
        kill9(bittern.processes(name)[f"stmgr-{container}"]["pid"])
        log.append((round(time.monotonic() - t_start, 1), f"stmgr-{container}", len(committed_rows(out))))
        gate.more()
        base = len(committed_rows(out))
        progress(base + 2000, what=f"after killing stmgr-{container}")
        # 3. the spout instance
        time.sleep(rng.uniform(0.0, 1.5))
        pid, task = pid_of(out, "spout")
        kill9(pid)
        log.append((round(time.monotonic() - t_start, 1), f"spout task {task}", len(committed_rows(out))))
        gate.more()
        wait_committed(out, N, timeout=120, what=f"{N} committed rows")
        time.sleep(1.5)  # anything committed late (a duplicate) shows up too
        rows = committed_rows(out)
        restarts = {k: v["restarts"] for k, v in bittern.processes(name).items() if v["restarts"]}
        ck = checkpoint_metrics(bittern, name)
        print(f"seed {seed}: kills (s, what, committed rows then) {log}; restarts {restarts}; checkpoints {ck}; "
              f"{len(rows)} rows in {len(glob.glob(os.path.join(out, 'sink', 'seq-*.jsonl')))} committed files; "
              f"{time.monotonic() - t_start:.1f}s")
        check_exactly_once(rows, N, K)
        assert restarts.get(f"stmgr-{container}", 0) >= 1, restarts
        assert sum(v for k, v in restarts.items() if k.startswith("instance-")) >= 2, restarts
        assert ck["restores"] >= 3, f"each kill must have rolled the topology back: {ck}"
    finally:
        bittern("kill", name, check=True)


def test_a_crash_inside_a_checkpoint_save_recovers_from_the_previous_checkpoint(bittern, tmp_path):
    """The spout process dies while writing its state file (at the fsync), and again
    later at the rename that would publish it: neither checkpoint can complete, the
    previous complete one is restored, and the output is still exactly once."""
    out = str(tmp_path / "out")
    n = 12000
    t_start = time.monotonic()
    submit(bittern, "eocrash", out, n=n, extra=["test.crash.saves=fsync@3,rename@8"])
    try:
        wait_committed(out, n, timeout=120, what=f"{n} committed rows")
        time.sleep(1.5)
        crashed = {p: open(os.path.join(out, f"crashed-{p}")).read().strip()
                   for p in ("fsync", "rename") if os.path.exists(os.path.join(out, f"crashed-{p}"))}
        assert set(crashed) == {"fsync", "rename"}, f"the crash hooks fired at {crashed} only"
        restarts = {k: v["restarts"] for k, v in bittern.processes("eocrash").items() if v["restarts"]}
        ck = checkpoint_metrics(bittern, "eocrash")
        print(f"crashed in checkpoint saves {crashed}; restarts {restarts}; checkpoints {ck}; "
              f"{time.monotonic() - t_start:.1f}s")
        check_exactly_once(committed_rows(out), n, K)
        assert sum(restarts.values()) >= 2, restarts
        assert ck["restores"] >= 2, ck
        # the interrupted checkpoints never completed: each crash rolled back to an earlier one
        assert ck["last_complete"] > int(crashed["rename"]), ck
    finally:
        bittern("kill", "eocrash", check=True)


def test_the_exactly_once_word_count_example(bittern, tmp_path):
    """``bittern run topologies/exactly_once_word_count.py --until-done`` commits exact counts."""
    out, inp = str(tmp_path / "wc-out"), str(tmp_path / "wc-in")
    lines = 3000
    r = bittern("run", os.path.join(EXAMPLES, "exactly_once_word_count.py"), "--until-done", "--duration", "90",
                "--json", "--config", f"wordcount.lines={lines}", "--config", f"wordcount.input.dir={inp}",
                "--config", f"wordcount.output.dir={out}", timeout=150, check=True)
    assert len(glob.glob(os.path.join(inp, "part-*.txt"))) == 4
    sys.path.insert(0, EXAMPLES)
    try:
        import exactly_once_word_count as wc
    finally:
        sys.path.remove(EXAMPLES)
    got, want = wc.committed_counts(out), wc.expected_counts(lines)
    assert got == want, (f"{sum(got.values())} words committed, {sum(want.values())} expected\n"
                         f"{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
