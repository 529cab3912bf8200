"""bittern/rebalance.py's pure parts: parsing COMP=N, validation and split limits."""
from __future__ import annotations

import pytest

from bittern.api.topology import ComponentDef, TopologyDef
from bittern.rebalance import RebalanceError, new_definition, parse_parallelism, split_limit, validate


def tdef():
    comps = [ComponentDef("spout", "spout", "bittern.spouts.files:FileSpout", 1, {"default": {"fields": ["line"]}}),
             ComponentDef("count", "bolt", "x:Y", 2, {})]
    return TopologyDef("t", {c.name: c for c in comps})


def test_parse_parallelism():
    assert parse_parallelism(["a=1", " b = 3"]) == {"a": 1, "b": 3}
    assert parse_parallelism([]) == {}
    for bad in ("a", "=3", "a=x"):
        with pytest.raises(RebalanceError):
            parse_parallelism([bad])


def test_validate_keeps_unnamed_components():
    assert validate(tdef(), {}, {"count": 4}) == {"spout": 1, "count": 4}
    assert validate(tdef(), {}, {}, containers=3) == {"spout": 1, "count": 2}


@pytest.mark.parametrize("par,containers,why", [
    ({"nope": 1}, None, "has no component 'nope'"),
    ({"count": 0}, None, ">= 1"),
    ({"count": True}, None, ">= 1"),
    ({}, None, "nothing to change"),
    ({"count": 2}, 0, "--containers"),
])
def test_validate_refuses(par, containers, why):
    with pytest.raises(RebalanceError) as e:
        validate(tdef(), {}, par, containers)
    assert why in str(e.value) and e.value.kind == "invalid"


def test_key_groups_bound_stateful_parallelism():
    conf = {"topology.reliability.mode": "EFFECTIVELY_ONCE", "bittern.state.key.groups": 8}
    assert validate(tdef(), conf, {"count": 8})["count"] == 8
    with pytest.raises(RebalanceError, match="key groups"):
        validate(tdef(), conf, {"count": 9})


def test_file_spout_splits_up_to_its_files(tmp_path):
    for i in range(3):
        (tmp_path / f"f{i}.txt").write_text("x\n")
    conf = {"spout.files": str(tmp_path / "*.txt")}
    assert split_limit(tdef().components["spout"], conf) == 3
    assert validate(tdef(), conf, {"spout": 3})["spout"] == 3
    with pytest.raises(RebalanceError, match="at most 3"):
        validate(tdef(), conf, {"spout": 4})
    # shrinking is always allowed, and an unimportable class has no known limit
    assert split_limit(ComponentDef("s", "spout", "no.such.module:S", 1, {}), {}) is None


def test_new_definition_keeps_the_record():
    rec = {"definition": tdef().to_dict(), "config": {"topology.stmgrs": 2}, "submitted_at": 12.5,
           "state": "PAUSED"}
    new, t, conf = new_definition(rec, {"spout": 1, "count": 5}, containers=3)
    assert new["submitted_at"] == 12.5 and new["state"] == "PAUSED"
    assert t.components["count"].par == 5 and conf["topology.stmgrs"] == 3
    assert rec["config"]["topology.stmgrs"] == 2  # the old record is untouched


def test_storm_max_task_parallelism_caps_a_rebalance_and_a_submit():
    conf = {"topology.max.task.parallelism": 3}
    assert validate(tdef(), conf, {"count": 3})["count"] == 3
    with pytest.raises(RebalanceError, match=r"parallelism 4 is more than topology.max.task.parallelism \(3\)"):
        validate(tdef(), conf, {"count": 4})
    from bittern.cli.launch import cap_parallelism
    t, said = tdef(), []
    t.components["count"].par = 5
    cap_parallelism(t, 3, said.append)
    assert t.components["count"].par == 3 and t.components["spout"].par == 1
    assert said == ["note: component 'count' asked for 5 tasks; topology.max.task.parallelism caps it at 3"]
    cap_parallelism(t, 0, said.append)  # 0: no cap
    assert t.components["count"].par == 3 and len(said) == 1
