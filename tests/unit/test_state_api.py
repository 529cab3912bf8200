"""The stateful API: key groups, plain and keyed state, snapshots, restore and rescale helpers."""
from __future__ import annotations

import collections
import datetime
import enum
import random

import msgpack
import pytest

from bittern.api.state import (DEFAULT_KEY_GROUPS, FORMAT_VERSION, KeyGroups, State, StateConflictError,
                               StateFormatError, StateOwnershipError, StateTypeError, is_stateful)
from bittern.hashing import stable_hash


# -- key groups ---------------------------------------------------------------------------

def test_group_of_is_stable_hash_mod_n():
    kg = KeyGroups(128)
    for key in ["a", "word", 17, ("x", 2), b"raw", 1.5]:
        assert kg.group_of(key) == stable_hash(key) % 128
    assert KeyGroups().n_groups == DEFAULT_KEY_GROUPS == 128


@pytest.mark.parametrize("n_groups", [1, 2, 7, 10, 128])
def test_contiguous_ranges_partition_the_groups(n_groups):
    kg = KeyGroups(n_groups)
    for n_tasks in range(1, 2 * n_groups + 2):
        seen = []
        for i in range(n_tasks):
            r = kg.groups_of(i, n_tasks)
            assert r.step == 1
            assert all(kg.owner(g, n_tasks) == i for g in r)
            seen.extend(r)
        assert seen == list(range(n_groups))  # contiguous, in task order, each exactly once
        if n_tasks <= n_groups:
            sizes = [len(kg.groups_of(i, n_tasks)) for i in range(n_tasks)]
            assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_flink_owner_formula_and_rescale_moves_whole_groups():
    kg = KeyGroups(128)
    assert kg.owner(0, 4) == 0 and kg.owner(31, 4) == 0 and kg.owner(32, 4) == 1 and kg.owner(127, 4) == 3
    assert kg.groups_of(1, 4) == range(32, 64)
    # every key follows its group: the task a key goes to is its group's owner
    for key in (f"k{i}" for i in range(500)):
        for n in (1, 3, 4, 6):
            tasks = [10 + 2 * i for i in range(n)]
            t = kg.task_for(key, tasks)
            assert kg.group_of(key) in kg.groups_of(tasks.index(t), n)


def test_task_for_uses_the_given_task_order():
    kg = KeyGroups(4)
    key = next(k for k in (f"k{i}" for i in range(100)) if kg.group_of(k) == 3)
    assert kg.task_for(key, [5, 6]) == 6
    assert kg.task_for(key, [5]) == 5


def test_bad_arguments():
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="key groups must be a whole number >= 1"):
            KeyGroups(bad)
    kg = KeyGroups(8)
    with pytest.raises(ValueError, match="key group 8 is out of range 0..7"):
        kg.owner(8, 2)
    with pytest.raises(ValueError, match="task index 2 is out of range 0..1"):
        kg.groups_of(2, 2)
    with pytest.raises(ValueError, match="number of tasks"):
        kg.groups_of(0, 0)
    assert KeyGroups(8) == kg and hash(KeyGroups(8)) == hash(kg) and KeyGroups(9) != kg


def test_is_stateful():
    class Plain:
        pass

    class Counter:
        def init_state(self, state):
            self.state = state

        def pre_save(self, checkpoint_id):
            pass

    assert is_stateful(Counter()) and not is_stateful(Plain())


# -- plain and keyed stores ---------------------------------------------------------------

def test_plain_store():
    s = State(16)
    assert s.get("x") is None and s.get("x", 0) == 0 and len(s) == 0 and "x" not in s
    s.put("x", 1)
    s.put(("t", 2), [1, 2])
    assert s.get("x") == 1 and "x" in s and len(s) == 2
    s.delete("x")
    s.delete("never there")
    assert s.items() == [(("t", 2), [1, 2])]
    for k, _ in s.items():  # items() is a copy: modifying while iterating is fine
        s.delete(k)
    assert len(s) == 0


def test_keyed_store_is_held_per_group():
    s = State(8)
    ks = s.keyed
    words = [f"w{i}" for i in range(50)]
    for i, w in enumerate(words):
        ks.put(w, i)
    assert len(ks) == 50 and len(s) == 0  # keyed and plain are separate
    assert ks.get("w7") == 7 and "w7" in ks and ks.get("nope", -1) == -1 and "nope" not in ks
    assert ks.groups() == sorted({KeyGroups(8).group_of(w) for w in words})
    for g in ks.groups():
        assert all(KeyGroups(8).group_of(k) == g for k, _ in ks.group_items(g))
    assert sorted(ks.items()) == sorted((w, i) for i, w in enumerate(words))
    # items come group by group
    groups_in_order = [KeyGroups(8).group_of(k) for k, _ in ks.items()]
    assert groups_in_order == sorted(groups_in_order)
    for w in words:
        ks.delete(w)
    ks.delete("w0")
    assert len(ks) == 0 and ks.groups() == []


def test_keyed_ownership_is_checked_when_given():
    s = State.for_task(0, 2, key_groups=8)  # owns groups 0..3
    kg = KeyGroups(8)
    mine = next(f"k{i}" for i in range(100) if kg.group_of(f"k{i}") < 4)
    other = next(f"k{i}" for i in range(100) if kg.group_of(f"k{i}") >= 4)
    s.keyed.put(mine, 1)
    with pytest.raises(StateOwnershipError, match=r"key group \d, which this task does not own.*task_for"):
        s.keyed.put(other, 1)
    assert s.keyed.get(other) is None
    assert State(8).keyed.owned_groups is None


# -- encodability: put time (cheap, top level) and snapshot time (deep) -------------------

class _Obj:
    pass


@pytest.mark.parametrize("value,what", [
    (_Obj(), "test_state_api._Obj"), ({1, 2}, "set"), (datetime.date(2020, 1, 1), "datetime.date"),
    (2 ** 64, "the int 18446744073709551616"), (-(2 ** 63) - 1, "the int"),
])
def test_put_refuses_a_value_msgpack_cannot_encode(value, what):
    s = State(8)
    with pytest.raises(StateTypeError) as ei:
        s.put("k", value)
    assert "state.put('k', ...): the value is" in str(ei.value) and what in str(ei.value)
    with pytest.raises(StateTypeError, match=r"state.keyed.put\('u1', ...\): the value is"):
        s.keyed.put("u1", value)
    assert "k" not in s and "u1" not in s.keyed


def test_put_refuses_bad_keys():
    s = State(8)
    with pytest.raises(StateTypeError, match=r"the key at \[1\] is a frozenset, which msgpack cannot encode"):
        s.put(("a", frozenset()), 1)
    with pytest.raises(StateTypeError, match="the key is a list, which cannot be a key"):
        s.keyed.put([1], 1)


def test_snapshot_names_the_key_group_and_path_of_a_nested_bad_value():
    s = State(8)
    s.keyed.put("alice", {"seen": [1, 2]})
    s.keyed.get("alice")["seen"].append({"when": datetime.time(12)})  # mutated after put
    with pytest.raises(StateTypeError) as ei:
        s.snapshot()
    msg = str(ei.value)
    g = KeyGroups(8).group_of("alice")
    assert f"keyed (group {g}) key 'alice'" in msg
    assert "the value at ['seen'][2]['when'] is a datetime.time" in msg
    assert "nested or was changed after put" in msg

    p = State(8)
    p.put("offsets", [1, 2])
    p.get("offsets").append(_Obj())
    with pytest.raises(StateTypeError, match=r"plain key 'offsets': the value at \[2\] is a \S*test_state_api\._Obj"):
        p.snapshot()


# -- snapshot / restore -------------------------------------------------------------------

class Color(enum.IntEnum):
    RED = 1


def test_snapshot_round_trip_is_exact():
    s = State(16)
    s.put("offset", 12345)
    s.put(("partition", 3), (7, "abc"))
    s.put(7, None)
    values = {"a": 1, "nested": {"list": [1, 2.5, None, True, b"\x00\xff"], "tup": (1, (2, 3))},
              5: "int key", (1, 2): "tuple key", "big": 2 ** 64 - 1, "neg": -(2 ** 63)}
    s.keyed.put("alice", values)
    s.keyed.put(("bob", 2), [("x", 1)])
    s.keyed.put(b"raw", 1.25)
    r = State.restore(s.snapshot())
    assert r.items() == s.items()
    assert sorted(map(repr, r.keyed.items())) == sorted(map(repr, s.keyed.items()))
    assert r.keyed.get("alice") == values and r.keyed.get(("bob", 2)) == [("x", 1)]
    assert type(r.get(("partition", 3))) is tuple and r.keyed.groups() == s.keyed.groups()
    assert r.key_groups == KeyGroups(16)


def test_subclasses_come_back_as_their_base_type():
    s = State(4)
    s.put("counts", collections.defaultdict(int, a=1))
    s.put("color", Color.RED)
    s.put("buf", bytearray(b"xy"))
    r = State.restore(s.snapshot())
    assert type(r.get("counts")) is dict and r.get("counts") == {"a": 1}
    assert type(r.get("color")) is int and r.get("color") == 1
    assert r.get("buf") == b"xy"


def test_snapshot_format_is_versioned_msgpack():
    s = State(4)
    s.put("k", 1)
    doc = msgpack.unpackb(s.snapshot(), raw=False, strict_map_key=False)
    assert doc["format"] == "bittern-state" and doc["version"] == FORMAT_VERSION == 1
    assert doc["key_groups"] == 4 and doc["plain"] == [["k", 1]]


def test_restore_refuses_garbage_and_newer_versions():
    with pytest.raises(StateFormatError, match="not a state snapshot"):
        State.restore(b"\xc1garbage")
    with pytest.raises(StateFormatError, match="no bittern-state header"):
        State.restore(msgpack.packb({"x": 1}))
    with pytest.raises(StateFormatError, match="version 99 is not supported"):
        State.restore(msgpack.packb({"format": "bittern-state", "version": 99, "key_groups": 4,
                                     "plain": [], "keyed": []}))
    with pytest.raises(StateFormatError, match="is bytes"):
        State.restore("text")


def test_restore_refuses_a_different_number_of_key_groups():
    data = State(8).snapshot()
    assert State.restore(data, key_groups=8).key_groups == KeyGroups(8)
    with pytest.raises(StateFormatError, match="taken with 8 key groups, but 16 are configured"):
        State.restore(data, key_groups=KeyGroups(16))


def _filled(n_groups=32, n_keys=400, seed=1):
    rnd = random.Random(seed)
    s = State(n_groups)
    for i in range(n_keys):
        s.keyed.put(f"key{i}", rnd.randrange(1000))
    s.put("offset", 42)
    return s


def test_restore_only_some_groups_and_plain_by_default_only_when_whole():
    s = _filled()
    data = s.snapshot()
    some = set(s.keyed.groups()[:5])
    r = State.restore(data, groups=some)
    assert set(r.keyed.groups()) == some
    assert sorted(r.keyed.items()) == sorted(kv for g in some for kv in s.keyed.group_items(g))
    assert len(r) == 0  # plain state is the task's own: not copied into a partial restore
    assert r.keyed.owned_groups == frozenset(some)
    assert State.restore(data, groups=some, plain=True).get("offset") == 42
    assert State.restore(data).get("offset") == 42


def test_split_by_groups_and_merge_round_trip():
    s = _filled()
    parts = s.split_by_groups()
    assert sorted(parts) == s.keyed.groups()
    for g, blob in parts.items():
        p = State.restore(blob)
        assert p.keyed.groups() == [g] and len(p) == 0
    merged = State(32).merge(*parts.values())
    assert sorted(merged.keyed.items()) == sorted(s.keyed.items())
    with pytest.raises(StateConflictError, match="both states hold key groups"):
        State(32).merge(s, parts[s.keyed.groups()[0]])
    with pytest.raises(StateConflictError, match="plain keys"):
        State(32).merge(s, State.restore(s.snapshot(), groups=[], plain=True))
    with pytest.raises(StateConflictError, match="cannot merge a state of 32 key groups into one of 8"):
        State(8).merge(s)


@pytest.mark.parametrize("old_n,new_n", [(4, 6), (6, 4), (3, 1), (1, 5), (5, 5)])
def test_rescale_by_whole_groups_keeps_every_key_where_fields_grouping_sends_it(old_n, new_n):
    kg = KeyGroups(32)
    rnd = random.Random(old_n * 10 + new_n)
    truth = {f"user{i}": rnd.randrange(10 ** 6) for i in range(1000)}
    old_tasks = list(range(old_n))
    old = [State.for_task(i, old_n, kg) for i in old_tasks]
    for k, v in truth.items():
        old[old_tasks.index(kg.task_for(k, old_tasks))].keyed.put(k, v)
    snaps = [st.snapshot() for st in old]

    new_tasks = [100 + i for i in range(new_n)]
    new = []
    for i in range(new_n):
        mine = kg.groups_of(i, new_n)
        st = State.for_task(i, new_n, kg)
        sources = sorted({kg.owner(g, old_n) for g in mine})  # the old tasks holding my groups
        st.merge(*(State.restore(snaps[j], groups=mine, key_groups=kg) for j in sources))
        new.append(st)
    restored = {}
    for st in new:
        for k, v in st.keyed.items():
            assert k not in restored
            restored[k] = v
    assert restored == truth
    for k in truth:  # the key's state is on the task fields grouping now routes it to
        assert k in new[new_tasks.index(kg.task_for(k, new_tasks))].keyed
