"""Packing: task ids and round-robin placement."""
from __future__ import annotations

import json

from bittern.packing import PackingPlan, assign_tasks, round_robin


def test_task_ids_from_one_over_components_sorted_by_name():
    tc, ti = assign_tasks({"split": 2, "count": 3, "word": 1})
    assert tc == {1: "count", 2: "count", 3: "count", 4: "split", 5: "split", 6: "word"}
    assert ti == {1: 0, 2: 1, 3: 2, 4: 0, 5: 1, 6: 0}


def test_task_ids_do_not_depend_on_definition_order():
    assert assign_tasks({"b": 1, "a": 2}) == assign_tasks({"a": 2, "b": 1})


def test_round_robin_deals_in_task_id_order():
    p = round_robin({"split": 2, "count": 3, "word": 1}, 4)
    assert p.containers == {0: [1, 5], 1: [2, 6], 2: [3], 3: [4]}
    assert p.task_container == {1: 0, 5: 0, 2: 1, 6: 1, 3: 2, 4: 3}
    assert p.component_tasks == {"count": [1, 2, 3], "split": [4, 5], "word": [6]}


def test_containers_are_capped_by_the_task_count():
    p = round_robin({"a": 1, "b": 2}, 10)
    assert p.containers == {0: [1], 1: [2], 2: [3]}


def test_at_least_one_container():
    assert round_robin({"a": 2}, 0).containers == {0: [1, 2]}
    assert round_robin({"a": 2}, "2").containers == {0: [1], 1: [2]}


def test_one_container_holds_everything():
    p = round_robin({"x": 3, "y": 2}, 1)
    assert p.containers == {0: [1, 2, 3, 4, 5]}


def test_to_dict_from_dict_round_trip_through_json():
    p = round_robin({"split": 2, "count": 3, "word": 1}, 2)
    d = p.to_dict()
    assert d == {"tasks": {"1": ["count", 0], "2": ["count", 1], "3": ["count", 2],
                           "4": ["split", 0], "5": ["split", 1], "6": ["word", 0]},
                 "containers": {"0": [1, 3, 5], "1": [2, 4, 6]}}
    back = PackingPlan.from_dict(json.loads(json.dumps(d)))
    assert back == p
    assert back.task_container == p.task_container
    assert back.component_tasks == p.component_tasks
