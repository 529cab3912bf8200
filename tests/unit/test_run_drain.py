"""``bittern run``'s drain (bittern/cli/run.py): deactivate, then wait until every
tuple sent was executed and no multilang child still holds an input, with a fake
topology master replaying a sequence of metric reports."""
from __future__ import annotations

import pytest

from bittern.cli import run
from bittern.wire import Op


class FakeTM:
    def __init__(self, reports):
        self.reports, self.ops = list(reports), []

    def request(self, op, **kw):
        self.ops.append(op)
        if op == Op.DEACTIVATE:
            return {}
        return self.reports.pop(0) if len(self.reports) > 1 else self.reports[0]


def report(sent, done, in_flight=0, **extra):
    return dict({"components": {"spout": {"__transfer-count": sent},
                                "split": {"__execute-count": done, "__in-flight": in_flight}}}, **extra)


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(run.time, "sleep", lambda s: None)


def test_drain_waits_for_inputs_a_multilang_child_still_holds():
    # executed caught up at once, but the child acks its last inputs only later
    tm = FakeTM([report(100, 100, 40), report(100, 100, 40), report(100, 100, 7), report(100, 100, 0)])
    rep, drained = run.drain(tm, timeout=5)
    assert drained and rep["components"]["split"]["__in-flight"] == 0
    assert tm.ops[0] == Op.DEACTIVATE and tm.ops.count(Op.REPORT) == 5  # 3 busy, then 2 settled in a row


def test_drain_gives_up_at_the_timeout_when_a_child_never_acks(monkeypatch):
    clock = iter(range(0, 1000))
    monkeypatch.setattr(run.time, "monotonic", lambda: next(clock) * 0.5)
    rep, drained = run.drain(FakeTM([report(100, 100, 3)]), timeout=5)
    assert not drained and rep["components"]["split"]["__in-flight"] == 3


def test_drain_without_multilang_components_is_unchanged():
    rep, drained = run.drain(FakeTM([report(100, 90), report(100, 100), report(100, 100)]), timeout=5)
    assert drained
