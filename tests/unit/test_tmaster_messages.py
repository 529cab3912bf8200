"""The topology master fed what an attacker on its port would send (issue 18, hole 1):
every message goes through ``_dispatch`` as the socket hands it over (identity, kind,
msgpack). A bad one is dropped and counted in ``counters["malformed"]``, never raises,
and changes nothing the topology master reports; memory stays bounded."""
from __future__ import annotations

import copy
import logging
import tracemalloc

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bittern.wire import CTRL, Op
from streammgr.tmaster import ERRORS_PER_COMPONENT, RUNNING, SYSTEM_ERROR_COMPONENTS
from streammgr.tmschema import MAX_CTRL_BYTES, TEXT_KEEP

from .test_tmaster_checkpoints import make_tm as make_tm  # noqa: F401,F811 - the fixture tm_of builds on
from .test_tmschema import VALUES, near_valid

MODES = ["ATLEAST_ONCE", "EFFECTIVELY_ONCE"]


@pytest.fixture
def tm_of(make_tm):  # noqa: F811 - the fixture, by name
    """A topology master of the two-container topology, in either mode."""
    return lambda mode="ATLEAST_ONCE": make_tm(mode=mode)


def frames(identity, value):
    """A message as the socket hands it over."""
    return [identity, CTRL, msgpack.packb(value, use_bin_type=True)]


def running(tm):
    pk = tm.plan.packing
    for c in sorted(pk.containers):
        tasks = {str(t): {"ok": True, "pid": 1000 + t, "component": pk.task_component[t], "container": c}
                 for t in pk.containers[c]}
        tm._dispatch(frames(b"s%d" % c, {"op": Op.STMGR_REGISTER, "container": c, "pid": 100 + c, "tasks": tasks}))
    assert tm.phase == RUNNING and tm.counters == {"malformed": 0, "denied": 0}
    tm._dispatch(frames(b"s0", {"op": Op.METRICS, "container": 0, "task": 1, "seq": 1, "pid": 1001,
                                "metrics": {"__execute-count": 5, "user": {"seen": 5}}}))
    tm._dispatch(frames(b"s1", {"op": Op.ERROR, "container": 1, "task": 2, "error": "ValueError: x",
                                "where": "process"}))
    assert tm.counters["malformed"] == 0 and len(tm.errors) == 1
    tm.sent.clear()
    return tm


def snapshot(tm):
    """What the topology master reports and acts on."""
    return copy.deepcopy({"phase": tm.phase, "active": tm.active, "error": tm.error, "tasks": tm.tasks,
                          "errors": tm.errors, "stmgrs": tm.stmgrs, "metrics": tm.metrics.latest,
                          "status": tm.state.get("status/two"), "record": tm.state.topology("two")})


Q = b"q0123456789ab"
# (frames, a reply is due): every finding of issue 18, and more of the kind
FINDINGS = [
    (frames(b"s0", [1, 2, 3]), False),  # not a map
    (frames(Q, [Op.STATUS]), False),
    (frames(b"s0", "deactivate"), False),
    (frames(b"s0", {"op": Op.REGISTER, "container": 0, "ok": True, "pid": 5}), False),  # REGISTER without a task
    (frames(b"s0", {"op": Op.REGISTER, "container": 0, "task": "x", "ok": True}), False),  # task "x"
    (frames(b"s0", {"op": Op.HEARTBEAT, "container": [0], "counters": {"dropped": 9}}), False),  # list container
    (frames(Q, {"op": Op.ERRORS, "req": 7, "limit": "abc"}), True),
    (frames(Q, {"op": Op.GET_METRICS, "req": 8, "window": [1, 2]}), True),
    (frames(Q, {"op": Op.GET_METRICS, "req": 9, "window": "5m"}), True),
    # one message failed the topology: a task of another container, as not started
    (frames(b"s0", {"op": Op.STMGR_REGISTER, "container": 0, "pid": 1, "tasks": {"2": {"ok": False}}}), False),
    (frames(b"s1", {"op": Op.STMGR_REGISTER, "container": 1, "pid": 1, "tasks": {"3": {"ok": False}}}), False),
    (frames(b"s0", {"op": Op.REGISTER, "container": 0, "task": 2, "ok": False, "error": "forged"}), False),
    (frames(b"s1", {"op": Op.ERROR, "container": 1, "task": 1, "error": "forged", "fatal": True}), False),
    (frames(b"s1", {"op": Op.METRICS, "container": 1, "task": 3, "metrics": {"__emit-count": 10 ** 9}}), False),
    (frames(b"s0", {"op": Op.ERROR, "container": 0, "task": 1, "component": "bogus", "error": "x"}), False),
    (frames(b"s0", {"op": Op.ERROR, "container": 0, "task": 1, "component": "__tmaster", "error": "x"}), False),
    (frames(b"s0", {"op": Op.METRICS, "container": 0, "task": 1, "metrics": {"__emit-count": "many"}}), False),
    (frames(b"s0", {"op": Op.HEARTBEAT, "container": 1, "counters": {"dropped": 9}}), False),  # not its container
    (frames(b"s7", {"op": Op.HEARTBEAT, "container": 7}), False),  # not a container of the plan
    (frames(b"junk", {"op": Op.HEARTBEAT, "container": 0}), False),  # not a stream manager's identity
    (frames(b"c0", {"op": Op.HEARTBEAT, "container": 0}), False),  # a peer control identity
    (frames(b"s0", {"op": Op.ACTIVATE, "container": 0}), False),  # a client's op from a stream manager
    (frames(Q, {"op": Op.STMGR_REGISTER, "req": 10, "container": 0, "pid": 1}), True),  # and the reverse
    (frames(Q, {"op": Op.STATUS, "req": [1]}), False),  # a req that cannot be echoed
    (frames(b"s0", {"op": Op.CKPT_SAVED, "container": 0, "task": 1, "id": "1", "epoch": 1}), False),
    ([b"s0", CTRL, b"\xc1"], False),  # undecodable
    ([b"s0", CTRL, b"\x91" * 100000], False),  # nested beyond what the decoder takes
    ([b"s0", b"D", b"x"], False),  # not a control message
    ([b"s0"], False),
    ([b"s0", CTRL, msgpack.packb({"op": Op.HEARTBEAT, "container": 0}), b"more"], False),
    ([b"s0", CTRL, b"\xc4" + b"\x00" * (MAX_CTRL_BYTES + 1)], False),  # too big
]


@pytest.mark.parametrize("mode", MODES)
def test_every_finding_is_dropped_counted_and_changes_nothing(tm_of, mode):
    tm = running(tm_of(mode))
    before = snapshot(tm)
    for i, (fr, reply) in enumerate(FINDINGS, 1):
        tm._dispatch(fr)
        assert tm.counters["malformed"] == i, fr[:2]
        assert snapshot(tm) == before, fr[:2]
        replies = [f for ident, op, f in tm.sent if ident == Q and op == "reply"]
        assert len(replies) == (1 if reply else 0), replies
        if reply:
            assert replies[0]["req"] == msgpack.unpackb(fr[2])["req"] and "malformed request" in replies[0]["error"]
        assert all(op == "reply" for _, op, _ in tm.sent), tm.sent
        tm.sent.clear()
    assert tm.counters == {"malformed": len(FINDINGS), "denied": 0}
    # what users see of it
    doc = tm.metrics_doc()
    assert doc["tmaster"]["malformed"] == len(FINDINGS) and doc["tmaster"]["denied"] == 0
    assert doc["phase"] == RUNNING and doc["active"] and doc["errors"] == 1
    rep = tm.metrics_reply()
    assert (rep["tmaster_malformed"], rep["tmaster_denied"]) == (len(FINDINGS), 0)


def test_the_stream_managers_counts_reach_the_documents(tm_of):
    tm = running(tm_of())
    for c, (mal, den) in {0: (3, 1), 1: (0, 5)}.items():
        tm._dispatch(frames(b"s%d" % c, {"op": Op.HEARTBEAT, "container": c, "counters": {
            "local": 1, "dropped": 2, "malformed": mal, "denied": den}}))
    doc = tm.metrics_doc()
    assert {c: (s["malformed"], s["denied"], s["dropped"]) for c, s in doc["stmgrs"].items()} == \
        {"0": (3, 1, 2), "1": (0, 5, 2)}
    rep = tm.metrics_reply()
    assert (rep["stmgr_malformed"], rep["stmgr_denied"], rep["stmgr_dropped"]) == (3, 6, 4)
    assert tm.counters["malformed"] == 0


def test_a_handler_that_raises_costs_one_message(tm_of, caplog):
    """The last resort: an unforeseen failure while acting on a checked message."""
    tm = running(tm_of())

    def broken(*a):
        raise OSError("the disk is full")
    tm.state.put = broken
    with caplog.at_level(logging.WARNING, logger="bittern.tmaster"):
        tm._dispatch(frames(Q, {"op": Op.DEACTIVATE, "req": 3}))
    assert tm.counters["malformed"] == 1
    assert tm.sent[-1][1:] == ("reply", {"req": 3, "error": "the topology master could not handle 'deactivate': "
                                                            "OSError: the disk is full"})
    assert "(op 'deactivate'): handling it raised" in caplog.text and "OSError: the disk is full" in caplog.text
    tm._dispatch(frames(Q, {"op": Op.STATUS, "req": 4}))  # nothing changed, and it goes on
    assert tm.sent[-1][1] == "reply" and tm.sent[-1][2]["req"] == 4
    assert tm.sent[-1][2]["active"] is True and tm.sent[-1][2]["error"] is None


def test_logging_is_throttled(tm_of, caplog):
    tm = running(tm_of())
    with caplog.at_level(logging.WARNING, logger="bittern.tmaster"):
        for _ in range(500):
            tm._dispatch(frames(b"s0", [1]))
    lines = [r for r in caplog.records if "dropped a control message" in r.getMessage()]
    assert tm.counters["malformed"] == 500 and 1 <= len(lines) <= 3


def test_errors_memory_stays_bounded(tm_of):
    tm = running(tm_of())
    big = "x" * 25000
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(2000):  # distinct bogus components (the finding: 50 MB that stayed)
            tm._dispatch(frames(b"s0", {"op": Op.ERROR, "container": 0, "task": 1, "component": f"bogus-{i}",
                                        "error": big, "traceback": big}))
        assert tm.counters["malformed"] == 2000 and len(tm.errors) == 1
        for i in range(2000):  # a task's own errors, with huge texts: the last ones kept, cut
            for c, t in ((0, 1), (0, 3), (1, 2)):
                tm._dispatch(frames(b"s%d" % c, {"op": Op.ERROR, "container": c, "task": t, "error": f"{i} {big}",
                                                 "traceback": big, "where": "process"}))
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert tm.counters["malformed"] == 2000
    assert sorted(e["component"] for e in tm.errors) == ["b"] * ERRORS_PER_COMPONENT + ["s"] * ERRORS_PER_COMPONENT
    assert all(len(e["error"]) <= TEXT_KEEP + 64 and len(e["traceback"]) <= TEXT_KEEP + 64 for e in tm.errors)
    assert tm.errors[-1]["error"].startswith("1999 x")
    assert grown < 4 * 2 ** 20, grown  # 40 records of 2 x 16 kB: ~1.3 MB, not 300 MB of input


class Raised(logging.Handler):
    """Counts last-resort catches (a message that got past the checks and then raised)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records = []

    def emit(self, record):
        if record.exc_info:
            self.records.append(record)


IDENTITIES = st.sampled_from([b"s0", b"s1", b"s0", b"s1", b"s0@1", b"s7", b"c1", b"junk", Q])


def check_invariants(tm, before, malformed_before):
    pk = tm.plan.packing
    assert set(tm.tasks) <= tm.all_tasks and set(tm.stmgrs) <= tm.containers
    assert set(tm.metrics.latest) <= tm.all_tasks
    for t, reg in tm.tasks.items():
        assert reg["component"] in (None, pk.task_component[t])
    comps = [e["component"] for e in tm.errors]
    assert set(comps) <= set(tm.kinds) | SYSTEM_ERROR_COMPONENTS
    assert all(comps.count(c) <= ERRORS_PER_COMPONENT for c in set(comps))
    if tm.counters["malformed"] > malformed_before:
        assert snapshot(tm) == before


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.data())
def test_fuzzed_messages_never_raise_and_never_pass_a_bad_one(tm_of, mode, data):
    tm = getattr(tm_of, "_tm_" + mode, None)
    if tm is None:  # one topology master per test run: what the examples leave adds up
        tm = running(tm_of(mode))
        setattr(tm_of, "_tm_" + mode, tm)
    raised = Raised()
    logging.getLogger("bittern.tmaster").addHandler(raised)
    try:
        for _ in range(data.draw(st.integers(1, 5))):
            kind = data.draw(st.integers(0, 3))
            if kind == 0:
                ident, value = data.draw(IDENTITIES), data.draw(VALUES)
            elif kind == 1:
                ident, value = Q, dict(data.draw(st.dictionaries(
                    st.sampled_from(["req", "window", "component", "limit", "x"]), VALUES, max_size=3)),
                    op=data.draw(st.sampled_from([Op.STATUS, Op.REPORT, Op.GET_METRICS, Op.ERRORS, "x"])))
            else:
                sender, value = data.draw(near_valid())
                ident = data.draw(st.sampled_from([b"s%d" % sender if sender >= 0 else b"s9", b"s0", b"s1"]))
            before, n = snapshot(tm), tm.counters["malformed"]
            tm._dispatch(frames(ident, value))
            check_invariants(tm, before, n)
    finally:
        logging.getLogger("bittern.tmaster").removeHandler(raised)
    assert not raised.records, raised.records[0].getMessage()
