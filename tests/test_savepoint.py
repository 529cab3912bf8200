"""Savepoints: `bittern kill NAME --savepoint D` saves a running exactly-once topology's
state; `bittern submit FILE --from-savepoint D` starts a changed topology from it (a
component added, a parallelism changed) with exact results; a bad savepoint is refused
in one line with nothing started."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import TOPOLOGIES, wait_for
from eokit import check_exactly_once, committed_rows, set_gate

V1 = os.path.join(TOPOLOGIES, "savepoint_v1.py")
V2 = os.path.join(TOPOLOGIES, "savepoint_v2.py")
N, K = 12000, 7


def conf(out, n=N, rate=2000, gate=None):
    return ["--config", f"test.out={out}", "--config", f"test.count={n}", "--config", f"test.rate={rate}",
            "--config", f"test.keys={K}"] + (["--config", f"test.gate={gate}"] if gate else [])


def make_savepoint(bittern, out, sp, at_least=3000):
    """V1 killed with a savepoint once ``at_least`` rows are committed; the second half of
    the numbers is held back (exactly_once_seq.py's gate) for what runs from the savepoint."""
    gate = out + ".gate"
    set_gate(gate, N // 2)
    bittern("submit", V1, "--name", "up", *conf(out, gate=gate), check=True)
    wait_for(lambda: len(committed_rows(out)) >= at_least, timeout=60, interval=0.2,
             what=f"{at_least} committed rows")
    r = bittern("kill", "up", "--savepoint", sp, check=True)
    assert f"savepoint of up: {sp}" in r.stdout
    assert not bittern.processes("up")
    return r


@pytest.mark.slow
def test_upgrade_from_a_savepoint_adds_a_component_and_rescales_with_exact_counts(bittern, tmp_path):
    out, sp = str(tmp_path / "out"), str(tmp_path / "sp")
    make_savepoint(bittern, out, sp)
    doc = json.load(open(os.path.join(sp, "savepoint.json")))
    assert doc["components"]["count"]["stateful"] and doc["components"]["count"]["par"] == 2
    before = len(committed_rows(out))
    assert before < N
    bittern("submit", V2, "--name", "up", "--from-savepoint", sp, *conf(out), check=True)
    try:
        wait_for(lambda: len(committed_rows(out)) >= N, timeout=90, interval=0.25, what=f"{N} committed rows")
        # the running counts go on from the savepoint: every number once, each key 1..k
        check_exactly_once(committed_rows(out), N, K)
        log = "".join(open(os.path.join(bittern.home, "logs", "up", f)).read()
                      for f in os.listdir(os.path.join(bittern.home, "logs", "up")) if f.startswith("count-"))
        assert f"restored checkpoint {doc['checkpoint']} (2 -> 3 tasks" in log
    finally:
        bittern("kill", "up")


def refused(bittern, path, sp, *extra):
    r = bittern("submit", path, "--name", "up", "--from-savepoint", sp, *extra, timeout=60)
    errors = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode != 0
    assert len(errors) == 1 and errors[0].startswith("error: savepoint "), r.stderr
    assert not bittern.processes("up")
    assert "up" not in bittern("list").stdout
    return errors[0]


def test_bad_savepoints_are_refused_in_one_line_and_nothing_starts(bittern, tmp_path):
    out, sp = str(tmp_path / "out"), str(tmp_path / "sp")
    make_savepoint(bittern, out, sp, at_least=500)

    def copy(name):
        d = str(tmp_path / name)
        shutil.copytree(sp, d)
        return d

    # another topology
    line = refused(bittern, V2, sp, "--name", "other")
    assert "is of topology 'up', not 'other'" in line
    # a corrupt state file (one byte flipped) and a truncated one
    bad = copy("corrupt")
    path = os.path.join(bad, "task-2.bin")
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(bytes(data))
    assert "task-2.bin is corrupt" in refused(bittern, V2, bad)
    bad = copy("truncated")
    path = os.path.join(bad, "task-1.bin")
    with open(path, "rb") as f:
        head = f.read(10)  # (read before the file is opened for writing, which empties it)
    with open(path, "wb") as f:
        f.write(head)
    assert os.path.getsize(path) == 10
    assert "task-1.bin is corrupt or truncated" in refused(bittern, V2, bad)
    # a format version this Bittern does not read
    bad = copy("version")
    m = os.path.join(bad, "savepoint.json")
    doc = json.load(open(m))
    doc["version"] = 99
    json.dump(doc, open(m, "w"))
    assert "format version 99 is not supported" in refused(bittern, V2, bad)
    # another number of key groups
    line = refused(bittern, V2, sp, "--config", "bittern.state.key.groups=64")
    assert "128 key groups" in line and "has 64" in line
    # not a savepoint at all
    assert "no savepoint.json" in refused(bittern, V2, str(tmp_path))
    # a stateful component that the new topology does not have
    assert "component 'count' holds state but is not in topology 'up'" in refused(
        bittern, os.path.join(TOPOLOGIES, "savepoint_v3.py"), sp)
    # ... unless the user says so
    r = bittern("submit", os.path.join(TOPOLOGIES, "savepoint_v3.py"), "--name", "up", "--from-savepoint", sp,
                "--allow-non-restored-state", *conf(out, rate=100), timeout=60)
    assert r.returncode == 0, r.stderr
    bittern("kill", "up", check=True)
