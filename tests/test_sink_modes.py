"""SinkBolt in every delivery mode: at least once it writes, commits, then acks, so a
sink killed with kill -9 loses nothing (replays may duplicate); at most once it writes
what it gets. (Exactly once: tests/test_exactly_once.py, tests/test_bounded_eo.py.)"""
from __future__ import annotations

import glob
import json
import os
import signal
import time

import pytest

from conftest import TOPOLOGIES, wait_for

SINKS = os.path.join(TOPOLOGIES, "sink_modes.py")


def committed(out):
    rows = []
    for path in glob.glob(os.path.join(out, "sink", "seq-*-*.jsonl")):
        with open(path) as f:
            rows += [json.loads(line)[0] for line in f if line.strip()]
    return rows


def staged_leftovers(out):
    return [p for p in glob.glob(os.path.join(out, "sink", "*")) if not os.path.basename(p).startswith("seq-")]


def test_at_most_once_sink_writes_everything_it_gets(bittern, tmp_path):
    out = str(tmp_path / "out")
    r = bittern("run", SINKS, "--until-done", "--duration", "60", "--config", f"test.out={out}",
                "--config", "test.count=5000", "--config", "topology.reliability.mode=ATMOST_ONCE", timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(committed(out)) == list(range(5000))


@pytest.mark.slow
def test_at_least_once_sink_killed_with_kill_9_loses_nothing(bittern, tmp_path):
    out = str(tmp_path / "out")
    n = 6000
    p = bittern.popen("run", SINKS, "--until-done", "--duration", "150", "--config", f"test.out={out}",
                      "--config", f"test.count={n}", "--config", "test.rate=600")
    try:
        wait_for(lambda: len(committed(out)) >= 1500, timeout=60, interval=0.2, what="1500 committed rows")
        victim = sorted(glob.glob(os.path.join(out, "pids", "out-*")))[0]
        with open(victim) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        stdout, stderr = p.communicate(timeout=200)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, stderr
    rows = committed(out)
    missing = set(range(n)) - set(rows)
    assert not missing, f"{len(missing)} numbers lost, e.g. {sorted(missing)[:10]}"
    assert len(rows) >= n  # duplicates allowed (replays of what was written but not acked)
