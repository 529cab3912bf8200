"""The topology master's message checks (streammgr/tmschema.py): what each op may carry,
and that a container speaks only for itself and its own tasks. Table-driven, then
property tests: whatever a peer sends, the checker never raises and never lets a task
outside the sender's container through."""
from __future__ import annotations

import math

import msgpack
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from bittern import wire
from bittern.packing import round_robin
from bittern.wire import Op
from streammgr.tmschema import MAX_CTRL_BYTES, TEXT_KEEP, ControlSchema, clip

# tasks 1, 2 are "b", 3 is "s"; container 0 runs 1 and 3, container 1 runs 2
PACKING = round_robin({"s": 1, "b": 2}, 2)
CS = ControlSchema(PACKING)
OWN = {0: {1, 3}, 1: {2}}


def test_the_plan_is_what_the_tables_assume():
    assert PACKING.containers == {0: [1, 3], 1: [2]}
    assert PACKING.task_component == {1: "b", 2: "b", 3: "s"}


# -- what real senders send passes (shapes as instance/runtime.py and streammgr/stmgr.py build them)
REAL = [
    (0, {"op": Op.STMGR_REGISTER, "container": 0, "pid": 4242, "tasks": {
        "1": {"task": 1, "component": "b", "pid": 11, "ok": True, "container": 0, "sink": False, "placed": 0},
        "3": {"task": 3, "component": "s", "pid": 13, "ok": True, "container": 0, "sink": False, "placed": 0}}}),
    (1, {"op": Op.STMGR_REGISTER, "container": 1, "pid": 4243, "tasks": {},
         "probe": {"path": "/ckpt/two/_probe/c1", "nonce": "00ff00ff00ff00ff"}}),
    (1, {"op": Op.HEARTBEAT, "container": 1, "counters": {"local": 5, "peer": 2, "dropped": 0, "from_peers": 1,
                                                         "malformed": 0, "denied": 0, "fenced": 0},
         "queued": 0, "proc": {"__cpu-percent": 1.5, "__rss-bytes": 30 << 20, "__threads": 4},
         "backpressure": False, "backpressure_secs": 0.0, "backpressure_secs_by_task": {"2": 0.0},
         "queued_by_task": {"2": 0}}),
    (0, {"op": Op.REGISTER, "container": 0, "task": 3, "component": "s", "pid": 13, "ok": True, "sink": False,
         "placed": 0}),
    (0, {"op": Op.REGISTER, "container": 0, "task": 1, "component": "b", "pid": 11, "ok": False,
         "error": "ValueError: no", "traceback": "Traceback ...\nValueError: no\n"}),
    (1, {"op": Op.METRICS, "container": 1, "task": 2, "seq": 3, "component": "b", "pid": 12, "metrics": {
        "__execute-count": 10, "__ack-count": 10, "__emit-count": 0, "__cpu-percent": 0.5,
        "__execute-latency-p50": 0.01, "__input-watermark": None, "__output-watermark": math.inf,
        "__watermark-lag": None, "__exhausted": 0, "user": {"seen": 10, "parity": {"even": 5, "odd": 5},
                                                           "mean": None, "label": "x"}}}),
    (1, {"op": Op.METRICS, "container": 1, "task": 2, "seq": -1, "metrics": {}}),
    (0, {"op": Op.ERROR, "container": 0, "task": 1, "component": "b", "where": "process",
         "error": "ValueError: number 0", "traceback": "Traceback ...", "fatal": False, "time": 1.7e9}),
    (0, {"op": Op.CKPT_SAVED, "container": 0, "task": 3, "id": 4, "epoch": 1, "bytes": 100, "align_ms": 0.25}),
    (0, {"op": Op.RESTORED, "container": 0, "task": 1, "epoch": 2}),
    (1, {"op": Op.CKPT_COMMITTED, "container": 1, "task": 2, "id": 4, "epoch": 2}),
]


@pytest.mark.parametrize("sender,msg", REAL, ids=[f"{m['op']}-{i}" for i, (_, m) in enumerate(REAL)])
def test_what_the_stream_managers_send_passes(sender, msg):
    out, why = CS.stmgr(msg, sender)
    assert why is None, why
    assert out["op"] == msg["op"] and out["container"] == sender


def test_normalized_task_keys_components_and_texts():
    out, _ = CS.stmgr(REAL[0][1], 0)
    assert sorted(out["tasks"]) == [1, 3] and out["tasks"][3]["task"] == 3
    # no component given: the task's own filled in; unknown fields left out
    out, why = CS.stmgr({"op": Op.ERROR, "container": 0, "task": 3, "error": "x" * (TEXT_KEEP + 10),
                         "junk": [1] * 100}, 0)
    assert why is None and out["component"] == "s" and "junk" not in out
    assert out["error"] == "x" * TEXT_KEEP + "... (10 more characters cut)"
    out, _ = CS.stmgr({"op": Op.STMGR_REGISTER, "container": 0, "pid": 1, "tasks": {3: {"ok": True}}}, 0)
    assert out["tasks"] == {3: {"task": 3, "ok": True, "component": "s"}}
    # per-task keys of a heartbeat stay strings (the metrics document reads them so)
    out, _ = CS.stmgr({"op": Op.HEARTBEAT, "container": 0, "queued_by_task": {1: 5, "3": 0}}, 0)
    assert out["queued_by_task"] == {"1": 5, "3": 0}
    assert clip("abc", 2) == "ab... (1 more characters cut)" and clip(None) is None


# -- what is refused: (sender, message, the reason's words) ---------------------------------------
BAD = [
    # the findings of issue 18
    (0, [1, 2, 3], "a message is a map, not [1, 2, 3]"),
    (0, "hello", "a message is a map"),
    (0, {"op": Op.REGISTER, "container": 0, "ok": True}, "register: task: missing"),
    (0, {"op": Op.REGISTER, "container": 0, "task": "x", "ok": True}, "register: task: 'x' is not a task id"),
    (0, {"op": Op.HEARTBEAT, "container": [0]}, "heartbeat: [0] is not the sender's container 0"),
    (0, {"op": Op.STMGR_REGISTER, "container": 0, "pid": 1, "tasks": {"2": {"ok": False}}},
     "stmgr_register: tasks: task 2 is not one of container 0's tasks (1, 3)"),
    (1, {"op": Op.STMGR_REGISTER, "container": 1, "pid": 1, "tasks": {"3": {"ok": False}}},
     "task 3 is not one of container 1's tasks (2)"),
    (0, {"op": Op.ERROR, "container": 0, "task": 1, "component": "bogus-17", "error": "x"},
     "error: component: 'bogus-17' is not the component of task 1 ('b')"),
    # a container speaks only for itself
    (0, {"op": Op.HEARTBEAT, "container": 1}, "heartbeat: 1 is not the sender's container 0"),
    (7, {"op": Op.HEARTBEAT, "container": 7}, "heartbeat: container 7 is not one of this topology's"),
    (1, {"op": Op.REGISTER, "container": 1, "task": 1, "ok": True}, "task 1 is not one of container 1's tasks"),
    (1, {"op": Op.METRICS, "container": 1, "task": 3, "metrics": {}}, "metrics: task: task 3 is not one of"),
    (0, {"op": Op.ERROR, "container": 0, "task": 2, "error": "x"}, "error: task: task 2 is not one of"),
    (0, {"op": Op.ERROR, "container": 0, "task": 1, "component": "__tmaster"}, "is not the component of task 1"),
    (0, {"op": Op.CKPT_SAVED, "container": 0, "task": 2, "id": 1, "epoch": 1}, "ckpt_saved: task: task 2"),
    (1, {"op": Op.RESTORED, "container": 1, "task": 1, "epoch": 1}, "restored: task: task 1"),
    (1, {"op": Op.CKPT_COMMITTED, "container": 1, "task": 3, "id": 1}, "ckpt_committed: task: task 3"),
    (1, {"op": Op.HEARTBEAT, "container": 1, "queued_by_task": {"1": 5}}, "queued_by_task: task 1 is not one of"),
    (0, {"op": Op.STMGR_REGISTER, "container": 0, "pid": 1, "tasks": {"1": {"ok": True, "task": 3}}},
     "tasks: [1]: task: 3 is not its key 1"),
    (0, {"op": Op.STMGR_REGISTER, "container": 0, "pid": 1, "tasks": {"1": {"ok": True}, 1: {"ok": True}}},
     "task 1 twice"),
    (0, {"op": Op.STMGR_REGISTER, "container": 0, "pid": 1, "tasks": {"3": {"ok": True, "component": "b"}}},
     "tasks: [3]: component: 'b' is not the component of task 3 ('s')"),
    (0, {"op": Op.STMGR_REGISTER, "container": 0, "pid": 1, "tasks": {"1": {"ok": True, "container": 1}}},
     "tasks: [1]: container: 1 is not the sender's container 0"),
    # types, ranges, sizes
    (0, {"op": "nonsense", "container": 0}, "op 'nonsense' is not one a stream manager sends"),
    (0, {"op": Op.ACTIVATE, "container": 0}, "op 'activate' is not one a stream manager sends"),
    (0, {"container": 0}, "op None is not one"),
    (0, {"op": Op.REGISTER, "container": 0, "task": True, "ok": True}, "task: True is not a task id"),
    (0, {"op": Op.REGISTER, "container": 0, "task": 1.0, "ok": True}, "task: 1.0 is not a task id"),
    (0, {"op": Op.REGISTER, "container": 0, "task": 1}, "register: ok: missing"),
    (0, {"op": Op.REGISTER, "container": 0, "task": 1, "ok": 1}, "register: ok: 1 is not true or false"),
    (0, {"op": Op.REGISTER, "container": True, "task": 1, "ok": True}, "True is not the sender's container 0"),
    (0, {"op": Op.STMGR_REGISTER, "container": 0, "pid": -1}, "stmgr_register: pid: -1 is not an int from 0"),
    (0, {"op": Op.STMGR_REGISTER, "container": 0, "pid": 1, "tasks": {"01": {"ok": True}}}, "'01' is not a task id"),
    (0, {"op": Op.STMGR_REGISTER, "container": 0, "pid": 1, "tasks": [1, 3]}, "tasks: [1, 3] is not a map"),
    (0, {"op": Op.STMGR_REGISTER, "container": 0, "pid": 1, "probe": {"path": b"\x00"}}, "probe: path:"),
    (0, {"op": Op.HEARTBEAT, "container": 0, "counters": {"dropped": "many"}}, "counters: ['dropped']: 'many'"),
    (0, {"op": Op.HEARTBEAT, "container": 0, "counters": {str(i): 0 for i in range(65)}},
     "a map of 65 entries (at most 64)"),
    (0, {"op": Op.HEARTBEAT, "container": 0, "backpressure_secs": math.nan}, "is not a finite number"),
    (0, {"op": Op.HEARTBEAT, "container": 0, "queued": -5}, "queued: -5 is not an int from 0"),
    (0, {"op": Op.METRICS, "container": 0, "task": 1, "metrics": {"__emit-count": "7"}},
     "metrics: __emit-count: '7' is not a number"),
    (0, {"op": Op.METRICS, "container": 0, "task": 1, "metrics": {"__cpu-percent": None}},
     "__cpu-percent: None is not a number"),
    (0, {"op": Op.METRICS, "container": 0, "task": 1, "metrics": {"user": {"x": b"raw"}}}, "a bytes is not"),
    (0, {"op": Op.METRICS, "container": 0, "task": 1, "metrics": {"user": {"x": "y" * 300}}},
     "a string of 300 characters"),
    (0, {"op": Op.METRICS, "container": 0, "task": 1, "metrics": {"user": {"x": [[[[1]]]]}}}, "nested too deep"),
    (0, {"op": Op.METRICS, "container": 0, "task": 1, "metrics": {"user": {"x": list(range(5000))}}},
     "more than 4096 values"),
    (0, {"op": Op.METRICS, "container": 0, "task": 1, "metrics": {"user": {str(i): 1 for i in range(257)}}},
     "a map of 257 entries (at most 256)"),
    (0, {"op": Op.METRICS, "container": 0, "task": 1, "metrics": {"user": {"a": [0] * 2500, "b": [0] * 2500}}},
     "more than 4096 values"),  # one budget for all of them
    (0, {"op": Op.METRICS, "container": 0, "task": 1, "seq": -2}, "seq: -2 is not an int from -1"),
    (0, {"op": Op.ERROR, "container": 0, "task": 1, "error": 5}, "error: error: 5 is not a string"),
    (0, {"op": Op.ERROR, "container": 0, "task": 1, "where": "w" * 300}, "where: 'wwwww"),
    (0, {"op": Op.ERROR, "container": 0, "task": 1, "time": math.inf}, "time: inf is not a finite number"),
    (0, {"op": Op.CKPT_SAVED, "container": 0, "task": 1, "id": "1", "epoch": 1}, "ckpt_saved: id: '1'"),
    (0, {"op": Op.CKPT_SAVED, "container": 0, "task": 1, "id": 1}, "ckpt_saved: epoch: missing"),
    (0, {"op": Op.CKPT_SAVED, "container": 0, "task": 1, "id": 1, "epoch": 1, "bytes": 1.5}, "bytes: 1.5"),
    (0, {"op": Op.CKPT_SAVED, "container": 0, "task": 1, "id": 2 ** 70, "epoch": 1}, "is not an int from 0"),
]


@pytest.mark.parametrize("sender,msg,why", BAD, ids=[f"{i}" for i in range(len(BAD))])
def test_refused_with_a_reason_naming_op_and_field(sender, msg, why):
    out, reason = CS.stmgr(msg, sender)
    assert out is None and why in reason, reason
    assert "\n" not in reason and len(reason) < 300


REQUESTS = [
    ({"op": Op.STATUS, "req": 1}, None),
    ({"op": Op.ACTIVATE, "req": 2}, None),
    ({"op": Op.DEACTIVATE, "req": "x"}, None),
    ({"op": Op.REPORT}, None),
    ({"op": Op.GET_METRICS, "req": 3, "window": "10m"}, None),
    ({"op": Op.GET_METRICS, "req": 3, "window": None}, None),
    ({"op": Op.ERRORS, "req": 4, "component": "b", "limit": 5}, None),
    ({"op": Op.ERRORS, "req": 4, "component": None, "limit": 0}, None),
    # the findings
    ({"op": Op.ERRORS, "req": 5, "limit": "abc"}, "errors: limit: 'abc' is not an int from 0 to 1000000"),
    ({"op": Op.GET_METRICS, "req": 6, "window": [1, 2]}, "get_metrics: window: [1, 2] is not one of interval"),
    ({"op": Op.GET_METRICS, "req": 6, "window": "5m"}, "get_metrics: window: '5m' is not one of"),
    ([Op.STATUS], "a request is a map, not ['status']"),
    ({"op": "stmgr_register", "req": 7}, "unknown request 'stmgr_register'"),
    ({"op": Op.ERRORS, "limit": -1}, "limit: -1 is not an int from 0"),
    ({"op": Op.ERRORS, "component": {"a": 1}}, "component: {'a': 1} is not a string"),
    ({"op": Op.STATUS, "req": [1]}, "status: [1] is not an int or a string"),
]


@pytest.mark.parametrize("msg,why", REQUESTS, ids=[str(i) for i in range(len(REQUESTS))])
def test_requests(msg, why):
    out, reason = CS.request(msg)
    if why is None:
        assert reason is None and out["op"] == msg["op"]
        assert out.get("req") == msg.get("req")
    else:
        assert out is None and why in reason, reason


def test_reply_to_only_a_req_that_can_be_echoed():
    assert CS.reply_to({"op": "x", "req": 9}) == 9
    assert CS.reply_to({"op": "x", "req": "r1"}) == "r1"
    assert CS.reply_to({"op": "x", "req": [9]}) is None
    assert CS.reply_to({"op": "x"}) is None
    assert CS.reply_to([1]) is None
    assert MAX_CTRL_BYTES >= 1 << 20


# -- properties -----------------------------------------------------------------------------------
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-2 ** 63, max_value=2 ** 64 - 1)
           | st.floats() | st.text(max_size=20) | st.binary(max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8) | st.integers(-3, 5), inner, max_size=4),
                      max_leaves=20)
TASKISH = st.sampled_from([1, 2, 3, 4, 0, -1, "1", "2", "3", "x", None, True, 1.0, [1]]) | VALUES
FIELDS = ["task", "ok", "component", "pid", "container", "sink", "placed", "error", "traceback", "metrics",
          "seq", "id", "epoch", "bytes", "align_ms", "where", "fatal", "time", "counters", "queued", "proc",
          "backpressure", "backpressure_secs", "backpressure_secs_by_task", "queued_by_task", "tasks", "probe"]
STMGR_OPS = [Op.STMGR_REGISTER, Op.HEARTBEAT, Op.REGISTER, Op.METRICS, Op.ERROR, Op.CKPT_SAVED,
             Op.RESTORED, Op.CKPT_COMMITTED]


KEYISH = st.sampled_from([1, 2, 3, 4, 0, "1", "2", "3", "03", "x"]) | st.text(max_size=4) | st.integers(-2, 9)


@st.composite
def near_valid(draw):
    """A real message (REAL) with some fields replaced by plausible or arbitrary values,
    some removed, maybe from another sender: most reach the deep checks, many pass."""
    sender, msg = draw(st.sampled_from(REAL))
    msg = dict(msg)
    sender = draw(st.sampled_from([sender] * 4 + [0, 1, 2, -1]))
    for name in draw(st.lists(st.sampled_from(FIELDS + ["container"]), max_size=3, unique=True)):
        how = draw(st.integers(0, 3))
        if how == 0:
            msg.pop(name, None)
        elif name == "task" or name == "container":
            msg[name] = draw(TASKISH)
        elif name in ("tasks", "backpressure_secs_by_task", "queued_by_task"):
            msg[name] = draw(st.dictionaries(KEYISH, st.fixed_dictionaries(
                {"ok": st.booleans()}, optional={f: TASKISH for f in ("task", "component", "container", "pid")})
                | VALUES, max_size=3))
        else:
            msg[name] = draw(VALUES)
    return sender, msg


def named_tasks(msg):
    """Every task an accepted message names."""
    out = []
    if "task" in msg:
        out.append(msg["task"])
    for key in ("tasks", "backpressure_secs_by_task", "queued_by_task"):
        for k, v in (msg.get(key) or {}).items():
            out.append(int(k))
            if isinstance(v, dict) and "task" in v:
                out.append(v["task"])
    return out


def assert_speaks_for_itself(sender, out):
    assert out["container"] == sender and type(sender) is int
    for t in named_tasks(out):
        assert type(t) is int and t in OWN[sender], (t, sender, out)
    if out["op"] in (Op.ERROR, Op.REGISTER):
        assert out["component"] == PACKING.task_component[out["task"]]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([0, 1, 2, -1]), VALUES)
def test_arbitrary_values_never_raise_nor_pass(sender, value):
    # as it arrives: packed and decoded the way the topology master decodes it
    msg = wire.decode_ctrl(msgpack.packb(value, use_bin_type=True))
    out, why = CS.stmgr(msg, sender)
    assert (out is None) != (why is None)
    if out is not None:
        assert_speaks_for_itself(sender, out)
    rout, rwhy = CS.request(msg)
    assert (rout is None) != (rwhy is None)
    CS.reply_to(msg)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_valid())
def test_fuzzed_messages_never_raise_nor_pass_a_task_outside_the_container(case):
    sender, msg = case
    msg = wire.decode_ctrl(msgpack.packb(msg, use_bin_type=True))
    out, why = CS.stmgr(msg, sender)
    event("accepted" if out is not None else "refused")
    assert (out is None) != (why is None)
    if out is None:
        assert why.startswith((f"{msg['op']}: ", "a message is")) and "\n" not in why
    else:
        assert_speaks_for_itself(sender, out)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([Op.STATUS, Op.ACTIVATE, Op.DEACTIVATE, Op.REPORT, Op.GET_METRICS, Op.ERRORS, "x"]),
       st.dictionaries(st.sampled_from(["req", "window", "component", "limit", "other"]), VALUES, max_size=4))
def test_fuzzed_requests_never_raise(op, fields):
    msg = wire.decode_ctrl(msgpack.packb(dict(fields, op=op), use_bin_type=True))
    out, why = CS.request(msg)
    assert (out is None) != (why is None)
    if out is not None:
        assert set(out) <= {"op", "req", "window", "component", "limit"}
        assert out.get("limit") is None or 0 <= out["limit"] <= 10 ** 6
