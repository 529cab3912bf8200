"""Nimbus's placement of containers on supervisors' slots (nimbus/scheduler.py)."""
from __future__ import annotations

import pytest

from bittern.packing import round_robin
from nimbus.scheduler import (NoSlots, assignment, endpoints, free_slots, kept_placement, place,
                              slot_ports, stranded, used_slots)

SUPS = {"a": {"host": "10.0.0.1", "slots": 2, "base_port": 6700},
        "b": {"host": "10.0.0.2", "slots": 3, "base_port": 7700}}


def test_slot_ports_do_not_overlap():
    ports = [p for s in range(4) for p in slot_ports(6700, s)]
    assert ports == list(range(6700, 6708))


def test_place_spreads_over_supervisors_and_uses_each_slot_once():
    pl = place([0, 1, 2, 3], SUPS, set())
    assert sorted(pl) == [0, 1, 2, 3]
    assert len({(w["supervisor"], w["slot"]) for w in pl.values()}) == 4
    assert {w["supervisor"] for w in pl.values()} == {"a", "b"}
    assert all(w["host"] == SUPS[w["supervisor"]]["host"] for w in pl.values())


def test_place_respects_slots_used_by_other_topologies():
    used = {("a", 0), ("a", 1), ("b", 0)}
    pl = place([0, 1], SUPS, used)
    assert {(w["supervisor"], w["slot"]) for w in pl.values()} == {("b", 1), ("b", 2)}


def test_too_few_slots_is_refused_with_the_numbers():
    with pytest.raises(NoSlots, match=r"3 container\(s\) need a slot and 2 are free"):
        place([0, 1, 2], SUPS, {("b", 0), ("b", 1), ("b", 2)})
    with pytest.raises(NoSlots, match="live supervisors: none"):
        place([0], {}, set())


def test_replacing_the_containers_of_a_dead_supervisor_keeps_the_others():
    packing = round_robin({"x": 4}, 4)
    pl = place(packing.containers, SUPS, set())
    asg = assignment(packing, pl, SUPS, 1)
    live = {"b": SUPS["b"], "c": {"host": "10.0.0.3", "slots": 4, "base_port": 6700}}
    dead = stranded(asg, live)
    assert dead == sorted(c for c, w in pl.items() if w["supervisor"] == "a") and dead
    keep = kept_placement(asg, live)
    new = place(packing.containers, live, used_slots({"t": asg}, skip="t"), keep)
    for c, w in keep.items():
        assert new[c] == w, "containers on live supervisors stay where they are"
    assert all(new[c]["supervisor"] in live for c in new)
    assert len({(w["supervisor"], w["slot"]) for w in new.values()}) == 4


def test_assignment_endpoints_follow_from_host_and_slot():
    packing = round_robin({"x": 2}, 2)
    pl = {0: {"supervisor": "b", "host": "10.0.0.2", "slot": 2},
          1: {"supervisor": "a", "host": "10.0.0.1", "slot": 0}}
    tm, st = endpoints(pl, SUPS)
    assert tm == "tcp://10.0.0.2:7705"
    assert st == {0: {"tcp": "tcp://10.0.0.2:7704"}, 1: {"tcp": "tcp://10.0.0.1:6700"}}
    asg = assignment(packing, pl, SUPS, 3, keys={0: {"public": "p0"}, 1: {"public": "p1"}})
    assert asg["version"] == 3 and asg["tmaster"] == tm
    assert asg["containers"]["1"] == {"supervisor": "a", "host": "10.0.0.1", "slot": 0, "base_port": 6700,
                                       "since": 3}
    assert asg["keys"]["0"] == {"public": "p0"}
    assert used_slots({"t": asg}) == {("b", 2), ("a", 0)}
    assert free_slots(SUPS, used_slots({"t": asg})) == {"a": [1], "b": [0, 1]}


def test_log_files_map_to_their_containers():
    from nimbus.api import _container_of, _file_names
    packing = round_robin({"a": 2, "b": 2}, 2)  # tasks 1..4, containers 0: 1,3; 1: 2,4
    asg = {"packing": packing.to_dict(),
           "containers": {"0": {"supervisor": "x"}, "1": {"supervisor": "y"}}}
    assert _container_of("tmaster.log", asg, "x") == 0
    assert _container_of("stmgr-1.log", asg, "y") == 1
    assert _container_of("b-4.log", asg, "y") == 1 and _container_of("a-1.log", asg, "x") == 0
    assert _container_of("supervisor.log", asg, "y") == 1  # no container in the name: the supervisor's
    assert _file_names(["a.log", {"file": "b.log"}]) == ["a.log", "b.log"]
    assert _file_names({"files": ["c.log"]}) == ["c.log"]


def test_container_keys_are_sealed_to_their_supervisor_and_renewed_when_moved():
    from bittern import curve
    from nimbus.scheduler import container_keys
    sup = {s: dict(zip(("public", "secret"), curve.generate())) for s in ("a", "b")}
    regs = {s: {"public_key": k["public"]} for s, k in sup.items()}
    placement = {0: {"supervisor": "a"}, 1: {"supervisor": "b"}}
    keys = container_keys([0, 1], placement, regs)
    for c, s in ((0, "a"), (1, "b")):
        assert set(keys[c]) == {"public", "sealed", "to"} and keys[c]["to"] == s  # no secret in the clear
        secret = curve.unseal(keys[c]["sealed"], sup[s]["secret"])
        assert curve.public_of(secret) == keys[c]["public"]
        other = "b" if s == "a" else "a"
        with pytest.raises(curve.CurveError):
            curve.unseal(keys[c]["sealed"], sup[other]["secret"])
    # container 1 moves to a: a fresh keypair sealed to a; container 0 stays and keeps its own
    moved = container_keys([0, 1], {0: {"supervisor": "a"}, 1: {"supervisor": "a"}}, regs, old=keys)
    assert moved[0] == keys[0]
    assert moved[1]["public"] != keys[1]["public"] and moved[1]["to"] == "a"
    assert curve.public_of(curve.unseal(moved[1]["sealed"], sup["a"]["secret"])) == moved[1]["public"]
    with pytest.raises(ValueError, match="supervisor 'c' published no public key"):
        container_keys([0], {0: {"supervisor": "c"}}, {"c": {}})
