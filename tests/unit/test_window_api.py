"""Event time in the user API (bittern/api/windows.py, bittern/api/timedecl.py): bad
window settings are one-line TopologyErrors naming the component and the value, raised
when the topology is built (builder or class style); the at-least-once timeout check;
ComponentDef.time in the serialised plan; the late stream; and the runtime's own part
of a State (system, system_keyed) through snapshots, restores and merges."""
from __future__ import annotations

import json

import pytest

from bittern import (Bolt, Count, CountWindowBolt, Duration, EventTime, Grouping, Spout,
                     Stream, Topology, TopologyBuilder, TopologyDef, Window, WindowedBolt)
from bittern.api.state import KeyGroups, State
from bittern.api.timedecl import check_timeouts, window_hold_secs
from bittern.api.windows import LATE_FIELDS
from bittern.errors import TopologyError


class TimedSpout(Spout):
    outputs = ["key", "ts", "v"]
    event_time = EventTime("ts", lag=0.5)


class PlainSpout(Spout):
    outputs = ["key", "ts", "v"]


class OtherSpout(Spout):
    outputs = ["key", "when"]


class Sink(Bolt):
    outputs = []


def windowed(base=CountWindowBolt, **attrs):
    attrs.setdefault("outputs", ["key", "start", "end", "count"])
    attrs.setdefault("window", Window.tumbling(1.0))
    attrs.setdefault("timestamp_field", "ts")
    return type("Win", (base,), attrs)


def build(bolt_cls, spout_cls=TimedSpout, style="builder", name="win", grouping=None, extra=None):
    grouping = grouping or Grouping.fields("key")
    if style == "builder":
        b = TopologyBuilder("t")
        s = b.add_spout("src", spout_cls)
        w = b.add_bolt(name, bolt_cls, inputs={s: grouping})
        if extra:
            extra(b, s, w)
        return b.build()
    spec_s = spout_cls.spec()
    attrs = {"src": spec_s, name: bolt_cls.spec(inputs={spec_s: grouping})}
    return type("T", (Topology,), attrs).build()


def error(bolt_cls, spout_cls=TimedSpout, style="builder", **kw):
    with pytest.raises(TopologyError) as ei:
        build(bolt_cls, spout_cls, style, **kw)
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


BAD_WINDOWS = [
    (Window("hopping", 5), "'hopping'"),
    (Window.tumbling(0), "0"),
    (Window.tumbling(-2.5), "-2.5"),
    (Window.tumbling(Duration(0)), "Duration must be a positive number of seconds, got 0"),
    (Window.tumbling(Duration.minutes(-1)), "-1"),
    (Window.tumbling(float("nan")), "nan"),
    (Window.tumbling(True), "True"),
    (Window.tumbling("5s"), "'5s'"),
    (Window.tumbling(Count(0)), "Count must be a whole number >= 1, got 0"),
    (Window.tumbling(Count(2.5)), "2.5"),
    (Window.sliding(10, 0), "interval must be positive, got 0"),
    (Window.sliding(10, -1), "-1"),
    (Window.sliding(10, None), "None"),
    (Window.sliding(Count(5), Count(-1)), "-1"),
    (Window.sliding(2, 5), "interval (5) is longer than the window (2)"),
    (Window.sliding(Count(3), Count(4)), "interval (4) is longer than the window (3)"),
    (Window.sliding(Count(5), Duration(1)), "Count(5) every Duration(1)"),
    (Window.sliding(Duration(5), Count(1)), "Duration(5) every Count(1)"),
    (Window.session(Count(3)), "gap must be a Duration, got Count(3)"),
    (Window.session(0), "the session window's gap must be positive, got 0"),
]


@pytest.mark.parametrize("style", ["builder", "class"])
@pytest.mark.parametrize("window,needle", BAD_WINDOWS, ids=[repr(w[0]) for w in BAD_WINDOWS])
def test_bad_window_names_component_and_value(window, needle, style):
    ts = None if window.error and "Count" in repr(window.length) else "ts"
    msg = error(windowed(window=window, timestamp_field=ts), style=style, name="counter")
    assert msg.startswith("component 'counter': "), msg
    assert needle in msg, msg


def test_bad_window_is_reported_at_build_not_at_class_definition():
    w = Window.sliding(2, 5)  # no exception here: the class body is not the place to report it
    assert w.error and "longer" in w.error


def test_window_not_a_window():
    for bad in [None, 5, "tumbling", Window]:
        msg = error(windowed(window=bad), name="w1")
        assert msg.startswith("component 'w1': ") and repr(bad) in msg


def test_good_windows():
    for window, size, slide, by_count in [
        (Window.tumbling(5), 5, 5, False),
        (Window.tumbling(Duration.milliseconds(250)), 0.25, 0.25, False),
        (Window.tumbling(Duration.minutes(2)), 120, 120, False),
        (Window.sliding(10, 10), 10, 10, False),
        (Window.sliding(Duration(10), 2.5), 10, 2.5, False),
        (Window.session(Duration.seconds(30)), 30, None, False),
        (Window.tumbling(Count(100)), 100, 100, True),
        (Window.sliding(Count(10), Count(2)), 10, 2, True),
    ]:
        assert window.error is None
        assert (window.size, window.slide, window.by_count) == (size, slide, by_count)
        back = Window.from_dict(json.loads(json.dumps(window.to_dict())))
        assert (back.kind, back.size, back.slide, back.by_count) == (window.kind, size, slide, by_count)


@pytest.mark.parametrize("style", ["builder", "class"])
def test_timestamp_field_not_in_input_stream(style):
    msg = error(windowed(timestamp_field="when"), style=style, name="agg")
    assert msg.startswith("component 'agg': ") and "'when'" in msg and "'src'" in msg


def test_timestamp_field_must_be_in_every_input():
    def extra(b, s, w):
        o = b.add_spout("other", OtherSpout)
        b.add_bolt("w2", windowed(), inputs={s: Grouping.fields("key"), o: Grouping.fields("key")})
    with pytest.raises(TopologyError) as ei:
        build(Sink, extra=extra, grouping=Grouping.SHUFFLE)
    msg = str(ei.value)
    assert "component 'w2'" in msg and "'ts'" in msg and "'other'" in msg and "\n" not in msg


@pytest.mark.parametrize("style", ["builder", "class"])
@pytest.mark.parametrize("window", [Window.tumbling(Count(10)), Window.sliding(Count(10), Count(5))])
def test_count_window_refuses_timestamps(window, style):
    msg = error(windowed(window=window), style=style, name="cw")
    assert msg.startswith("component 'cw': ") and repr(window) in msg and "timestamp_field" in msg
    msg = error(windowed(window=window, timestamp_field=None, timestamp_fn=lambda v: v[1]), style=style, name="cw")
    assert msg.startswith("component 'cw': ")
    build(windowed(window=window, timestamp_field=None), style=style)  # fine without


@pytest.mark.parametrize("style", ["builder", "class"])
def test_late_stream_colliding_with_an_output(style):
    cls = windowed(outputs=[Stream(["key", "start", "end", "count"]), Stream(["x"], name="late")],
                   late_stream="late")
    msg = error(cls, style=style, name="lw")
    assert msg.startswith("component 'lw': ") and "'late'" in msg


def test_bad_late_stream_lag_lateness():
    for attrs, needle in [({"late_stream": ""}, "late_stream"), ({"late_stream": 3}, "3"),
                          ({"lag": -1}, "lag"), ({"allowed_lateness": -0.5}, "-0.5"),
                          ({"allowed_lateness": float("inf")}, "inf"), ({"lag": "2"}, "'2'"),
                          ({"timestamp_field": ""}, "timestamp_field"),
                          ({"timestamp_fn": lambda v: v[1]}, "not both")]:
        msg = error(windowed(**attrs), name="x")
        assert msg.startswith("component 'x': ") and needle in msg, (attrs, msg)


def test_windowed_bolt_with_execute():
    cls = windowed(base=WindowedBolt, execute=lambda self, tup: None)
    msg = error(cls, name="wb")
    assert msg.startswith("component 'wb': ") and "process_window" in msg


@pytest.mark.parametrize("style", ["builder", "class"])
def test_event_time_field_not_in_spout_outputs(style):
    spout = type("S", (Spout,), {"outputs": ["key", "v"], "event_time": EventTime("ts")})
    with pytest.raises(TopologyError) as ei:
        build(Sink, spout_cls=spout, style=style)
    msg = str(ei.value)
    assert msg.startswith("component 'src': ") and "'ts'" in msg and "\n" not in msg


def test_event_time_field_in_any_stream_and_bad_event_time():
    spout = type("S", (Spout,), {"outputs": ["key", Stream(["ts"], name="ticks")], "event_time": EventTime("ts")})
    build(Sink, spout_cls=spout, grouping=Grouping.SHUFFLE)
    spout = type("S", (Spout,), {"outputs": ["key", "ts"], "event_time": "ts"})
    with pytest.raises(TopologyError, match="component 'src': event_time must be an EventTime"):
        build(Sink, spout_cls=spout)


@pytest.mark.parametrize("kwargs,needle", [
    ({}, "one of them"), ({"field": "ts", "fn": len}, "one of them"), ({"field": ""}, "field name"),
    ({"fn": 5}, "callable"), ({"field": "ts", "lag": -1}, "-1"), ({"field": "ts", "lag": float("nan")}, "nan"),
    ({"field": "ts", "lag": True}, "True"),
])
def test_event_time_constructor(kwargs, needle):
    with pytest.raises(TopologyError) as ei:
        EventTime(**kwargs)
    assert needle in str(ei.value)


# -- the plan ------------------------------------------------------------------------------

class Timers(Bolt):
    outputs = []

    def on_timer(self, key, ts, kind):
        pass


def _plan():
    b = TopologyBuilder("plan")
    s = b.add_spout("src", TimedSpout)
    m = b.add_spout("manual", type("M", (Spout,), {"outputs": ["key"], "event_time": EventTime.manual()}))
    w = b.add_bolt("win", windowed(window=Window.sliding(4, 2), lag=1.5, allowed_lateness=3,
                                   late_stream="late"), inputs={s: Grouping.fields("key")})
    b.add_bolt("tuples", windowed(base=WindowedBolt, window=Window.session(Duration(30)), timestamp_field=None,
                                  process_window=lambda self, w: None), inputs={m: Grouping.SHUFFLE})
    b.add_bolt("timers", Timers, inputs={s: Grouping.fields("key")})
    b.add_bolt("late_sink", Sink, inputs={(w.name, "late"): Grouping.SHUFFLE})
    return b.build()


def test_time_declarations():
    tdef = _plan()
    c = tdef.components
    assert c["src"].time == {"watermarks": True, "field": "ts", "lag": 0.5, "manual": False}
    assert c["manual"].time == {"watermarks": True, "field": None, "lag": 0.0, "manual": True}
    assert c["win"].time == {"window": Window.sliding(4, 2).to_dict(), "event_time": True, "timestamp_field": "ts",
                             "lag": 1.5, "lateness": 3.0, "late_stream": "late", "aggregating": True}
    assert c["tuples"].time["event_time"] is False and c["tuples"].time["aggregating"] is False
    assert c["timers"].time == {"timers": True}
    assert c["late_sink"].time == {}


def test_late_stream_is_declared():
    tdef = _plan()
    assert tdef.components["win"].outputs["late"] == {"fields": ["late_tuple", "timestamp", "reason"], "direct": False}
    assert list(LATE_FIELDS) == ["late_tuple", "timestamp", "reason"]
    assert tdef.components["win"].outputs["default"]["fields"] == ["key", "start", "end", "count"]
    assert "late" not in tdef.components["tuples"].outputs  # none asked for


def test_component_time_round_trips_through_the_plan():
    tdef = _plan()
    back = TopologyDef.from_dict(json.loads(json.dumps(tdef.to_dict())))
    for name, c in tdef.components.items():
        assert back.components[name].time == c.time
        assert back.components[name].outputs == c.outputs
    w = Window.from_dict(back.components["win"].time["window"])
    assert (w.kind, w.size, w.slide, w.by_count) == ("sliding", 4, 2, False)
    # a plan written before event time (no "time") reads as processing time
    d = tdef.to_dict()
    for comp in d["components"]:
        comp.pop("time", None)
    assert all(c.time == {} for c in TopologyDef.from_dict(d).components.values())


# -- at least once: the window must release its tuples before they time out -------------------------

AT_LEAST_ONCE = {"topology.reliability.mode": "ATLEAST_ONCE", "topology.enable.message.timeouts": True,
                 "topology.message.timeout.secs": 30}


def _check(tdef, **conf):
    conf = dict(AT_LEAST_ONCE, **conf)
    check_timeouts(tdef, conf, lambda c: dict(conf, **tdef.components[c].config))


@pytest.mark.parametrize("window,lag,hold", [
    (Window.tumbling(30), 0.0, 30), (Window.tumbling(20), 10.0, 30), (Window.sliding(20, 10), 0.0, 30),
    (Window.sliding(20, 5), 6.0, 31), (Window.tumbling(40), 0.0, 40),
])
def test_timeout_check_refuses_windows_holding_tuples_too_long(window, lag, hold):
    tdef = build(windowed(window=window, lag=lag), name="slow")
    with pytest.raises(TopologyError) as ei:
        _check(tdef)
    msg = str(ei.value)
    assert msg.startswith("component 'slow': ") and "\n" not in msg
    assert f"{hold:g} s" in msg and "topology.message.timeout.secs = 30" in msg


@pytest.mark.parametrize("window,lag", [
    (Window.tumbling(29.9), 0.0), (Window.sliding(20, 5), 4.5), (Window.tumbling(10), 19.0),
    (Window.session(100), 0.0), (Window.tumbling(Count(10 ** 6)), 0.0),  # not bounded in time: not checked
])
def test_timeout_check_accepts(window, lag):
    ts = None if window.by_count else "ts"
    _check(build(windowed(window=window, lag=lag, timestamp_field=ts)))


@pytest.mark.parametrize("conf", [
    {"topology.reliability.mode": "ATMOST_ONCE"}, {"topology.reliability.mode": "EFFECTIVELY_ONCE"},
    {"topology.enable.message.timeouts": False}, {"topology.message.timeout.secs": 0},
    {"topology.message.timeout.secs": 61},
])
def test_timeout_check_other_modes_and_settings(conf):
    _check(build(windowed(window=Window.sliding(40, 20))), **conf)


def test_timeout_check_uses_the_component_config():
    def extra(b, s, w):
        b.add_bolt("long", windowed(window=Window.tumbling(100)), inputs={s: Grouping.fields("key")},
                   config={"topology.message.timeout.secs": 120})
    _check(build(windowed(window=Window.tumbling(10)), extra=extra))
    tdef = build(windowed(window=Window.tumbling(10)), extra=extra)
    tdef.components["long"].config["topology.message.timeout.secs"] = 90
    with pytest.raises(TopologyError, match=r"component 'long': .* 100 s .* = 90"):
        _check(tdef)


def test_window_hold_secs():
    assert window_hold_secs({}) is None
    assert window_hold_secs({"window": Window.tumbling(5).to_dict(), "lag": 1.0}) == 6
    assert window_hold_secs({"window": Window.sliding(5, 2).to_dict(), "lag": 0.0}) == 7
    assert window_hold_secs({"window": Window.session(5).to_dict()}) is None
    assert window_hold_secs({"window": Window.tumbling(Count(5)).to_dict()}) is None


# -- the runtime's part of a State ---------------------------------------------------------------

def _state(n_groups=8):
    st = State(KeyGroups(n_groups))
    st.put("offset", 3)
    st.keyed.put("a", 1)
    st.system["input_watermark"] = 12.5
    st.system["unkeyed"] = {"t": [["event", 20, None]]}
    kg = st.key_groups
    for key in ["a", "b", ("c", 1), 7]:
        st.system_keyed._groups.setdefault(kg.group_of(key), {})[key] = {"t": [["event", 10, ("w", 2)]],
                                                                          "w": {"w": [], "n": 4, "last": None}}
    return st


def test_snapshot_restore_keeps_system_stores():
    st = _state()
    back = State.restore(st.snapshot())
    assert back.system == st.system
    assert back.system_keyed._groups == st.system_keyed._groups
    assert back.system_keyed.get(("c", 1))["t"] == [["event", 10, ("w", 2)]]  # tuples stay tuples
    assert back.get("offset") == 3 and back.keyed.get("a") == 1
    assert back.system_merged == []


def test_restore_groups_selects_system_keyed_groups():
    st = _state()
    kg = st.key_groups
    g = kg.group_of("b")
    back = State.restore(st.snapshot(), groups=[g])
    assert set(back.system_keyed._groups) == {g}
    assert back.system_keyed.get("b") == st.system_keyed.get("b")
    assert back.system == {} and len(back) == 0  # per-task stores stay with the old task index
    back = State.restore(st.snapshot(), groups=[g], plain=True)
    assert back.system == st.system
    assert State.restore(st.snapshot(), groups=[]).system_keyed._groups == {}


def test_merge_folds_system_keyed_and_collects_system():
    kg = KeyGroups(8)
    a, b = State(kg), State(kg)
    a.system["input_watermark"] = 5.0
    b.system["input_watermark"] = 9.0
    b.system["unkeyed"] = {"t": []}
    ga, gb = kg.group_of("a"), kg.group_of("b")
    assert ga != gb
    a.system_keyed._groups[ga] = {"a": {"t": [["event", 1, None]]}}
    b.system_keyed._groups[gb] = {"b": {"t": [["processing", 2, None]]}}
    target = State(kg)
    target.merge(a, b.snapshot())  # a State or snapshot bytes
    assert target.system_keyed.get("a") == {"t": [["event", 1, None]]}
    assert target.system_keyed.get("b") == {"t": [["processing", 2, None]]}
    assert target.system == {}
    assert target.system_merged == [{"input_watermark": 5.0}, {"input_watermark": 9.0, "unkeyed": {"t": []}}]
