"""The output side of an instance: schema check, routing, per-task batches."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from bittern import Bolt, Grouping, Spout, Stream, Topology
from bittern.api.context import TopologyContext
from bittern.errors import SchemaError
from bittern.packing import round_robin
from bittern.wire import DATA, Serializer, task_bytes, task_of
from instance.emitter import Emitter, build_routers
from instance.grouping import AllChooser, GlobalChooser, StreamRouter

SER = Serializer("msgpack")


class Sent:
    """A fake ``send``: collects frames and decodes them."""

    def __init__(self):
        self.frames = []

    def __call__(self, frames):
        self.frames.append(frames)

    def batches(self):
        """Each batch as ``(dest task, [[src, stream, values(, id)], ...])``, i.e. with
        the wire format ``[src, stream, [values...], runs | None]`` expanded: the id of a
        tuple is its run's."""
        out = []
        for kind, dest, payload in self.frames:
            assert kind == DATA
            src, stream, vals, runs = SER.loads(payload)
            ids = expand_runs(runs, len(vals))
            tuples = [[src, stream, v] if ids[i] is None else [src, stream, v, ids[i]]
                      for i, v in enumerate(vals)]
            out.append((task_of(dest), tuples))
        return out

    def runs(self):
        return [SER.loads(payload)[3] for _, _, payload in self.frames]


def expand_runs(runs, n):
    """Per tuple, the id of its run; checks the runs' layout on the way."""
    if runs is None:
        return [None] * n
    starts = runs[0::2]
    assert starts[0] == 0 and starts == sorted(set(starts)) and starts[-1] < n, runs
    ids = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else n
        ids += [runs[2 * k + 1]] * (end - start)
    return ids


def make_emitter(batch_size=3, task=1):
    routers = {
        "default": StreamRouter("word", "default", ["word", "n"], False, [GlobalChooser([7, 8])], []),
        "errors": StreamRouter("word", "errors", ["msg"], False, [AllChooser([7, 8])], []),
        "pointed": StreamRouter("word", "pointed", ["x"], True, [], [7, 8]),
    }
    sent = Sent()
    return Emitter(task, "word", routers, SER, sent, batch_size), sent


def test_nothing_is_sent_before_a_batch_fills():
    em, sent = make_emitter(batch_size=3)
    em.emit(["a", 1])
    em.emit(["b", 2])
    assert sent.frames == []
    assert em.emit_count == 2 and em.transfer_count == 2


def test_flush_at_batch_size():
    em, sent = make_emitter(batch_size=3)
    for i in range(7):
        em.emit([f"w{i}", i])
    assert sent.batches() == [(7, [[1, "default", ["w0", 0]], [1, "default", ["w1", 1]],
                                   [1, "default", ["w2", 2]]]),
                              (7, [[1, "default", ["w3", 3]], [1, "default", ["w4", 4]],
                                   [1, "default", ["w5", 5]]])]
    assert em.buffers == {(7, "default"): [[["w6", 6]], None, None]}
    assert sent.frames[0][1] == task_bytes(7) == b"\x00\x00\x00\x07"


def test_flush_sends_every_partial_batch():
    em, sent = make_emitter(batch_size=100)
    em.emit(["a", 1])
    em.emit(["boom"], stream="errors")
    em.flush()
    # one batch per (destination, stream)
    assert sorted(sent.batches()) == [(7, [[1, "default", ["a", 1]]]), (7, [[1, "errors", ["boom"]]]),
                                      (8, [[1, "errors", ["boom"]]])]
    assert em.buffers == {} and em.oldest is None
    em.flush()  # nothing buffered: nothing sent
    assert len(sent.frames) == 3
    assert em.emit_count == 2 and em.transfer_count == 3


def test_tracked_emit_carries_root_and_a_fresh_edge():
    em, sent = make_emitter(batch_size=1)
    tasks, xors = em.emit_tracked(["a", 1], "default", [[5]])
    ((task, batch),) = sent.batches()
    assert tasks == [task] == [7]
    assert batch[0][:3] == [1, "default", ["a", 1]]
    root, edge = batch[0][3]
    assert root == 5 and [edge] == xors and edge != 0


def test_tracked_emit_draws_one_edge_per_anchor_as_storm_does():
    em, sent = make_emitter(batch_size=1)
    tasks, xors = em.emit_tracked(["a", 1], "default", [[5], [5, 6]])  # two anchors, root 5 in both
    ((task, batch),) = sent.batches()
    msgid = dict(zip(batch[0][3][0::2], batch[0][3][1::2]))
    e1, e2 = xors
    assert e1 and e2 and e1 != e2
    assert msgid == {5: e1 ^ e2, 6: e2}


def test_due_after_the_interval(monkeypatch):
    clock = [100.0]
    # patch the module's view of time only (not time.monotonic for everyone)
    monkeypatch.setattr("instance.emitter.time", SimpleNamespace(monotonic=lambda: clock[0]))
    em, _ = make_emitter(batch_size=10)
    assert not em.due(1000.0, 0.25)  # nothing buffered
    em.emit(["a", 1])
    assert em.oldest == 100.0
    clock[0] = 100.125
    em.emit(["b", 2])
    assert em.oldest == 100.0  # the oldest tuple counts, not the newest
    assert not em.due(100.125, 0.25)
    assert em.due(100.25, 0.25)
    assert em.due(101.0, 0.25)
    em.flush()
    assert not em.due(200.0, 0.25)


def test_due_is_cleared_when_the_last_batch_fills():
    em, sent = make_emitter(batch_size=2)
    em.emit(["a", 1])
    em.emit(["b", 2])
    assert len(sent.frames) == 1
    assert em.oldest is None and not em.due(1e12, 0.005)


def test_arity_check_names_component_stream_and_fields():
    em, sent = make_emitter()
    with pytest.raises(SchemaError) as ei:
        em.emit(["only-one"])
    assert str(ei.value) == ("component 'word' stream 'default': emitted 1 values ['only-one'] for "
                             "fields ['word', 'n']")
    with pytest.raises(SchemaError) as ei:
        em.emit(["a", "b"], stream="errors")
    assert str(ei.value) == ("component 'word' stream 'errors': emitted 2 values ['a', 'b'] for "
                             "fields ['msg']")
    assert em.emit_count == 0 and em.buffers == {} and sent.frames == []


def test_arity_error_truncates_long_values():
    em, _ = make_emitter()
    with pytest.raises(SchemaError) as ei:
        em.emit(["x" * 500])
    msg = str(ei.value)
    assert msg.startswith("component 'word' stream 'default': emitted 1 values ['xxxx")
    assert msg.endswith(" for fields ['word', 'n']")
    assert len(msg) < 200


def test_undeclared_stream():
    em, _ = make_emitter()
    with pytest.raises(SchemaError) as ei:
        em.emit(["x"], stream="erors")
    assert str(ei.value) == ("component 'word' emitted on undeclared stream 'erors' "
                             "(streams: default, errors, pointed)")


def test_no_default_stream():
    sent = Sent()
    em = Emitter(1, "only_named", {"errors": StreamRouter("only_named", "errors", ["m"], False, [], [])},
                 SER, sent, 10)
    with pytest.raises(SchemaError, match="component 'only_named' emitted on undeclared stream 'default' "
                                          r"\(streams: errors\)"):
        em.emit(["x"])


def test_need_task_ids():
    em, _ = make_emitter()
    assert em.emit(["a", 1]) is None
    assert em.emit(["a", 1], need_task_ids=True) == [7]
    assert em.emit(["m"], stream="errors", need_task_ids=True) == [7, 8]
    ids = em.emit(["m"], stream="errors", need_task_ids=True)
    ids.append(99)  # the caller gets its own list, the chooser's is untouched
    assert em.emit(["m"], stream="errors", need_task_ids=True) == [7, 8]


def test_direct_emit():
    em, sent = make_emitter(batch_size=1)
    assert em.emit(["x"], stream="pointed", direct_task=8, need_task_ids=True) == [8]
    assert sent.batches() == [(8, [[1, "pointed", ["x"]]])]
    with pytest.raises(SchemaError, match="direct_task 3 does not subscribe to stream 'pointed'"):
        em.emit(["x"], stream="pointed", direct_task=3)
    with pytest.raises(SchemaError, match="which is not declared direct"):
        em.emit(["a", 1], direct_task=7)


def test_pickle_serializer_batches():
    ser = Serializer("pickle")
    sent = []
    em = Emitter(2, "word", {"default": StreamRouter("word", "default", ["v"], False,
                                                     [GlobalChooser([3])], [])}, ser, sent.append, 1)
    em.emit([{1, 2}])  # a set: only pickle can carry it
    assert ser.loads(sent[0][2]) == [2, "default", [[{1, 2}]], None]
    with pytest.raises(ValueError, match="unknown serializer 'json'"):
        Serializer("json")


# -- routers built from a plan --------------------------------------------------------------

class PlanSpout(Spout):
    outputs = [Stream(["word", "n"]), Stream(["x"], name="pointed", direct=True)]


class PlanBolt(Bolt):
    outputs = []


class PlanTopo(Topology):
    word = PlanSpout.spec(par=2)
    a_fields = PlanBolt.spec(par=3, inputs={word: Grouping.fields("word")})
    b_all = PlanBolt.spec(par=2, inputs={word: Grouping.ALL})
    c_local = PlanBolt.spec(par=4, inputs={word: Grouping.LOCAL_OR_SHUFFLE})
    d_direct = PlanBolt.spec(par=2, inputs={word["pointed"]: Grouping.DIRECT})


def test_build_routers_from_a_plan():
    tdef = PlanTopo.build("plan")
    packing = round_robin({c.name: c.par for c in tdef.components.values()}, 2)
    # a_fields 1-3, b_all 4-5, c_local 6-9, d_direct 10-11, word 12-13
    assert packing.component_tasks["word"] == [12, 13]
    assert packing.containers == {0: [1, 3, 5, 7, 9, 11, 13], 1: [2, 4, 6, 8, 10, 12]}
    plan = SimpleNamespace(topology=tdef, packing=packing, config={})
    ctx = TopologyContext("plan", 12, "word", 0, 1, {}, packing.component_tasks,
                          packing.task_component, tdef)
    routers = build_routers(plan, "word", ctx)
    assert set(routers) == {"default", "pointed"}
    d = routers["default"]
    assert d.fields == ["word", "n"] and not d.direct
    sent = Sent()
    em = Emitter(12, "word", routers, SER, sent, 1000)
    seen_local = set()
    for i in range(40):
        tasks = em.emit([f"k{i % 5}", i], need_task_ids=True)
        assert len(tasks) == 4
        assert tasks[0] in (1, 2, 3)  # fields
        assert tasks[1:3] == [4, 5]  # all
        assert tasks[3] in (6, 8)  # local-or-shuffle: only the tasks of container 1
        seen_local.add(tasks[3])
    assert seen_local == {6, 8}
    first = {}
    for i in range(40):
        first.setdefault(f"k{i % 5}", set()).add(em.emit([f"k{i % 5}", i], need_task_ids=True)[0])
    assert all(len(v) == 1 for v in first.values())  # same key, same fields task
    p = routers["pointed"]
    assert p.direct and p.direct_tasks == {10, 11}
    assert em.emit(["x"], stream="pointed", direct_task=11, need_task_ids=True) == [11]


def test_storm_fields_hash_from_the_plan_config_places_keys_as_storm_does():
    tdef = PlanTopo.build("plan")
    packing = round_robin({c.name: c.par for c in tdef.components.values()}, 2)
    plan = SimpleNamespace(topology=tdef, packing=packing, config={"topology.fields.grouping.hash": "storm"})
    ctx = TopologyContext("plan", 12, "word", 0, 1, {}, packing.component_tasks,
                          packing.task_component, tdef)
    fields = build_routers(plan, "word", ctx)["default"].choosers[0]
    # a_fields has tasks 1..3; Arrays.deepHashCode(["the"]) = 114832 (a JVM says so), 114832 % 3 = 1
    assert fields.choose(["the", 0]) == [2]


def test_topology_debug_logs_each_emit_and_passes_it_on():
    from instance.runtime import logged_emit
    calls, lines = [], []

    class Log:
        def info(self, fmt, *args):
            lines.append(fmt % args)

    emit = logged_emit(lambda *a, **k: calls.append((a, k)) or [4], Log())
    assert emit(["the", 1], stream="words", anchors=None) == [4]
    assert emit(["x"], "other") == [4]
    assert calls == [((["the", 1],), {"stream": "words", "anchors": None}), ((["x"], "other"), {})]
    assert lines == ["emitting: ['the', 1] stream='words' anchors=None", "emitting: ['x'] 'other'"]


def test_runs_group_a_roots_tuples_and_keep_untracked_ones_apart():
    em, sent = make_emitter(batch_size=100)
    em.emit(["u", 0])  # untracked first: the batch's runs start with an untracked run
    _, x1 = em.emit_rooted(["a", 1], "default", 11)
    _, x1b = em.emit_rooted(["b", 2], "default", 11)  # same root: joins the open run
    em.emit(["v", 3])
    _, x2 = em.emit_rooted(["c", 4], "default", 11)  # the run was closed: a new edge
    _, x3 = em.emit_tracked(["d", 5], "default", [[11]])  # a run of one, never extended
    _, x4 = em.emit_rooted(["e", 6], "default", 11)
    em.flush()
    (runs,) = sent.runs()
    assert runs[0::2] == [0, 1, 3, 4, 5, 6]
    ids = runs[1::2]
    assert ids[0] is None and ids[2] is None
    assert [ids[1][1], ids[3][1], ids[4][1], ids[5][1]] == [x1, x2, x3[0], x4]
    assert x1b == 0 and len({x1, x2, x3[0], x4}) == 4
    assert all(i[0] == 11 for i in (ids[1], ids[3], ids[4], ids[5]))
