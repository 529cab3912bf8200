"""At-least-once with real processes: every tuple is delivered and acked exactly once
by the spout, whatever is killed while it runs."""
from __future__ import annotations

import json
import os
import signal

from conftest import TOPOLOGIES, wait_for

SEQ = os.path.join(TOPOLOGIES, "reliable_seq.py")


def sink_numbers(out):
    seen = []
    for f in os.listdir(out):
        if f.startswith("sink-"):
            seen += [int(x) for x in open(os.path.join(out, f)).read().split()]
    return seen


def acked_ids(out):
    return [int(x) for x in open(os.path.join(out, "acks.txt")).read().split()]


def check_complete(out, n):
    done = json.load(open(os.path.join(out, "done")))
    assert done["acked"] == n and done["pending"] == 0, done
    acks = acked_ids(out)
    assert sorted(acks) == list(range(n)), "every tup_id acked exactly once"
    seen = sink_numbers(out)
    missing = set(range(n)) - set(seen)
    assert not missing, f"{len(missing)} numbers never reached the sink, e.g. {sorted(missing)[:10]}"
    return done, len(seen) - n  # duplicates (allowed by at-least-once)


def kill_all(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_no_loss_when_bolt_stmgr_and_container_are_killed(bittern, tmp_path):
    out = str(tmp_path / "out")
    n = 20000
    bittern("submit", SEQ, "--name", "seq", "--config", f"test.out={out}", "--config", f"test.count={n}",
            "--config", "test.rate=1500", check=True)
    try:
        procs = bittern.processes("seq")
        # task ids: keyed 1-2, relay 3-4, sink 5-6, spout 7; round-robin: container 0 = 1,3,5,7
        assert procs["instance-7"]["container"] == 0
        wait_for(lambda: os.path.exists(os.path.join(out, "acks.txt")) and len(acked_ids(out)) > 2000,
                 what="acks flowing")
        # 1. a bolt instance
        kill_all([procs["instance-3"]["pid"]])
        wait_for(lambda: len(acked_ids(out)) > 5000, timeout=30, what="progress after killing a bolt")
        # 2. the stream manager of the spout's container
        kill_all([bittern.processes("seq")["stmgr-0"]["pid"]])
        wait_for(lambda: len(acked_ids(out)) > 9000, timeout=30, what="progress after killing stmgr-0")
        # 3. every process of container 1 at once
        procs = bittern.processes("seq")
        kill_all([p["pid"] for p in procs.values() if p["container"] == 1])
        wait_for(lambda: os.path.exists(os.path.join(out, "done")), timeout=90, what="all tuples acked")
        done, dups = check_complete(out, n)
        restarts = {k: v["restarts"] for k, v in bittern.processes("seq").items() if v["restarts"]}
        assert restarts["instance-3"] >= 1 and restarts["stmgr-0"] >= 1 and restarts["stmgr-1"] >= 1
        assert done["failures"] > 0, "kills must have caused failures or timeouts that were replayed"
        print(f"replays: {done['failures']}, duplicates at the sink: {dups}, restarts: {restarts}")
    finally:
        bittern("kill", "seq", check=True)


def test_half_acking_bolt_still_delivers_everything(bittern, tmp_path):
    out = str(tmp_path / "out")
    n = 3000
    bittern("submit", SEQ, "--name", "half", "--config", f"test.out={out}", "--config", f"test.count={n}",
            "--config", "test.fail.every=2", check=True)
    try:
        wait_for(lambda: os.path.exists(os.path.join(out, "done")), timeout=60, what="all tuples acked")
        done, dups = check_complete(out, n)
        assert done["failures"] >= n // 2, done  # half of the first deliveries alone fail
    finally:
        bittern("kill", "half", check=True)


def test_bolt_that_raises_fails_the_tuple_and_the_spout_replays(bittern, tmp_path):
    """Exceptions in process() fail the tuple (auto_fail) and the bolt keeps running;
    with bittern.bolt.crash.on.exception the process exits and is restarted."""
    out = str(tmp_path / "out")
    n = 2000
    for crash in ("false", "true"):
        sub = os.path.join(out, crash)
        bittern("submit", SEQ, "--name", f"raise-{crash}", "--config", f"test.out={sub}",
                "--config", f"test.count={n}", "--config", "test.raise.every=400",
                "--config", f"bittern.bolt.crash.on.exception={crash}", check=True)
        try:
            wait_for(lambda: os.path.exists(os.path.join(sub, "done")), timeout=60, what="all tuples acked")
            done, _ = check_complete(sub, n)
            assert done["failures"] > 0
            restarts = sum(p["restarts"] for k, p in bittern.processes(f"raise-{crash}").items()
                           if k in ("instance-1", "instance-2"))
            assert len([f for f in os.listdir(sub) if f.startswith("raised-")]) == n // 400
            if crash == "true":
                assert restarts == n // 400
            else:
                assert restarts == 0
        finally:
            bittern("kill", f"raise-{crash}", check=True)
