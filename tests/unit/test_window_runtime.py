"""The windowed bolt's per-tuple path (instance/windowing.py, WindowRuntime.process) with
a stand-in instance: timestamps that are floats but no time (NaN, infinities) are bad
timestamps, like non-numbers, instead of an error raised from the window operator."""
from __future__ import annotations

import math
import types

import pytest

from bittern.api.tuple import Tuple
from bittern.api.windows import CountWindowBolt, Window
from bittern.time.timers import TimerQueue
from bittern.time.watermarks import InputWatermark
from instance.windowing import WindowRuntime


class Counts(CountWindowBolt):
    outputs = ["key", "start", "end", "count"]
    window = Window.tumbling(1.0)
    timestamp_field = "ts"
    late_stream = "late"


def runtime():
    obj = Counts()
    emitted = []
    obj.emit = lambda values, stream="default", **kw: emitted.append((stream, values))
    grouping = types.SimpleNamespace(kind="fields", fields=["key"])
    inp = types.SimpleNamespace(component="src", stream="default", grouping=grouping)
    comps = {"src": types.SimpleNamespace(outputs={"default": {"fields": ["key", "ts"]}})}
    cdef = types.SimpleNamespace(inputs=[inp], time={
        "event_time": True, "aggregating": True, "window": Counts.window.to_dict(), "lateness": 0.0,
        "timestamp_field": "ts", "late_stream": "late"})
    inst = types.SimpleNamespace(cdef=cdef, acking=False, window_anchors=None, component="win", task=1,
                                 plan=types.SimpleNamespace(topology=types.SimpleNamespace(components=comps)))
    clock = types.SimpleNamespace(timers=TimerQueue(), input=InputWatermark([7]), batch_max={},
                                  counters={"__late-count": 0, "__too-late-count": 0, "__bad-timestamp-count": 0,
                                            "__windows-fired-count": 0})
    rt = WindowRuntime(inst, clock, obj)
    return rt, obj, clock, emitted


def tup(values):
    return tuple.__new__(Tuple, (None, "src", "default", 7, values))


@pytest.mark.parametrize("ts", [math.nan, math.inf, -math.inf])
def test_a_float_that_is_no_time_is_a_bad_timestamp(ts):
    rt, obj, clock, emitted = runtime()
    obj.process(tup(["a", 1.5]))
    obj.process(tup(["a", ts]))  # raised ValueError/OverflowError from math.floor before
    assert clock.counters["__bad-timestamp-count"] == 1
    assert rt.op.open_windows() == 1  # only the good tuple's window
    [(stream, (values, stamp, reason))] = emitted
    assert stream == "late" and values == ["a", ts] and "not a finite number" in reason
    assert stamp is ts


@pytest.mark.parametrize("ts", [0, 2, 2.75, -3.5, True, "x", None])
def test_numbers_pass_and_other_values_stay_bad(ts):
    rt, obj, clock, emitted = runtime()
    obj.process(tup(["a", ts]))
    bad = isinstance(ts, bool) or not isinstance(ts, (int, float))
    assert clock.counters["__bad-timestamp-count"] == (1 if bad else 0)
    assert rt.op.open_windows() == (0 if bad else 1)
    if bad:
        assert "is not a number" in emitted[0][1][2]
