"""Stable hashing and the groupings decided in the emitting instance."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from bittern.api.stream import Grouping
from bittern.errors import SchemaError, TopologyError
from bittern.hashing import key_bytes, stable_hash
from instance import grouping as g
from instance.grouping import (AllChooser, CustomChooser, FieldsChooser, GlobalChooser,
                               LocalOrShuffleChooser, PartialKeyChooser, ShuffleChooser, StreamRouter,
                               make_chooser)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORDS = [f"w{i}" for i in range(4000)]


# -- stable hashing -----------------------------------------------------------------------

_PROBE = """
import json
from bittern.hashing import stable_hash
from instance.grouping import FieldsChooser
keys = ["word", "fox", 42, ["a", 1], "\\u00e9t\\u00e9"]
ch = FieldsChooser([3, 1, 2, 7], [0])
print(json.dumps({"builtin": hash("word"),
                  "stable": [stable_hash(tuple(k) if isinstance(k, list) else k) for k in keys],
                  "tasks": [ch.choose([w])[0] for w in ["w%d" % i for i in range(200)]]}))
"""


def _probe(seed):
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    r = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=60, check=True)
    return json.loads(r.stdout)


def test_stable_hash_is_stable_across_processes_with_different_hash_seeds():
    a, b = _probe(1), _probe(2)
    assert a["builtin"] != b["builtin"]  # the seeds did change Python's hash()
    assert a["stable"] == b["stable"]
    assert a["tasks"] == b["tasks"]
    # ... and equal to this process's values
    assert a["stable"] == [stable_hash(k) for k in ("word", "fox", 42, ("a", 1), "\u00e9t\u00e9")]
    ch = FieldsChooser([3, 1, 2, 7], [0])
    assert a["tasks"] == [ch.choose([f"w{i}"])[0] for i in range(200)]


def test_stable_hash_pinned_values():
    # CRC-32 of the key's bytes: pinned so a change of algorithm is noticed (it would move
    # every key to another task and break keyed state after an upgrade)
    assert stable_hash("hello") == 907060870  # the CRC-32 check value of b"hello"
    assert stable_hash("word") == 3287381265
    assert stable_hash(42) == 163128923
    assert stable_hash(("a", 1)) == 3847662356
    assert stable_hash(b"\x00") == 3523407757


def test_stable_hash_details():
    assert stable_hash(("a", 1)) == stable_hash(["a", 1])  # a tuple is hashed as a list
    assert key_bytes("\u00e9") == "\u00e9".encode()
    assert stable_hash("word", 0x9E3779B9) != stable_hash("word")
    assert 0 <= stable_hash(("x", 2.5, None, True)) < 2 ** 32


# -- choosers -----------------------------------------------------------------------------

def test_shuffle_spreads_evenly():
    ch = ShuffleChooser([4, 5, 6])
    picks = [ch.choose(["x"])[0] for _ in range(300)]
    assert Counter(picks) == {4: 100, 5: 100, 6: 100}
    assert all(a != b for a, b in zip(picks, picks[1:]))  # round-robin: never twice in a row


def test_none_grouping_is_a_shuffle():
    ch = make_chooser(Grouping.NONE, [1, 2], ["w"], set())
    assert isinstance(ch, ShuffleChooser)
    assert Counter(ch.choose([0])[0] for _ in range(10)) == {1: 5, 2: 5}


def test_fields_same_key_same_task():
    a = FieldsChooser([10, 11, 12, 13], [1])
    b = FieldsChooser([13, 12, 11, 10], [1])  # the order the tasks are given in does not matter
    for w in WORDS[:500]:
        t = a.choose([0, w])
        assert a.choose([99, w]) == t  # other fields do not matter
        assert b.choose([1, w]) == t
        assert t == [a.task_for(w)]
        assert t == [[10, 11, 12, 13][stable_hash(w) % 4]]


def test_fields_spread_of_many_keys():
    ch = FieldsChooser([1, 2, 3, 4], [0])
    counts = Counter(ch.choose([w])[0] for w in WORDS)
    assert set(counts) == {1, 2, 3, 4}
    for t, n in counts.items():
        assert 800 <= n <= 1200, counts  # 1000 expected each


def test_fields_multi_field_key():
    ch = FieldsChooser([1, 2, 3], [0, 2])
    assert ch.choose(["a", "ignored", 5]) == [[1, 2, 3][stable_hash(("a", 5)) % 3]]
    assert ch.choose(["a", "other", 5]) == ch.choose(["a", "ignored", 5])


def test_fields_unhashable_key_is_hashed_by_its_encoding():
    ch = FieldsChooser([1, 2, 3, 4, 5], [0])
    assert ch.choose([[1, 2]]) == [[1, 2, 3, 4, 5][stable_hash([1, 2]) % 5]]
    assert ch.choose([[1, 2]]) == ch.choose([(1, 2)])  # a list and a tuple with equal items agree
    assert ch.choose([{"k": 1}]) == [[1, 2, 3, 4, 5][stable_hash({"k": 1}) % 5]]


def test_fields_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(g, "_KEY_CACHE_MAX", 8)
    ch = FieldsChooser([1, 2, 3], [0])
    for w in WORDS[:50]:
        ch.choose([w])
        assert len(ch._cache) <= 8
    assert ch.choose(["w3"]) == [[1, 2, 3][stable_hash("w3") % 3]]


def test_fields_choice_does_not_depend_on_history():
    tasks = [1, 2, 3]
    fresh = FieldsChooser(tasks, [0])
    warmed = FieldsChooser(tasks, [0])
    warmed.choose([1])
    warmed.choose([True])
    assert warmed.choose([1.0]) == fresh.choose([1.0])
    assert FieldsChooser(tasks, [0]).choose([True]) == warmed.choose([True])


def test_all_sends_to_every_task():
    ch = make_chooser(Grouping.ALL, [5, 3, 4], ["w"], set())
    assert isinstance(ch, AllChooser)
    assert ch.choose(["x"]) == [3, 4, 5]
    assert ch.choose(["y"]) == [3, 4, 5]


def test_global_sends_to_the_lowest_task():
    ch = make_chooser(Grouping.GLOBAL, [9, 4, 7], ["w"], set())
    assert isinstance(ch, GlobalChooser)
    assert {ch.choose([w])[0] for w in WORDS[:50]} == {4}


def test_local_or_shuffle_prefers_local_tasks():
    ch = make_chooser(Grouping.LOCAL_OR_SHUFFLE, [1, 2, 3, 4, 5, 6], ["w"], {2, 5, 8})
    assert isinstance(ch, LocalOrShuffleChooser)
    assert Counter(ch.choose(["x"])[0] for _ in range(100)) == {2: 50, 5: 50}


def test_local_or_shuffle_without_local_tasks_shuffles_over_all():
    ch = LocalOrShuffleChooser([1, 2, 3], {7, 8})
    assert Counter(ch.choose(["x"])[0] for _ in range(90)) == {1: 30, 2: 30, 3: 30}


def _key_with_two_candidates(ch):
    for w in WORDS:
        a, b = ch.candidates((w,))
        if a != b:
            return w, a, b
    raise AssertionError("no key with two distinct candidates")


def test_partial_key_two_candidates_and_load_balance():
    tasks = [10, 20, 30, 40, 50]
    ch = make_chooser(Grouping.partial_key("w"), tasks, ["n", "w"], set())
    assert isinstance(ch, PartialKeyChooser)
    w, a, b = _key_with_two_candidates(ch)
    assert (a, b) == (stable_hash((w,)) % 5, stable_hash((w,), 0x9E3779B9) % 5)
    picks = Counter(ch.choose([0, w])[0] for _ in range(100))
    # a hot key is split evenly between its two candidates, and goes nowhere else
    assert picks == {tasks[a]: 50, tasks[b]: 50}


def test_partial_key_keys_go_only_to_their_candidates():
    tasks = [1, 2, 3, 4]
    ch = PartialKeyChooser(tasks, [0])
    for w in WORDS[:300]:
        a, b = ch.candidates((w,))
        assert ch.choose([w])[0] in {tasks[a], tasks[b]}
    # the less loaded candidate wins, so the load stays balanced
    assert max(ch._load) - min(ch._load) <= 10, ch._load


class RecordingGrouping:
    prepared = None

    def prepare(self, context, component, stream, target_tasks):
        RecordingGrouping.prepared = (context, component, stream, target_tasks)
        self.tasks = target_tasks

    def choose_tasks(self, values):
        if values[0] == "none":
            return None
        if values[0] == "bad":
            return [self.tasks[0], 999]
        return [t for t in self.tasks if t % 2 == 0]


def test_custom_grouping_prepare_and_choose():
    spec = Grouping.custom(RecordingGrouping)
    ch = make_chooser(spec, [4, 3, 2], ["w"], set(), context="ctx", component="word", stream="default",
                      where="component 'count' input 'word'")
    assert isinstance(ch, CustomChooser)
    assert RecordingGrouping.prepared == ("ctx", "word", "default", [2, 3, 4])
    assert ch.choose(["x"]) == [2, 4]
    assert ch.choose(["none"]) == []


def test_custom_grouping_returned_ids_are_checked():
    ch = CustomChooser([4, 3, 2], Grouping.custom(RecordingGrouping()).custom, None, "word", "default",
                       "component 'count' input 'word'")
    with pytest.raises(SchemaError) as ei:
        ch.choose(["bad"])
    assert str(ei.value) == ("component 'count' input 'word': custom grouping chose task 999, which is "
                             "not one of the target tasks [2, 3, 4]")


def test_custom_grouping_that_cannot_be_loaded():
    with pytest.raises(TopologyError, match="component 'c': cannot load custom grouping: "):
        CustomChooser([1], {"pickle": "bm90IGEgcGlja2xl"}, None, "w", "default", "component 'c'")


def test_direct_and_unknown_kinds():
    assert make_chooser(Grouping.DIRECT, [1, 2], ["w"], set()) is None
    from bittern.api.stream import GroupingSpec
    with pytest.raises(ValueError, match="unknown grouping 'bogus'"):
        make_chooser(GroupingSpec("bogus"), [1], ["w"], set())


# -- the router of one output stream ----------------------------------------------------------

def test_router_combines_subscribers():
    r = StreamRouter("word", "default", ["w"], False,
                     [GlobalChooser([5, 6]), AllChooser([8, 7])], [])
    assert r.arity == 1
    assert r.route(["x"]) == [5, 7, 8]


def test_router_single_subscriber_and_none():
    assert StreamRouter("word", "default", ["w"], False, [GlobalChooser([3, 2])], []).route(["x"]) == [2]
    assert StreamRouter("word", "default", ["w"], False, [], []).route(["x"]) == []


def test_router_direct_stream():
    r = StreamRouter("word", "pointed", ["w"], True, [], [4, 5])
    assert r.route(["x"], direct_task=5) == [5]
    with pytest.raises(SchemaError) as ei:
        r.route(["x"])
    assert str(ei.value) == "component 'word': stream 'pointed' is direct; emit needs direct_task="
    with pytest.raises(SchemaError) as ei:
        r.route(["x"], direct_task=6)
    assert str(ei.value) == ("component 'word': direct_task 6 does not subscribe to stream 'pointed' "
                             "(tasks: [4, 5])")


def test_router_direct_task_on_a_non_direct_stream():
    r = StreamRouter("word", "default", ["w"], False, [AllChooser([1])], [])
    with pytest.raises(SchemaError) as ei:
        r.route(["x"], direct_task=1)
    assert str(ei.value) == ("component 'word': emit with direct_task on stream 'default', which is not "
                             "declared direct")


# -- Storm's placement (topology.fields.grouping.hash = storm) ------------------------------
# Expected values were printed by a JVM (OpenJDK 17): Arrays.deepHashCode of the Java
# objects Storm's multilang JSON becomes (String, Long, Double, Boolean, null, ArrayList,
# HashMap, byte[]), and Math.floorMod(..., 7) for a few words.
STORM_KEYS = ["the", -123456789012, {"a": 1, "b": ["x", -7]}, ["word", 42, -0.0, True, None],
              bytes([1, 200, 3]), float("nan"), "naïve €𝄞"]
JAVA_SINGLE = [114832, -1097262546, 4780, -2091796625, 29050, 2146959391, 1144676576]


def test_java_hash_matches_the_jvm():
    from bittern.hashing import _list_hash, java_hash
    assert java_hash("hello") == 99162322 and java_hash("Aa") == java_hash("BB") == 2112
    assert java_hash(-1) == 0 and java_hash(2 ** 40) == 256 and java_hash(1.5) == 1073217536
    assert java_hash(True) == 1231 and java_hash(False) == 1237 and java_hash(None) == 0
    assert [_list_hash([k]) for k in STORM_KEYS] == JAVA_SINGLE
    assert _list_hash(STORM_KEYS) == 646716922  # several grouping fields at once
    with pytest.raises(TypeError, match="no Java hashCode for a value of type set"):
        java_hash({1})


def test_storm_fields_chooser_places_words_as_storm_on_sorted_tasks():
    from bittern.hashing import storm_task_index
    words = ["the", "cow", "jumped", "over", "moon"]
    assert [storm_task_index([w], 7) for w in words] == [4, 2, 3, 6, 6]
    tasks = [17, 11, 12, 13, 14, 15, 16]  # any order: Storm's target tasks are sorted
    ch = make_chooser(Grouping.fields("w"), tasks, ["n", "w"], set(), fields_hash="storm")
    assert isinstance(ch, g.StormFieldsChooser)
    for _ in range(2):  # the second round comes from the cache
        assert [ch.choose([0, w])[0] for w in words] == [15, 13, 14, 17, 17]
    two = make_chooser(Grouping.fields("n", "w"), tasks, ["n", "w"], set(), fields_hash="storm")
    assert two.choose([42, "word"]) == [sorted(tasks)[storm_task_index([42, "word"], 7)]]


def test_storm_fields_hash_is_refused_with_exactly_once():
    from bittern import config as cfg
    from bittern.errors import ConfigError
    conf = cfg.merge({"topology.fields.grouping.hash": "storm", "topology.reliability.mode": "EFFECTIVELY_ONCE"})
    with pytest.raises(ConfigError, match="topology.fields.grouping.hash = storm cannot be used with EFFECTIVELY_ONCE"):
        cfg.check_merged(conf, "topology 't'")
    assert cfg.check({"topology.fields.grouping.hash": "STORM"}, where="x")[0] == \
        {"topology.fields.grouping.hash": "storm"}
