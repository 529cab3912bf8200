"""heronpy task hook dispatch (bittern/compat/heron_hooks.py): the calls Heron's instance
makes at each point, with its info objects and its latency units, and the wrappers the
heronpy adapters put in front of emit/ack/fail/process when a hook was added. (heronpy
itself is not installed here: the info types are the same-shaped namedtuples; the
end-to-end tests in test_heron_examples.py use the real heronpy.)"""
from __future__ import annotations

import pytest

from bittern.api.tuple import Tuple
from bittern.compat import heron_hooks as hh


class Recorder:
    """A hook with heronpy's ITaskHook methods, recording every call."""

    def __init__(self):
        self.calls = []

    def prepare(self, conf, context):
        self.calls.append(("prepare", conf, context))

    def clean_up(self):
        self.calls.append(("clean_up",))

    def emit(self, info):
        self.calls.append(("emit", info))

    def spout_ack(self, info):
        self.calls.append(("spout_ack", info))

    def spout_fail(self, info):
        self.calls.append(("spout_fail", info))

    def bolt_execute(self, info):
        self.calls.append(("bolt_execute", info))

    def bolt_ack(self, info):
        self.calls.append(("bolt_ack", info))

    def bolt_fail(self, info):
        self.calls.append(("bolt_fail", info))


class Clock:
    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def hooks(n=1):
    th = hh.TaskHooks(7, "count")
    recs = [Recorder() for _ in range(n)]
    for r in recs:
        th.add(r)
    return th, recs


def test_info_objects_carry_heron_fields_and_milliseconds():
    th, (a, b) = hooks(2)
    th.prepare({"k": 1}, "ctx")
    th.emit(["w", 1], "words")
    th.spout_ack("id-1", 2_500_000.0)
    th.spout_fail("id-2", 1_000_000_000.0)
    tup = Tuple(None, "src", "default", 3, ["w"])
    th.bolt_execute(tup, 250_000.0)
    th.bolt_ack(tup, 3_000_000.0)
    th.bolt_fail(tup, 0.0)
    th.clean_up()
    assert a.calls == b.calls  # every hook, in the order added
    calls = a.calls
    assert [c[0] for c in calls] == ["prepare", "emit", "spout_ack", "spout_fail", "bolt_execute", "bolt_ack",
                                     "bolt_fail", "clean_up"]
    assert calls[0] == ("prepare", {"k": 1}, "ctx")
    assert calls[1][1]._asdict() == {"values": ["w", 1], "stream_id": "words", "task_id": 7, "out_tasks": None}
    assert calls[2][1]._asdict() == {"message_id": "id-1", "spout_task_id": 7, "complete_latency_ms": 2.5}
    assert calls[3][1]._asdict() == {"message_id": "id-2", "spout_task_id": 7, "fail_latency_ms": 1000.0}
    assert calls[4][1]._asdict() == {"heron_tuple": tup, "executing_task_id": 7, "execute_latency_ms": 0.25}
    assert calls[5][1]._asdict() == {"heron_tuple": tup, "acking_task_id": 7, "process_latency_ms": 3.0}
    assert calls[6][1]._asdict() == {"heron_tuple": tup, "failing_task_id": 7, "fail_latency_ms": 0.0}
    assert type(calls[1][1]).__name__ == "EmitInfo" and type(calls[5][1]).__name__ == "BoltAckInfo"


def test_add_refuses_what_is_not_a_hook():
    th = hh.TaskHooks(1, "count")
    assert not th
    with pytest.raises(TypeError) as e:
        th.add(object())
    assert str(e.value) == ("component 'count': add_task_hook() takes an ITaskHook (heronpy.api.task_hook), "
                            "got object")
    th.add(Recorder())
    assert th


def test_spout_emit_stamps_ids_only_when_tracked_and_calls_the_hook_after_the_emit():
    th, (rec,) = hooks()
    sent = []

    def engine_emit(*args):
        sent.append(args)
        return [4, 5]

    emit = hh.spout_emit(engine_emit, th, track=True, clock=Clock(10.0))
    assert emit(["a"], tup_id="m1", stream="s", direct_task=None, need_task_ids=True) == [4, 5]
    assert emit(["b"]) == [4, 5]  # no id: nothing to time (and no clock read)
    (values, tid, stream, direct, need), second = sent
    assert (values, stream, direct, need) == (["a"], "s", None, True)
    assert isinstance(tid, hh.Sent) and (tid.tup_id, tid.at) == ("m1", 10.0) and repr(tid) == "'m1'"
    assert second == (["b"], None, "default", None, False)
    assert [(c[0], c[1].values, c[1].stream_id) for c in rec.calls] == [("emit", ["a"], "s"),
                                                                         ("emit", ["b"], "default")]

    plain = []
    hh.spout_emit(lambda *a: plain.append(a), th, track=False)(["c"], "m2")
    assert plain == [(["c"], "m2", "default", None, False)]  # at most once / exactly once: the id as given

    def refused(*_a):
        raise ValueError("schema")
    with pytest.raises(ValueError):
        hh.spout_emit(refused, th, track=True, clock=Clock(0.0))(["x"], "m3")
    assert len(rec.calls) == 3  # an emit that raised is not reported


def test_spout_ack_and_fail_give_the_user_its_own_id_then_the_hook_the_latency():
    th, (rec,) = hooks()
    seen = []
    ack = hh.spout_outcome(lambda tid: seen.append(("ack", tid)), th.spout_ack, clock=Clock(12.5))
    fail = hh.spout_outcome(lambda tid: seen.append(("fail", tid)), th.spout_fail, clock=Clock(99.0))
    ack(hh.Sent("m1", 10.0))
    fail("m2")  # an id that was never stamped (at most once: acked at once, as Heron's immediate acks)
    assert seen == [("ack", "m1"), ("fail", "m2")]  # the user's first, with its own id
    (k1, i1), (k2, i2) = rec.calls
    assert (k1, i1.message_id, i1.complete_latency_ms) == ("spout_ack", "m1", 2500.0)
    assert (k2, i2.message_id, i2.fail_latency_ms) == ("spout_fail", "m2", 0.0)


def test_bolt_execute_ack_and_fail_latencies_from_when_the_tuple_was_handed_over():
    th, (rec,) = hooks()
    times = hh.ReceiptTimes()
    engine = []
    # clock reads: process start, (ack inside) , process end; then next process start, end; later ack
    clock = Clock(1.0, 1.25, 1.5, 2.0, 2.125, 3.0)
    bolt = {}

    def user_process(tup):
        if tup.values == ["now"]:
            bolt["ack"](tup)  # acked inside process

    process = hh.bolt_process(user_process, th, times, clock=clock)
    bolt["ack"] = hh.bolt_outcome(lambda t: engine.append(("ack", t.values)), th.bolt_ack, times, clock=clock)
    fail = hh.bolt_outcome(lambda t: engine.append(("fail", t.values)), th.bolt_fail, times, clock=clock)
    now, later = Tuple(None, "s", "default", 1, ["now"]), Tuple(None, "s", "default", 1, ["later"])
    process(now)
    process(later)  # held past process: failed later
    assert times.held == {id(later): (later, 2.0)} and times.current is None
    fail(later)
    assert engine == [("ack", ["now"]), ("fail", ["later"])]  # the instance's ack/fail first
    got = [(c[0], c[1].heron_tuple.values, getattr(c[1], c[1]._fields[2])) for c in rec.calls]
    assert got == [("bolt_ack", ["now"], 250.0), ("bolt_execute", ["now"], 500.0),
                   ("bolt_execute", ["later"], 125.0), ("bolt_fail", ["later"], 1000.0)]
    assert times.held == {}


def test_a_process_that_raises_is_not_reported_and_not_held():
    th, (rec,) = hooks()
    times = hh.ReceiptTimes()

    def boom(tup):
        raise RuntimeError("user bug")
    with pytest.raises(RuntimeError):
        hh.bolt_process(boom, th, times, clock=Clock(1.0))(Tuple(None, "s", "default", 1, ["x"]))
    assert rec.calls == [] and times.held == {} and times.current is None


def test_receipt_times_are_bounded_and_unknown_tuples_report_zero():
    th, (rec,) = hooks()
    times = hh.ReceiptTimes(limit=3)
    tups = [Tuple(None, "s", "default", 1, [i]) for i in range(5)]
    for i, t in enumerate(tups):  # a bolt that never acks (at most once) holds none past the limit
        times.end(times.begin(t, float(i)))
    assert [v[0].values[0] for v in times.held.values()] == [2, 3, 4]  # the oldest forgotten first
    ack = hh.bolt_outcome(lambda t: None, th.bolt_ack, times, clock=Clock(10.0, 10.0, 10.0))
    ack(tups[0])  # forgotten
    ack(tups[4])
    ack(tups[4])  # a second ack of the same tuple
    assert [c[1].process_latency_ms for c in rec.calls] == [0.0, 6000.0, 0.0]


def test_bolt_emit_passes_heronpy_arguments_through():
    th, (rec,) = hooks()
    sent = []
    emit = hh.bolt_emit(lambda *a: sent.append(a), th)
    anchor = Tuple(None, "s", "default", 1, ["w"])
    emit(["w", 2], "counts", [anchor], None, False)
    emit(["v"])
    assert sent == [(["w", 2], "counts", [anchor], None, False), (["v"], "default", None, None, False)]
    assert [(c[1].values, c[1].stream_id, c[1].task_id) for c in rec.calls] == [(["w", 2], "counts", 7),
                                                                                (["v"], "default", 7)]


class NamedHook(Recorder):
    pass


def test_auto_task_hooks_are_built_from_class_names():
    resolved = []

    def resolve(path):
        resolved.append(path)
        return NamedHook
    built = hh.auto_hooks(["pkg.misc.NamedHook", NamedHook], "count", resolve)
    assert resolved == ["pkg.misc:NamedHook"] and [type(h) for h in built] == [NamedHook, NamedHook]
    assert [type(h) for h in hh.auto_hooks("pkg.NamedHook", "count", resolve)] == [NamedHook]
    with pytest.raises(TypeError) as e:
        hh.auto_hooks(3, "count", resolve)
    assert str(e.value) == ("component 'count': topology.auto.task.hooks must be a list of class names "
                            "(module.Class), got int")
    with pytest.raises(TypeError, match="'NamedHook' is not module.Class"):
        hh.auto_hooks(["NamedHook"], "count", resolve)
