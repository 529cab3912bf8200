"""First-fit-decreasing packing and the pack() dispatcher."""
from __future__ import annotations

import itertools
import json
import random

import pytest

from bittern import config
from bittern.api.topology import ComponentDef, TopologyDef
from bittern.errors import ConfigError
from bittern.packing import PackingPlan, assign_tasks, first_fit_decreasing, pack, round_robin

CAP = {"ram_mb": 1000, "cpu": 4.0}
DEF = {"ram_mb": 100, "cpu": 1.0}


def check_plan(plan, parallelism, need, cap):
    """Every task placed exactly once, ids as assign_tasks numbers them, capacities kept."""
    tc, ti = assign_tasks(parallelism)
    assert plan.task_component == tc and plan.task_index == ti
    placed = list(itertools.chain.from_iterable(plan.containers.values()))
    assert sorted(placed) == sorted(tc)  # no task lost, none twice
    assert list(plan.containers) == list(range(len(plan.containers)))
    for c, tasks in plan.containers.items():
        assert tasks, f"container {c} is empty"
        assert tasks == sorted(tasks)
        for r in ("ram_mb", "cpu"):
            assert sum(need[tc[t]][r] for t in tasks) <= cap[r] + 1e-9, (c, r)


def test_largest_first_into_the_first_container_with_room():
    par = {"big": 2, "mid": 2, "small": 3}
    res = {"big": {"ram_mb": 600}, "mid": {"ram_mb": 400}, "small": {"ram_mb": 150, "cpu": 0.5}}
    p = first_fit_decreasing(par, res, container_capacity=CAP, default=DEF)
    # ids: big 1-2, mid 3-4, small 5-7; order: 1, 2 (600), 3, 4 (400), 5, 6, 7 (150)
    # c0: 1 + 3 = 1000 | c1: 2 + 4 = 1000 | c2: 5, 6, 7 = 450
    assert p.containers == {0: [1, 3], 1: [2, 4], 2: [5, 6, 7]}
    need = {"big": {"ram_mb": 600, "cpu": 1.0}, "mid": {"ram_mb": 400, "cpu": 1.0},
            "small": {"ram_mb": 150, "cpu": 0.5}}
    check_plan(p, par, need, CAP)


def test_cpu_is_a_constraint_too():
    p = first_fit_decreasing({"a": 6}, {"a": {"ram_mb": 10, "cpu": 1.5}}, container_capacity=CAP)
    assert p.containers == {0: [1, 2], 1: [3, 4], 2: [5, 6]}


def test_fractional_cpu_fills_a_container_exactly():
    p = first_fit_decreasing({"a": 10}, {"a": {"ram_mb": 1, "cpu": 0.1}},
                             container_capacity={"ram_mb": 100, "cpu": 1.0})
    assert p.containers == {0: list(range(1, 11))}


def test_ties_break_by_cpu_then_task_id():
    par = {"a": 1, "b": 1, "c": 1}
    res = {"a": {"ram_mb": 500, "cpu": 1}, "b": {"ram_mb": 500, "cpu": 3}, "c": {"ram_mb": 500, "cpu": 1}}
    p = first_fit_decreasing(par, res, container_capacity=CAP)
    # order b (cpu 3), a, c: b+a = 4 cpu in c0, c alone
    assert p.containers == {0: [1, 2], 1: [3]}


def test_deterministic_and_independent_of_dict_order():
    par = {"x": 3, "y": 4, "z": 2}
    res = {"x": {"ram_mb": 300}, "y": {"ram_mb": 300, "cpu": 2}, "z": {"ram_mb": 700}}
    p1 = first_fit_decreasing(par, res, container_capacity=CAP, default=DEF)
    p2 = first_fit_decreasing(dict(reversed(par.items())), dict(reversed(res.items())),
                              container_capacity=CAP, default=DEF)
    assert p1 == p2
    assert p1.to_dict() == PackingPlan.from_dict(json.loads(json.dumps(p1.to_dict()))).to_dict()


def test_missing_components_and_resources_take_the_defaults():
    p = first_fit_decreasing({"a": 3, "b": 1}, {"b": {"cpu": 2.0}}, container_capacity=CAP, default=DEF)
    # a: 100 MB / 1 cpu; b: 100 MB / 2 cpu -> order b(4), a(1,2,3): c0 = 4,1,2 (4 cpu), c1 = 3
    assert p.containers == {0: [1, 2, 4], 1: [3]}


def test_config_defaults_are_used_when_nothing_is_given():
    d = config.defaults()
    per = int(min(d["topology.container.ram.mb"] // d["topology.component.ram.mb"],
                  d["topology.container.cpu"] // d["topology.component.cpu"]))
    p = first_fit_decreasing({"a": per + 1})
    assert [len(ts) for ts in p.containers.values()] == [per, 1]


def test_random_topologies_keep_every_invariant():
    rng = random.Random(7)
    for _ in range(200):
        comps = [f"c{i}" for i in range(rng.randint(1, 6))]
        par = {c: rng.randint(1, 8) for c in comps}
        res = {c: {"ram_mb": rng.choice([0, 50, 128, 333, 512, 1000]), "cpu": rng.choice([0, 0.25, 0.5, 1, 3])}
               for c in comps if rng.random() < 0.8}
        p = first_fit_decreasing(par, res, container_capacity=CAP, default=DEF)
        need = {c: {**DEF, **res.get(c, {})} for c in comps}
        check_plan(p, par, need, CAP)
        # first fit: a task in container j did not fit in any earlier container when it was
        # placed; containers only fill up, so it does not fit in their final room either
        tc = p.task_component
        room = {c: {r: CAP[r] - sum(need[tc[t]][r] for t in ts) for r in CAP} for c, ts in p.containers.items()}
        for j, ts in p.containers.items():
            for t in ts:
                for i in range(j):
                    assert any(need[tc[t]][r] > room[i][r] + 1e-9 for r in CAP), (t, i, j)


def test_a_task_larger_than_a_container_names_the_component():
    with pytest.raises(ConfigError) as ei:
        first_fit_decreasing({"ok": 1, "huge": 2}, {"huge": {"ram_mb": 1500}}, container_capacity=CAP)
    assert str(ei.value) == ("component 'huge': one task needs ram_mb = 1500, more than a container "
                             "holds (topology.container.ram.mb = 1000)")
    with pytest.raises(ConfigError, match="component 'hot': one task needs cpu = 8"):
        first_fit_decreasing({"hot": 1}, {"hot": {"cpu": 8}}, container_capacity=CAP)


def test_num_containers_is_a_cap():
    par, res = {"a": 4}, {"a": {"ram_mb": 500}}
    assert len(first_fit_decreasing(par, res, 2, CAP).containers) == 2
    with pytest.raises(ConfigError, match="more than 1 container"):
        first_fit_decreasing(par, res, 1, CAP)


@pytest.mark.parametrize("res,msg", [
    ({"a": {"ram": 5}}, "component 'a': unknown resource 'ram'"),
    ({"a": {"ram_mb": -1}}, "component 'a': ram_mb must be a number >= 0, got -1"),
    ({"a": {"cpu": "2"}}, "component 'a': cpu must be a number >= 0, got '2'"),
    ({"a": {"cpu": True}}, "component 'a': cpu must be a number >= 0, got True"),
    ({"a": 5}, "component 'a': resources must be"),
    ({"nope": {"cpu": 1}}, "resources are given for 'nope', which is not a component"),
])
def test_bad_resources(res, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        first_fit_decreasing({"a": 1}, res, container_capacity=CAP)


# -- pack() ----------------------------------------------------------------------------


def tdef(**comps):
    """comps: name -> (par, component config)."""
    return TopologyDef("t", {n: ComponentDef(n, "bolt", "m:C", par, {}, [], cc) for n, (par, cc) in comps.items()})


def test_pack_defaults_to_round_robin_over_stmgrs():
    par = {"split": 2, "count": 3, "word": 1}
    assert pack(par, {"topology.stmgrs": 4}) == round_robin(par, 4)
    assert pack(par) == round_robin(par, 1)
    assert pack(par, {"topology.packing.algorithm": "ROUND_ROBIN", "topology.stmgrs": 2}) == round_robin(par, 2)


def test_pack_first_fit_decreasing_from_config():
    conf = config.merge({"topology.packing.algorithm": "first_fit_decreasing", "topology.stmgrs": 1,
                         "topology.container.ram.mb": 1000, "topology.container.cpu": 8.0,
                         "topology.component.ram.mb": 100,
                         "topology.component.resources": {"a": {"ram_mb": 600}}})
    p = pack({"a": 2, "b": 3}, conf)
    # a: 600 each -> c0: a1 + b..., c1: a2 + ...; topology.stmgrs is not a limit
    assert p.containers == {0: [1, 3, 4, 5], 1: [2]}


def test_pack_component_config_beats_the_table_beats_the_topology_default():
    t = tdef(a=(1, {"topology.component.ram.mb": 900}), b=(2, {}), c=(1, {"topology.component.cpu": 3.0}))
    conf = {"topology.packing.algorithm": "first_fit_decreasing", "topology.container.ram.mb": 1000,
            "topology.container.cpu": 4.0, "topology.component.ram.mb": 50,
            "topology.component.resources": {"a": {"ram_mb": 10, "cpu": 2.0}, "b": {"ram_mb": 500}}}
    p = pack(t, conf)
    # a = 900 MB / 2 cpu (its own ram, the table's cpu); b = 500 / 1; c = 50 / 3
    # order: a(1), b(2), b(3), c(4): c0 = a; c1 = b2 + b3 (1000, 2 cpu); c = 3 cpu fits neither
    assert p.containers == {0: [1], 1: [2, 3], 2: [4]}


def test_pack_errors():
    with pytest.raises(ConfigError, match="topology.packing.algorithm must be one of round_robin, "
                                          "first_fit_decreasing, got 'best_fit'"):
        pack({"a": 1}, {"topology.packing.algorithm": "best_fit"})
    with pytest.raises(ConfigError, match="topology.component.resources must be a table"):
        pack({"a": 1}, {"topology.packing.algorithm": "first_fit_decreasing",
                        "topology.component.resources": "a:512"})
    with pytest.raises(ConfigError, match="resources are given for 'typo'"):
        pack({"a": 1}, {"topology.packing.algorithm": "first_fit_decreasing",
                        "topology.component.resources": {"typo": {"ram_mb": 1}}})


def test_new_keys_pass_config_check_and_do_not_leak_between_calls():
    conf, warnings = config.check({"topology.packing.algorithm": "first_fit_decreasing",
                                   "topology.component.resources": {"a": {"ram_mb": 512}},
                                   "topology.component.ram.mb": 128, "topology.component.cpu": 0.5,
                                   "topology.container.ram.mb": 2048, "topology.container.cpu": 2})
    assert warnings == []
    pack({"a": 1}, conf)
    assert config.defaults()["topology.component.resources"] == {}
