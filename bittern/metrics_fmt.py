"""Formatting of metric values for people (shared by the CLI and the live view), and
the JSON convention for the values JSON cannot hold (shared with the HTTP API).

Watermarks (event time, DESIGN.md §5b) are points in time in epoch seconds, ``inf``
once a bounded source has finished, or None before the first one. They reach the
formatters from two places: the topology master's document as it is (floats,
``inf`` included: msgpack keeps it) and the HTTP API's JSON (where ``inf`` became the
string ``"inf"``, see :func:`json_safe`), so :func:`as_watermark` reads both.
"""
from __future__ import annotations

import math
import time

# view keys whose +inf means "the end of the stream" and so must survive JSON
WATERMARK_KEYS = frozenset({"input_watermark", "output_watermark"})
WINDOWS = ("interval", "1m", "10m", "all")  # the topology master's metric windows
EVENT_COUNTS = ("late", "too_late", "bad_timestamps", "windows_fired", "timers_fired")


def rate(v):
    """Events per second, short: 950, 12.3k, 1.25M."""
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    if v >= 1e4:
        return f"{v / 1e3:.1f}k"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.1f}"


def human_bytes(n):
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f}{unit}" if unit in ("B", "KB") else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}GB"


def refused_counts(doc):
    """What the topology's ports turned away: ``(refused, malformed)`` summed over the
    stream managers, then the topology master's, as four ints; None when the document
    has no such counts (an older topology master). Refused (``denied``): a handshake
    failed, or a sender spoke as whom it may not; malformed: a message dropped."""
    stmgrs = list((doc.get("stmgrs") or {}).values())
    tm = doc.get("tmaster") or {}
    if "malformed" not in tm and not any("malformed" in s for s in stmgrs):
        return None

    def count(d, key):
        v = d.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0
    return (sum(count(s, "denied") for s in stmgrs), sum(count(s, "malformed") for s in stmgrs),
            count(tm, "denied"), count(tm, "malformed"))


def refused(doc):
    """:func:`refused_counts` in one line for people, or None."""
    n = refused_counts(doc)
    if n is None:
        return None
    return f"stream managers: refused {n[0]}, malformed {n[1]}; topology master: refused {n[2]}, malformed {n[3]}"


# -- event time --------------------------------------------------------------------------
def as_watermark(v):
    """A watermark as a float (``inf`` included) from a document's value, or None: the
    JSON API's ``"inf"`` string is read back, anything else not a number is None."""
    if v == "inf":
        return math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    return None if v == -math.inf else float(v)


def watermark(v):
    """A watermark for people: a UTC time to the millisecond at most
    (``2023-11-14T22:13:20.5Z``), ``end`` once the stream has ended, ``-`` for none."""
    v = as_watermark(v)
    if v is None:
        return "-"
    if v == math.inf:
        return "end"
    try:
        whole = math.floor(v)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    except (OverflowError, OSError, ValueError):  # beyond what the calendar functions take
        return f"{v:.3f}"
    frac = f"{v - whole:.3f}"  # "0.500"; rounding up to "1.000" is shown as .999
    frac = "999" if frac.startswith("1") else frac[2:].rstrip("0")
    return f"{stamp}{'.' + frac if frac else ''}Z"


def lag(secs):
    """A watermark lag in seconds (behind the wall clock; negative when ahead of it),
    ``-`` when there is no watermark to be behind."""
    if secs is None or isinstance(secs, bool) or not isinstance(secs, (int, float)) or math.isnan(secs):
        return "-"
    if abs(secs) >= 1000:
        return f"{secs:.0f}"
    return f"{secs:.1f}"


def view_watermark(view, kind=None):
    """The watermark that says how far a component or task has got: a bolt's input
    watermark, a spout's output watermark (it has no input; ``kind`` from the
    component when the view has none)."""
    kind = view.get("kind") or kind
    keys = ("output_watermark", "input_watermark") if kind == "spout" else ("input_watermark", "output_watermark")
    for k in keys:
        v = as_watermark(view.get(k))
        if v is not None:
            return v
    return None


def has_event_time(view):
    """True when a component or task view shows event time at work: a watermark, open
    windows, or any late, too late, bad timestamp, fired window or timer count."""
    if any(as_watermark(view.get(k)) is not None for k in WATERMARK_KEYS):
        return True
    if view.get("open_windows") is not None:
        return True
    return any(view.get(k) for k in EVENT_COUNTS)


def json_safe(obj, key=None):
    """``obj`` with what JSON cannot hold replaced, by this convention: a watermark
    (a key of :data:`WATERMARK_KEYS`) at ``+inf`` (the stream ended) becomes the
    string ``"inf"``, so that it stays apart from null (no watermark yet); every other
    non-finite float (NaN, and infinities elsewhere) becomes null."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "inf" if obj == math.inf and key in WATERMARK_KEYS else None
    if isinstance(obj, dict):
        return {k: json_safe(v, k) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
