"""Savepoints in cluster mode (a real ZooKeeper, nimbus and supervisors, driven through
``bittern --cluster URL``): `bittern savepoint` of a running exactly-once topology,
`kill --savepoint`, then `submit --from-savepoint` of a changed topology (a component
added, a parallelism changed) with exact results; bad savepoints are refused by nimbus
in one line with nothing recorded or started. The savepoints and the checkpoints live
in a directory every "host" shares (bittern.checkpoint.dir), as the design asks."""
from __future__ import annotations

import glob
import json
import os
import shutil

import pytest

from bittern import savepoint as sp
from clusterkit import all_pids, zk_view
from conftest import TOPOLOGIES, wait_for
from eokit import check_exactly_once, committed_rows, set_gate

V1 = os.path.join(TOPOLOGIES, "savepoint_v1.py")
V2 = os.path.join(TOPOLOGIES, "savepoint_v2.py")
V3 = os.path.join(TOPOLOGIES, "savepoint_v3.py")
N, K = 12000, 7

pytestmark = pytest.mark.slow


def conf(out, ckpt, n=N, rate=2000, gate=None):
    args = ["--config", f"test.out={out}", "--config", f"test.count={n}", "--config", f"test.rate={rate}",
            "--config", f"test.keys={K}"] + (["--config", f"test.gate={gate}"] if gate else [])
    return args + (["--config", f"bittern.checkpoint.dir={ckpt}"] if ckpt else [])


def kill_with_savepoint(cluster, name, path):
    r = cluster.cli("kill", name, "--savepoint", path, check=True)
    assert f"{name} deactivated" in r.stdout
    assert f"savepoint of {name}: {path}" in r.stdout
    assert f"topology {name} killed" in r.stdout
    wait_for(lambda: not all_pids(cluster), timeout=30, what="every process of the topology gone after kill")
    return sp.read(path)  # a whole savepoint: every file there with its size and checksum


def test_savepoint_kill_and_upgrade_across_two_supervisors_with_exact_counts(cluster, tmp_path):
    cluster.start_nimbus()
    cluster.start_supervisor("a")
    cluster.start_supervisor("b")
    out, ckpt, gate = str(tmp_path / "out"), str(tmp_path / "shared-ckpt"), str(tmp_path / "gate")
    set_gate(gate, N // 2)  # the second half waits for the upgrade, however slow the machine is
    cluster.cli("submit", V1, "--name", "up", *conf(out, ckpt, rate=400, gate=gate), check=True)
    asg = cluster.assignment("up")
    assert {w["supervisor"] for w in asg["containers"].values()} == {"a", "b"}, asg["containers"]
    wait_for(lambda: len(committed_rows(out)) >= 1000, timeout=90, interval=0.2, what="1000 committed rows")

    # a savepoint of the running topology: it keeps running
    sp1 = str(tmp_path / "sp1")
    r = cluster.cli("savepoint", "up", "--dir", sp1, check=True)
    assert f"savepoint of up: {sp1}" in r.stdout and "2 stateful components" in r.stdout, r.stdout
    doc1 = sp.read(sp1)
    assert doc1["topology"] == "up" and doc1["key_groups"] == 128
    assert doc1["components"]["count"] == {"kind": "bolt", "class": doc1["components"]["count"]["class"],
                                           "par": 2, "stateful": True}
    assert doc1["components"]["spout"]["stateful"] and not doc1["components"]["sink"]["stateful"]
    assert sorted(doc1["files"]) == sorted(doc1["layout"]["tasks"]) and len(doc1["files"]) == 5
    # without --dir: beside the checkpoints, on the shared storage
    r = cluster.cli("savepoint", "up", check=True)
    default = r.stdout.strip().splitlines()[-1].split(": ", 1)[1]
    assert default.startswith(os.path.join(ckpt, "_savepoints", "up-")), r.stdout
    assert sp.read(default)["checkpoint"] > doc1["checkpoint"]
    rows = json.loads(cluster.cli("list", "--json", check=True).stdout)
    assert [(x["name"], x["state"]) for x in rows] == [("up", "RUNNING")]
    n1 = len(committed_rows(out))
    wait_for(lambda: len(committed_rows(out)) > n1 + 300, timeout=60, interval=0.2,
             what="rows committed after the savepoint")

    # kill --savepoint: deactivate, save, stop everything on both hosts
    sp2 = str(tmp_path / "sp2")
    doc2 = kill_with_savepoint(cluster, "up", sp2)
    assert doc2["checkpoint"] > doc1["checkpoint"]
    assert zk_view(cluster, "up") == {"record": None, "assignment": None, "checkpoints": [], "code": []}
    before = len(committed_rows(out))
    assert 0 < before < N

    # the changed topology (count 2 -> 3 tasks, a new stateful component) from it
    r = cluster.cli("submit", V2, "--name", "up", "--from-savepoint", sp2, *conf(out, ckpt, rate=4000), check=True)
    assert f"starting from savepoint {sp2} (checkpoint {doc2['checkpoint']} of 'up')" in r.stderr, r.stderr
    view = zk_view(cluster, "up")
    assert view["record"]["restored_from"] == {"savepoint": sp2, "checkpoint": doc2["checkpoint"],
                                               "topology": "up"}
    assert "restoring" not in view["record"]
    wait_for(lambda: len(committed_rows(out)) >= N, timeout=120, interval=0.25, what=f"{N} committed rows")
    # the running counts go on from the savepoint: every number once, each key 1..k
    check_exactly_once(committed_rows(out), N, K)
    logs = "".join(open(p).read() for p in glob.glob(os.path.join(cluster.dir, "sup-*", "logs", "up", "count-*.log")))
    assert f"restored checkpoint {doc2['checkpoint']} (2 -> 3 tasks" in logs
    status, metrics = cluster.api("/api/v1/topologies/up/metrics?window=all")
    assert status == 200 and metrics["components"]["audit"]["executed"] > 0
    cluster.cli("kill", "up", check=True)
    wait_for(lambda: not all_pids(cluster), timeout=30, what="every process gone after the last kill")
    assert zk_view(cluster, "up")["record"] is None


def test_bad_savepoints_are_refused_by_nimbus_in_one_line_and_nothing_starts(cluster, tmp_path):
    cluster.start_nimbus()
    cluster.start_supervisor("a")
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "shared-ckpt")
    cluster.cli("submit", V1, "--name", "up", *conf(out, ckpt, rate=600), check=True)
    wait_for(lambda: len(committed_rows(out)) >= 300, timeout=90, interval=0.2, what="300 committed rows")
    good = str(tmp_path / "sp")
    kill_with_savepoint(cluster, "up", good)

    def copy(name):
        d = str(tmp_path / name)
        shutil.copytree(good, d)
        return d

    def refused(path, savepoint, *extra, name="up", ckpt_dir=ckpt):
        r = cluster.cli("submit", path, "--name", name, "--from-savepoint", savepoint,
                        *conf(out, ckpt_dir), *extra, timeout=60)
        errors = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode != 0
        assert len(errors) == 1 and errors[0].startswith("error: savepoint "), r.stderr
        assert json.loads(cluster.cli("list", "--json", check=True).stdout) == []
        assert zk_view(cluster, name) == {"record": None, "assignment": None, "checkpoints": [], "code": []}
        assert not all_pids(cluster)
        print(errors[0])
        return errors[0]

    # a corrupt state file (one byte flipped) and a truncated one
    bad = copy("corrupt")
    manifest = sp.read(good)
    task = sorted(manifest["files"])[0]
    whose = f"component {manifest['layout']['tasks'][task][0]!r}, task {task}"
    path = os.path.join(bad, f"task-{task}.bin")
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(bytes(data))
    line = refused(V2, bad)
    assert f"task-{task}.bin is corrupt" in line and whose in line
    bad = copy("truncated")
    path = os.path.join(bad, f"task-{task}.bin")
    head = open(path, "rb").read()[:10]
    open(path, "wb").write(head)
    line = refused(V2, bad)
    assert f"task-{task}.bin is corrupt or truncated (10 bytes" in line and whose in line
    # a format version this Bittern does not read
    bad = copy("version")
    m = os.path.join(bad, "savepoint.json")
    doc = json.load(open(m))
    doc["version"] = 99
    json.dump(doc, open(m, "w"))
    assert "format version 99 is not supported" in refused(V2, bad)
    # another topology, another number of key groups, a stateful component gone
    assert "is of topology 'up', not 'other'" in refused(V2, good, name="other")
    line = refused(V2, good, "--config", "bittern.state.key.groups=64")
    assert "128 key groups" in line and "has 64" in line
    assert "component 'count' holds state but is not in topology 'up'" in refused(V3, good)
    # cluster mode: no shared checkpoint directory to restore through
    assert "sets no bittern.checkpoint.dir" in refused(V2, good, ckpt_dir=None)
    # a savepoint of a topology that does not run: one line, nothing written
    r = cluster.cli("savepoint", "up", "--dir", str(tmp_path / "never"))
    assert r.returncode != 0 and r.stderr.strip() == f"error: no topology named 'up' (nimbus at {cluster.urls()})"
    assert not os.path.exists(tmp_path / "never")
    # ... and the good savepoint, with the flag that drops the state of the gone component
    r = cluster.cli("submit", V3, "--name", "up", "--from-savepoint", good, "--allow-non-restored-state",
                    *conf(out, ckpt, rate=100), timeout=60)
    assert r.returncode == 0, r.stderr
    assert [x["name"] for x in json.loads(cluster.cli("list", "--json", check=True).stdout)] == ["up"]
    cluster.cli("kill", "up", check=True)
    wait_for(lambda: not all_pids(cluster), timeout=30, what="every process gone after the last kill")
