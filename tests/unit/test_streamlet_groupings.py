"""The pure pieces of bittern/compat/streamlet.py (no heronpy needed): heronpy's key
grouping with a stable hash, the repartition grouping, the window hosts."""
from __future__ import annotations

import pytest

from bittern.api.windows import Window
from bittern.compat import streamlet
from bittern.errors import TopologyError
from bittern.hashing import stable_hash


def prepared(grouping, tasks):
    grouping.prepare(None, "src", "output", tasks)
    return grouping


def test_key_grouping_routes_a_key_to_one_task_by_its_stable_hash():
    g = prepared(streamlet.KeyGrouping(), [4, 7, 9])
    for key in ("fox", "dog", 42, ("a", 1)):
        (task,) = g.choose_tasks([(key, 1)])
        assert task == [4, 7, 9][stable_hash(key) % 3]
        assert g.choose_tasks([[key, "other value"]]) == [task]  # the key alone decides
    assert prepared(streamlet.KeyGrouping(), [4, 7, 9]).choose_tasks([("fox", 2)]) == g.choose_tasks([("fox", 1)])
    with pytest.raises(RuntimeError, match=r"takes \(key, value\) elements, got 'word'"):
        g.choose_tasks(["word"])


def test_key_grouping_hashes_keys_msgpack_cannot_encode():
    g = prepared(streamlet.KeyGrouping(), [1, 2])
    assert g.choose_tasks([(frozenset({1}), 0)])[0] in (1, 2)
    assert streamlet.key_hash(frozenset({1})) == streamlet.key_hash(frozenset({1}))


def test_partition_grouping_calls_the_function_with_the_element_and_the_partitions():
    calls = []

    def fn(element, n):
        calls.append((element, n))
        return element % n
    g = prepared(streamlet.PartitionGrouping(fn), [12, 10, 11])  # sorted by the instance; here as given
    assert [g.choose_tasks([v])[0] for v in range(6)] == [12, 10, 11, 12, 10, 11]
    assert calls[:2] == [(0, 3), (1, 3)]
    both = prepared(streamlet.PartitionGrouping(lambda e, n: [0, n + 1]), [5, 6])  # a list, modulo n
    assert both.choose_tasks(["x"]) == [5, 6]
    with pytest.raises(RuntimeError, match="must return a partition index"):
        prepared(streamlet.PartitionGrouping(lambda e, n: "0"), [5]).choose_tasks(["x"])


def test_window_hosts_are_bittern_windows_named_by_duration_and_slide():
    sliding = streamlet.window_host(10, 2, "counts")
    assert sliding.__module__ == "bittern.compat.streamlet" and sliding.__qualname__ == "StreamletWindow_10_2"
    assert sliding.window.to_dict() == Window.sliding(10, 2).to_dict()
    assert streamlet.window_host("10", "2", "counts") is sliding  # heronpy's config values are strings
    tumbling = streamlet.window_host(4, 4, "j")
    assert tumbling.window.to_dict() == Window.tumbling(4).to_dict()
    assert streamlet.window_host(4, None, "j") is tumbling  # no slide: the duration, as heronpy
    from bittern.api.topology import import_path
    assert import_path("bittern.compat.streamlet:StreamletWindow_10_2") is sliding  # what instances resolve


@pytest.mark.parametrize("duration, slide, message", [
    (2, 5, "streamlet 'c': the window's slide interval (5 s) is longer than the window (2 s)"),
    (0, 0, "streamlet 'c': the window's duration must be at least 1 second"),
    ("soon", 1, "streamlet 'c': the window's duration must be a whole number of seconds, got 'soon'"),
])
def test_bad_windows_name_the_streamlet(duration, slide, message):
    with pytest.raises(TopologyError) as e:
        streamlet.window_host(duration, slide, "c")
    assert message in str(e.value)


def test_component_class_keeps_heronpy_classes_and_replaces_the_broken_ones():
    conf = {streamlet.DURATION_KEY: "3", streamlet.SLIDE_KEY: "1"}
    host, path = streamlet.component_class("heronpy.streamlet.impl.joinbolt.JoinBolt", conf, "j")
    assert host.__qualname__ == "StreamletWindow_3_1" and path == "heronpy.streamlet.impl.joinbolt.JoinBolt"
    assert streamlet.component_class("heronpy.streamlet.impl.mapbolt.MapBolt", {}, "m") == \
        (None, "heronpy.streamlet.impl.mapbolt.MapBolt")
    assert streamlet.component_class("heronpy.streamlet.impl.transformbolt.TransformBolt", {}, "t") == \
        (None, "bittern.compat.streamlet.TransformBolt")


def test_streamlet_groupings_by_class_path():
    assert streamlet.grouping("heronpy.streamlet.impl.joinbolt.JoinGrouping", "w").custom == \
        {"class": "bittern.compat.streamlet:KeyGrouping"}
    assert streamlet.grouping("heronpy.streamlet.impl.reducebywindowbolt.ReduceGrouping", "w").kind == "global"
    assert streamlet.grouping("my.own.Grouping", "w") is None
