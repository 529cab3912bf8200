"""Event time for people: the value formatters, the ``bittern metrics`` table and the
``bittern top`` renderer on synthetic documents (as the topology master sends them,
and as they come back through the HTTP API's JSON in cluster mode)."""
from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from bittern.cli.metrics import format_metrics
from bittern.metrics_fmt import has_event_time, lag, view_watermark, watermark
from bittern.tui.render import render

from .event_docs import INF, T0, doc, remote_doc

DOCS = pytest.mark.parametrize("make", [doc, remote_doc], ids=["master", "json"])


def text(renderable, width=120):
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None,
                      force_terminal=False, legacy_windows=False)
    console.print(renderable)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


# -- values -------------------------------------------------------------------------------
def test_watermark_format():
    assert watermark(T0) == "2023-11-14T22:13:20.5Z"
    assert watermark(1700000000) == "2023-11-14T22:13:20Z"
    assert watermark(1700000000.125) == "2023-11-14T22:13:20.125Z"
    assert watermark(1700000000.9999) == "2023-11-14T22:13:20.999Z"  # never rounds into the next second
    assert watermark(0) == "1970-01-01T00:00:00Z"  # a real 0 is 1970; only None is "none"
    assert watermark(INF) == "end" and watermark("inf") == "end"
    assert watermark(None) == "-" and watermark(-INF) == "-" and watermark(float("nan")) == "-"
    assert watermark(1e300) == f"{1e300:.3f}"  # past the calendar: still a number, no crash


def test_lag_format():
    assert lag(None) == "-" and lag(float("nan")) == "-"
    assert lag(2.54) == "2.5" and lag(0.0) == "0.0" and lag(-1.25) == "-1.2"
    assert lag(86400 * 3) == "259200"


def test_view_watermark_and_has_event_time():
    assert view_watermark({"kind": "spout", "input_watermark": 1.0, "output_watermark": 2.0}) == 2.0
    assert view_watermark({"kind": "bolt", "input_watermark": 1.0, "output_watermark": 2.0}) == 1.0
    assert view_watermark({"input_watermark": None, "output_watermark": "inf"}, "bolt") == math.inf
    assert view_watermark({}) is None
    assert not has_event_time({"input_watermark": None, "late": 0, "open_windows": None})
    assert has_event_time({"too_late": 1}) and has_event_time({"output_watermark": "inf"})
    assert has_event_time({"open_windows": 0})


# -- bittern metrics ----------------------------------------------------------------------
@DOCS
def test_metrics_table_with_event_time(make):
    lines = format_metrics(make()).splitlines()
    head = lines[1].split()
    assert head[-6:] == ["watermark", "lag", "s", "late", "too", "late"]
    rows = {line.split()[0]: line for line in lines[2:]}
    assert rows["events"].split()[-4:] == ["2023-11-14T22:13:20.5Z", "2.5", "0", "0"]
    assert rows["window"].split()[-4:] == ["2023-11-14T22:13:25.25Z", "8.0", "6", "8"]
    assert rows["sink"].split()[-4:] == ["-", "-", "0", "0"]


def test_metrics_table_shows_end_of_a_finished_source():
    d = doc()
    d["components"]["events"]["output_watermark"] = INF
    row = next(line for line in format_metrics(d).splitlines() if line.startswith("events"))
    assert row.split()[-4] == "end"


def test_metrics_table_without_event_time_is_unchanged():
    lines = format_metrics(doc(event_time=False)).splitlines()
    assert lines[1].split()[-1] == "rss" and "watermark" not in "\n".join(lines)
    assert len({len(line) for line in lines[1:]}) == 1  # aligned columns


# -- bittern top --------------------------------------------------------------------------
@DOCS
def test_top_event_time_section(make):
    got = text(render(make()))
    assert "event time" in got
    section = got[got.index("event time"):got.index("throughput")]
    assert " 1  events      2023-11-14T22:13:20.5Z    2.5" in section
    assert " 3  window     2023-11-14T22:13:25.25Z    8.0     6         8" in section
    assert "sink" not in section  # only components that have event time
    narrow = text(render(make()), 80)
    assert all(len(line) <= 80 for line in narrow.splitlines())
    assert "2023-11-14T22:13:25.25Z" in narrow and "lag s" in narrow


def test_top_without_event_time_has_no_section():
    got = text(render(doc(event_time=False)))
    assert "event time" not in got and "watermark" not in got
    got = text(render(doc(event_time=False), selected="window"))
    assert "event time" not in got and "watermark" not in got


@DOCS
def test_top_drill_down_bolt(make):
    got = text(render(make(), selected="window"))
    assert "event time: watermark input 2023-11-14T22:13:25.25Z  output 2023-11-14T22:13:20.5Z   lag 8.0s" in got
    assert "windows open 5, fired 20   timers fired 22   late 6  too late 8  bad timestamps 0" in got
    rows = {line.split()[0]: line for line in got.splitlines() if line.strip()[:1].isdigit()}
    assert rows["3"].split()[-2:] == ["2023-11-14T22:13:30.5Z", "3.0"]
    assert rows["5"].split()[-2:] == ["-", "-"]  # no watermark yet


@DOCS
def test_top_drill_down_spout_shows_the_end(make):
    got = text(render(make(), selected="events"))
    assert "event time: watermark output 2023-11-14T22:13:20.5Z   lag 2.5s" in got
    assert "input" not in got.split("event time:")[1].splitlines()[0]
    rows = {line.split()[0]: line for line in got.splitlines() if line.strip()[:1].isdigit()}
    assert rows["2"].split()[-3:] == ["end", "-", "0"]  # finished; bad timestamps 0
    assert rows["1"].split()[-3:] == ["2023-11-14T22:13:20.5Z", "2.5", "2"]
