"""``bittern rebalance`` under exactly once (real processes, local mode): the keyed
counting bolt of tests/topologies/exactly_once_seq.py rescaled 2 -> 3 -> 2 while
numbers flow. Its keyed state moves with its key groups (docs/EXACTLY_ONCE.md,
"Rescaling"), so the committed output holds every number once and each key's running
counts are exactly 1..|{n : n % K == k}|, as computed directly. Task ids move with the
parallelism (count, sink, spout are numbered in that order), so the spout's offset and
the sinks' pending output must be found by component and index too."""
from __future__ import annotations

import glob
import os
import time

import pytest

from conftest import TOPOLOGIES, wait_for
from eokit import Gates, check_exactly_once, committed_rows

SEQ = os.path.join(TOPOLOGIES, "exactly_once_seq.py")
N = 4000
K = 7
RATE = 300


def component_tasks(bittern, name):
    doc = bittern.json("metrics", name, "--json")
    return {c: v["tasks"] for c, v in doc["components"].items()}, doc


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_rebalance_keyed_counts_2_3_2_exactly_once(bittern, tmp_path, backend):
    out = str(tmp_path / "out")
    # each rebalance starts with numbers left to come: the spout holds back those past the
    # gate (not a race with the rate, which a loaded machine loses), raised after each one
    gate = Gates(tmp_path / "gate", N, 3)
    bittern("submit", SEQ, "--name", "rbeo", "--config", f"test.out={out}", "--config", f"test.count={N}",
            "--config", f"test.rate={RATE}", "--config", f"test.keys={K}", "--config", gate.config,
            "--config", f"bittern.state.backend={backend}", check=True)
    try:
        wait_for(lambda: len(committed_rows(out)) > 500, timeout=40, interval=0.25, what="committed output")
        for par, ntasks in ((3, 6), (2, 5)):
            r = bittern("rebalance", "rbeo", "--parallelism", f"count={par}", timeout=240, check=True)
            assert f"rebalanced: {ntasks} tasks" in r.stdout, r.stdout
            tasks, doc = component_tasks(bittern, "rbeo")
            assert tasks == {"spout": 1, "count": par, "sink": 2} and doc["active"], tasks
            before = len(committed_rows(out))
            gate.more()
            wait_for(lambda: len(committed_rows(out)) > before + 300, timeout=40, interval=0.25,
                     what=f"committed output at count par {par}")
            # the checkpoints taken since record the new layout
            ckpts = doc.get("checkpoints") or {}
            assert ckpts.get("last_complete") is not None, ckpts
        wait_for(lambda: len(committed_rows(out)) >= N, timeout=120, interval=0.25, what=f"{N} committed rows")
        time.sleep(1.5)  # anything committed late (a duplicate) shows up too
        check_exactly_once(committed_rows(out), N, K)
        assert not glob.glob(os.path.join(out, "sink", ".pending-*")), "sink output left pending"
    finally:
        bittern("kill", "rbeo", check=True)


def test_a_spout_that_keeps_offsets_is_not_rescaled_and_the_old_plan_goes_on_exactly_once(bittern, tmp_path):
    """The spout's plain state is its offset, which means nothing under another
    parallelism: the new plan's spout tasks refuse to restore (RescaleError), the
    rebalance puts the old plan back, and it resumes from the last checkpoint."""
    out = str(tmp_path / "out")
    n = 2500
    bittern("submit", SEQ, "--name", "rbsp", "--config", f"test.out={out}", "--config", f"test.count={n}",
            "--config", f"test.rate={RATE}", "--config", f"test.keys={K}", check=True)
    try:
        wait_for(lambda: len(committed_rows(out)) > 300, timeout=40, interval=0.25, what="committed output")
        r = bittern("rebalance", "rbsp", "--parallelism", "spout=2", timeout=240)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "RescaleError" in r.stderr and "define rescale_state" in r.stderr, r.stderr
        tasks, doc = component_tasks(bittern, "rbsp")
        assert tasks == {"spout": 1, "count": 2, "sink": 2} and doc["active"], tasks
        wait_for(lambda: len(committed_rows(out)) >= n, timeout=120, interval=0.25, what=f"{n} committed rows")
        time.sleep(1.5)
        check_exactly_once(committed_rows(out), n, K)
    finally:
        bittern("kill", "rbsp", check=True)
