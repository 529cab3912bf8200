"""Event-time declarations in the logical plan: what a component's class says about
time, checked once when the topology is built (errors name the component and the
value), and written into ``ComponentDef.time`` so that every process knows which
channels carry watermarks without importing user classes.
"""
from __future__ import annotations

from ..errors import TopologyError
from .windows import EventTime, is_aggregating, is_windowed


def time_decl(cls, kind, cname, streams):
    """``ComponentDef.time`` for ``cls``; adds a windowed bolt's late stream to ``streams``."""
    where = f"component {cname!r}"
    if kind == "spout":
        et = getattr(cls, "event_time", None)
        if et is None:
            return {}
        if not isinstance(et, EventTime):
            raise TopologyError(f"{where}: event_time must be an EventTime(...), got {et!r}")
        if et.field is not None and not any(et.field in s.fields for s in streams.values()):
            raise TopologyError(f"{where}: event_time field {et.field!r} is not an output field "
                                f"({', '.join(f'{n}: {list(s.fields)}' for n, s in streams.items())})")
        return {"watermarks": True, "field": et.field, "lag": et.lag, "manual": et.manual_mode}
    if is_windowed(cls):
        w = cls.window_spec(where)
        if getattr(cls, "execute", None) is not None and not is_aggregating(cls):
            raise TopologyError(f"{where}: a WindowedBolt gets its windows in process_window(window), "
                                f"not execute (Storm's name)")
        if w.by_count and cls.event_time():
            raise TopologyError(f"{where}: count windows ({w!r}) count tuples in arrival order; "
                                f"drop timestamp_field/timestamp_fn, or use a Duration")
        late = cls.late_stream_decl()
        if late is not None:
            if late.name in streams:
                raise TopologyError(f"{where}: late_stream {late.name!r} is also declared in outputs")
            streams[late.name] = late
        return {"window": w.to_dict(), "event_time": cls.event_time(), "timestamp_field": cls.timestamp_field,
                "lag": float(cls.lag), "lateness": float(cls.allowed_lateness), "late_stream": cls.late_stream,
                "aggregating": is_aggregating(cls)}
    if callable(getattr(cls, "on_timer", None)):
        return {"timers": True}
    return {}


def check_time(comp, comps):
    """Checks that need the inputs: a windowed bolt's timestamp field is a field of
    every input stream."""
    field = comp.time.get("timestamp_field")
    if not field:
        return
    for i in comp.inputs:
        fields = comps[i.component].outputs[i.stream]["fields"]
        if field not in fields:
            raise TopologyError(f"component {comp.name!r}: timestamp_field {field!r} is not a field of input "
                                f"{i.component!r} stream {i.stream!r} (fields: {list(fields)})")


def window_hold_secs(time):
    """How long a duration window may hold a tuple before acking it: its length, the
    sliding interval, and the lag (Storm checks length + interval against the timeout)."""
    w = time.get("window")
    if not w or w["length"]["kind"] != "duration" or w["kind"] == "session":
        return None
    hold = w["length"]["value"]
    if w["kind"] == "sliding":
        hold += w["every"]["value"]
    return hold + time.get("lag", 0.0)


def check_timeouts(tdef, conf, component_config):
    """At least once: a window that holds tuples longer than
    ``topology.message.timeout.secs`` would see them time out and be replayed forever
    (Storm refuses the same). ``component_config(name)``: its merged config."""
    for comp in tdef.components.values():
        if not comp.time.get("window"):
            continue
        cc = component_config(comp.name)
        if cc.get("topology.reliability.mode") != "ATLEAST_ONCE" or not cc.get("topology.enable.message.timeouts"):
            continue
        hold, timeout = window_hold_secs(comp.time), float(cc.get("topology.message.timeout.secs") or 0)
        if hold is not None and timeout > 0 and hold >= timeout:
            raise TopologyError(f"component {comp.name!r}: its window holds tuples up to {hold:g} s (length + "
                                f"interval + lag), not less than topology.message.timeout.secs = {timeout:g}: "
                                f"raise the timeout above {hold:g} or shorten the window")
