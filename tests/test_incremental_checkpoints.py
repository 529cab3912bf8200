"""Incremental checkpoints with real processes: the keyed count bolt of
tests/topologies/incremental_seq.py (exactly_once_seq.py with every third checkpoint a
compaction: ``bittern.checkpoint.incremental.max.deltas`` = 2, a checkpoint every 0.3 s)
is killed with SIGKILL at random points, some of them in the middle of a compaction
(each compaction is slowed down and announced by a marker file), and the committed
output must still hold every number once with exact running counts: whatever chain of
base and deltas a count task left on disk, it restores exactly.

The unit-level pieces (change log, deltas, chains, pruning, the writer thread) are in
tests/unit/test_incremental_checkpoints.py; a rebalance over incremental checkpoints
is tests/test_rebalance_eo.py (incremental checkpoints are on by default).
"""
from __future__ import annotations

import glob
import os
import random
import signal
import time

import pytest

from conftest import TOPOLOGIES, wait_for
from eokit import check_exactly_once, committed_rows

from bittern.checkpoint import read_parent

INC = os.path.join(TOPOLOGIES, "incremental_seq.py")
N = 12000
K = 7
RATE = 1200
COMPACTION_SLEEP = 0.5


def pid_of(out, component, task):
    with open(os.path.join(out, "pids", f"{component}-{task}")) as f:
        return int(f.read())


def count_tasks(out):
    return sorted(int(n.rsplit("-", 1)[1]) for n in os.listdir(os.path.join(out, "pids")) if n.startswith("count-"))


def chain_files(home, name):
    """(deltas, bases) among the state files currently in the checkpoint directory."""
    deltas = bases = 0
    for path in glob.glob(os.path.join(home, "checkpoints", name, "*", "task-*.bin")):
        try:
            if read_parent(path):
                deltas += 1
            else:
                bases += 1
        except OSError:
            pass  # pruned meanwhile
    return deltas, bases


@pytest.mark.slow
@pytest.mark.parametrize("seed,backend", [(2, "memory"), (3, "memory"), (11, "memory"), (3, "disk"), (11, "disk")])
def test_kill_9_the_keyed_bolt_at_random_points_and_during_compactions(bittern, tmp_path, seed, backend):
    rng = random.Random(seed)
    out = str(tmp_path / "out")
    name = f"inc{seed}{backend[0]}"
    t_start = time.monotonic()
    bittern("submit", INC, "--name", name, "--config", f"test.out={out}", "--config", f"test.count={N}",
            "--config", f"test.rate={RATE}", "--config", f"test.keys={K}",
            "--config", f"test.compaction.sleep={COMPACTION_SLEEP}",
            "--config", f"bittern.state.backend={backend}", check=True)
    log = []
    seen_deltas = 0
    try:
        wait_for(lambda: len(committed_rows(out)) >= 800, timeout=60, interval=0.1, what="first checkpoints")
        dbs = glob.glob(os.path.join(bittern.home, "run", name, "state-db", name, "task-*"))
        assert len(dbs) >= (2 if backend == "disk" else 0) and (dbs == []) == (backend == "memory"), dbs
        # three kills: at least one inside a compaction, the others where the seed says
        plan = ["compaction"] + [rng.choice(["compaction", "anywhere"]) for _ in range(2)]
        rng.shuffle(plan)
        for what in plan:
            seen_deltas = max(seen_deltas, chain_files(bittern.home, name)[0])
            if what == "compaction":
                marks = os.path.join(out, "compacting")
                found = wait_for(lambda: [m for m in (os.listdir(marks) if os.path.isdir(marks) else [])],
                                 timeout=30, interval=0.01, what="a compaction in progress")
                victim = rng.choice(found)
                task = int(victim.rsplit("-", 1)[1])
                time.sleep(rng.uniform(0.0, COMPACTION_SLEEP))
            else:
                time.sleep(rng.uniform(0.0, 1.0))
                task = rng.choice(count_tasks(out))
            pid = pid_of(out, "count", task)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for m in glob.glob(os.path.join(out, "compacting", "*")):  # (a killed task leaves its marker)
                os.unlink(m)
            base = len(committed_rows(out))
            log.append((round(time.monotonic() - t_start, 1), what, f"count task {task}", base))
            wait_for(lambda: len(committed_rows(out)) >= min(N, base + 1500), timeout=60, interval=0.1,
                     what=f"progress after killing count task {task} ({what})")
        wait_for(lambda: len(committed_rows(out)) >= N, timeout=120, interval=0.25, what=f"{N} committed rows")
        time.sleep(1.5)  # anything committed late (a duplicate) shows up too
        rows = committed_rows(out)
        restarts = {k: v["restarts"] for k, v in bittern.processes(name).items() if v["restarts"]}
        ck = bittern.json("metrics", name, "--json")["checkpoints"]
        seen_deltas = max(seen_deltas, chain_files(bittern.home, name)[0])
        print(f"seed {seed}: kills (s, where, what, committed rows then) {log}; restarts {restarts}; "
              f"checkpoints {ck}; delta files seen {seen_deltas}; {time.monotonic() - t_start:.1f}s")
        check_exactly_once(rows, N, K)
        assert ck["restores"] >= 3, f"each kill must have rolled the topology back: {ck}"
        assert sum(v for k, v in restarts.items() if k.startswith("instance-")) >= 3, restarts
        assert seen_deltas > 0, "no delta files: incremental checkpoints were not used"
    finally:
        bittern("kill", name, check=True)
