"""``bittern run --until-done``: when a bounded run is finished (bittern/cli/run.py
``all_done``), from the topology master's report."""
from __future__ import annotations

from types import SimpleNamespace

from bittern.cli.run import all_done

TDEF = SimpleNamespace(spouts=[SimpleNamespace(name="spout", par=1)])


def report(watermark=None, exhausted=1, pending=0, checkpoints=None):
    tasks = {"1": {}, "2": {}}
    if watermark != "absent":
        tasks["2"]["__input-watermark"] = watermark
    rep = {"components": {"spout": {"__exhausted": exhausted, "__pending": pending}}, "tasks": tasks}
    if checkpoints is not None:
        rep["checkpoints"] = checkpoints
    return rep


def test_done_needs_spouts_exhausted_and_nothing_pending():
    assert all_done(TDEF, report("absent"))
    assert not all_done(TDEF, report("absent", exhausted=0))
    assert not all_done(TDEF, report("absent", pending=3))


def test_event_time_is_done_only_once_every_input_watermark_reached_the_end():
    # the spout is done, but its final +inf watermark has not reached the window bolt yet:
    # its last windows have not fired, and stopping now would lose them
    assert not all_done(TDEF, report(1_700_000_000.0))
    assert all_done(TDEF, report(float("inf")))
    assert all_done(TDEF, report("inf"))  # (as strict JSON carries it)
    assert all_done(TDEF, report(None))  # a task without event time (no watermark yet)


def test_exactly_once_also_needs_the_end_committed():
    rep = report(float("inf"), checkpoints={"committed": 4})
    rep["tasks"]["1"]["__done-after"] = 5
    assert not all_done(TDEF, rep)
    rep["checkpoints"]["committed"] = 5
    assert all_done(TDEF, rep)
