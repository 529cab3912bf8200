"""From a cluster assignment to a supervisor's run plan (supervisor/assignment.py)."""
from __future__ import annotations

import os

import pytest

from bittern import archive, curve
from bittern.loader import load_topology
from bittern.packing import round_robin
from bittern.runplan import RunPlan
from supervisor.assignment import (AssignmentError, build_plan, code_of, entry_path, own_containers,
                                   version_of)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORD_COUNT = os.path.join(ROOT, "topologies", "word_count.py")


@pytest.fixture
def extracted(tmp_path):
    arch = archive.build(WORD_COUNT)
    code = archive.extract(arch.data, str(tmp_path / "code" / arch.digest), digest=arch.digest)
    return code, arch


SUP2 = dict(zip(("public", "secret"), curve.generate()))  # supervisor h2-6700's keypair
PAIRS = {c: dict(zip(("public", "secret"), curve.generate())) for c in (0, 1)}
SEALED_TO = {0: dict(zip(("public", "secret"), curve.generate()))["public"], 1: SUP2["public"]}


def assignment(packing):
    return {"version": 4, "packing": packing.to_dict(),
            "containers": {"0": {"supervisor": "h1-6700", "host": "h1", "slot": 0},
                           "1": {"supervisor": "h2-6700", "host": "h2", "slot": 1}},
            "tmaster": "tcp://h1:6701",
            "stmgrs": {"0": {"tcp": "tcp://h1:6700"}, "1": {"tcp": "tcp://h2:6702"}},
            "keys": {str(c): {"public": PAIRS[c]["public"], "sealed": curve.seal(PAIRS[c]["secret"], SEALED_TO[c])}
                     for c in (0, 1)}}


def record(tdef):
    return {"definition": tdef.to_dict(), "config": {"topology.stmgrs": 2}, "state": "RUNNING",
            "code": {"digest": "d" * 64, "entry": "topologies/word_count.py"}}


def test_own_containers_and_version():
    asg = {"containers": {"0": {"supervisor": "a"}, "2": {"supervisor": "b"}, "1": {"supervisor": "a"}}}
    assert own_containers(asg, "a") == [0, 1] and own_containers(asg, "b") == [2]
    assert own_containers(asg, "c") == [] and own_containers(None, "a") == []
    assert version_of({"version": 3}) == 3 and version_of({}) == 0


def test_plan_of_the_second_host(extracted, tmp_path):
    code, arch = extracted
    tdef = load_topology(WORD_COUNT)
    packing = round_robin({c.name: c.par for c in tdef.components.values()}, 2)
    entry = entry_path(code, arch.entry)
    plan, own = build_plan("wc", record(tdef), assignment(packing), "h2-6700", "/data", entry, "/tmp/x",
                           "zk://h:2181/bittern", own_secret=SUP2["secret"])
    assert own == [1]
    assert plan.tmaster == "tcp://h1:6701" and plan.home == "/data"
    assert plan.stmgrs == {0: {"tcp": "tcp://h1:6700"},
                           1: {"tcp": "tcp://h2:6702", "ipc": "ipc:///tmp/x/c1", "ctl": "ipc:///tmp/x/k1"}}
    # every public key; the secret only of its own container, opened with its own key
    assert plan.keys == {0: {"public": PAIRS[0]["public"], "secret": None}, 1: PAIRS[1]}
    assert plan.hosts == {0: "h1", 1: "h2"} and plan.state_url == "zk://h:2181/bittern"
    assert plan.topology.source["file"] == entry and entry.startswith(code)
    assert plan.topology.source["sys_path"][0] == os.path.join(code, "topologies")
    # survives the round trip through plan.json, and a plan without the new fields loads too
    path = str(tmp_path / "plan.json")
    plan.save(path)
    assert RunPlan.load(path) == plan
    d = plan.to_dict()
    for k in ("state_url", "keys", "hosts"):
        d.pop(k)
    old = RunPlan.from_dict(d)
    assert old.state_url is None and old.keys is None and old.hosts is None
    assert "state_url" not in old.to_dict()


def test_bad_inputs_are_refused(extracted):
    code, arch = extracted
    tdef = load_topology(WORD_COUNT)
    packing = round_robin({c.name: c.par for c in tdef.components.values()}, 2)
    entry = entry_path(code, arch.entry)
    for bad in ("../x.py", "/etc/passwd", "topologies/../../x.py", "", "topologies/missing.py"):
        with pytest.raises(AssignmentError):
            entry_path(code, bad)
    with pytest.raises(AssignmentError, match="no container"):
        build_plan("wc", record(tdef), assignment(packing), "h3-6700", "/d", entry, "/tmp/x", None)
    asg = assignment(packing)
    del asg["stmgrs"]["0"]
    with pytest.raises(AssignmentError, match="container 0"):
        build_plan("wc", record(tdef), asg, "h2-6700", "/d", entry, "/tmp/x", None)
    with pytest.raises(AssignmentError, match="malformed"):
        build_plan("wc", {"config": {}}, assignment(packing), "h2-6700", "/d", entry, "/tmp/x", None)
    # container 1's secret is sealed to h2-6700's key: another key cannot open it, an altered
    # one does not open, a plaintext "secret" is not taken, a swapped public key is caught
    other = curve.generate()[1]
    with pytest.raises(AssignmentError, match="container 1: a sealed key cannot be opened"):
        build_plan("wc", record(tdef), assignment(packing), "h2-6700", "/d", entry, "/tmp/x", None, own_secret=other)
    asg = assignment(packing)
    asg["keys"]["1"]["sealed"] = asg["keys"]["1"]["sealed"][:-8] + "AAAAAAA="
    with pytest.raises(AssignmentError, match="container 1"):
        build_plan("wc", record(tdef), asg, "h2-6700", "/d", entry, "/tmp/x", None, own_secret=SUP2["secret"])
    asg = assignment(packing)
    asg["keys"]["1"] = {"public": PAIRS[1]["public"], "secret": PAIRS[1]["secret"]}
    with pytest.raises(AssignmentError, match="no sealed key for container 1"):
        build_plan("wc", record(tdef), asg, "h2-6700", "/d", entry, "/tmp/x", None, own_secret=SUP2["secret"])
    asg = assignment(packing)
    asg["keys"]["1"]["public"] = PAIRS[0]["public"]
    with pytest.raises(AssignmentError, match="does not match its public key"):
        build_plan("wc", record(tdef), asg, "h2-6700", "/d", entry, "/tmp/x", None, own_secret=SUP2["secret"])
    with pytest.raises(AssignmentError, match="code"):
        code_of({"definition": {}})
    assert code_of(record(tdef)) == ("d" * 64, "topologies/word_count.py")
