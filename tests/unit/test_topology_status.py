"""The rule that says a topology is DEGRADED (bittern/topostatus.py), and how it is shown."""
import pytest

from bittern import topostatus as ts
from bittern.cli.lifecycle import print_list


def rule(**kw):
    kw.setdefault("register_secs", 10)
    return ts.HealthRule([0, 1], [1, 2, 3], now=0.0, **kw)


def eo_rule(**kw):
    return rule(checkpoints=True, interval=1.0, timeout=4.0, **kw)


def test_healthy_while_everything_registers_in_time():
    r = rule()
    assert r.verdict(5.0) == ts.Verdict(ts.HEALTHY)
    r.registered([0, 1], [1, 2, 3], 6.0)
    assert r.verdict(100.0) == ts.Verdict(ts.HEALTHY)


def test_container_and_tasks_not_registered_within_the_bound():
    r = rule()
    r.registered([0], [1], 3.0)
    assert r.verdict(9.9).state == ts.HEALTHY
    v = r.verdict(10.0)
    assert v.state == ts.DEGRADED and v.since == 10.0
    assert v.reason == "container 1 not registered for over 10s; tasks 2, 3 not registered for over 10s"
    r.registered([1], [2, 3], 12.0)
    assert r.verdict(12.0) == ts.Verdict(ts.HEALTHY)


def test_a_lost_container_counts_from_when_it_was_lost():
    r = rule()
    r.registered([0, 1], [1, 2, 3], 1.0)
    r.lost("container", 1, 50.0)
    r.lost("container", 1, 55.0)  # still the first time
    assert r.verdict(59.0).state == ts.HEALTHY
    assert r.verdict(60.0).reason == "container 1 not registered for over 10s"
    r.registered([1], [], 61.0)
    assert r.verdict(61.0).state == ts.HEALTHY


def test_failed_checkpoints_in_a_row_then_one_completes():
    r = eo_rule()
    r.registered([0, 1], [1, 2, 3], 0.5)
    r.checkpoints_began(1.0)
    r.checkpoint_failed("checkpoint 1 abandoned: timed out", 2.0)
    r.checkpoint_failed("checkpoint 2 abandoned: timed out", 3.0)
    assert r.verdict(3.0).state == ts.HEALTHY
    r.checkpoint_failed("checkpoint 3 cannot be recorded", 4.0)
    v = r.verdict(4.0)
    assert v == ts.Verdict(ts.DEGRADED, "3 checkpoints in a row failed; last: checkpoint 3 cannot be recorded", 4.0)
    r.checkpoint_failed("checkpoint 4 cannot be recorded", 5.0)
    v = r.verdict(5.0)
    assert v.since == 4.0 and v.reason.startswith("4 checkpoints in a row failed; last: checkpoint 4")
    r.checkpoint_completed(6.0)
    assert r.verdict(6.0) == ts.Verdict(ts.HEALTHY)
    r.checkpoint_failed("again", 7.0)  # the streak starts over
    assert r.verdict(7.0).state == ts.HEALTHY


def test_no_checkpoint_completes_for_the_stall_bound():
    r = eo_rule()  # stall: max(10 x 1s, 4s + 2 x 1s) = 10s
    assert r.stall_secs == 10.0
    r.registered([0, 1], [1, 2, 3], 0.5)
    assert r.verdict(50.0).state == ts.HEALTHY  # checkpointing has not begun (STARTING)
    r.checkpoints_began(50.0)
    r.checkpoint_completed(55.0)
    assert r.verdict(64.9).state == ts.HEALTHY
    assert r.verdict(65.0) == ts.Verdict(ts.DEGRADED, "no checkpoint completed for over 10s", 65.0)
    r.checkpoint_completed(66.0)
    assert r.verdict(66.0).state == ts.HEALTHY


def test_checkpoint_rules_only_under_exactly_once():
    r = rule()
    for i in range(5):
        r.checkpoint_failed(f"checkpoint {i}", float(i))
    r.registered([0, 1], [1, 2, 3], 0.0)
    assert r.verdict(1000.0).state == ts.HEALTHY


@pytest.mark.parametrize("kw, what", [({"register_secs": 0}, "register_secs"),
                                      ({"register_secs": 1, "checkpoints": True, "interval": 0, "timeout": 1},
                                       "interval"),
                                      ({"register_secs": 1, "fail_streak": 0}, "fail_streak")])
def test_bad_bounds_are_refused(kw, what):
    with pytest.raises(ValueError, match=what):
        ts.HealthRule([0], [1], 0.0, **kw)


def test_stall_bound_is_never_shorter_than_a_timeout():
    assert ts.stall_bound(5.0, 30.0) == 50.0
    assert ts.stall_bound(1.0, 30.0) == 32.0


def test_health_doc_and_shown_state():
    doc = ts.health_doc(ts.Verdict(ts.DEGRADED, "why", 90.0), now=100.0, wall=1000.0)
    assert doc == {"state": ts.DEGRADED, "reason": "why", "since": 990.0}
    assert ts.health_doc(ts.Verdict(ts.HEALTHY), 1.0) == {"state": ts.HEALTHY, "reason": None, "since": None}
    for state in ("RUNNING", "PAUSED", "STARTING"):
        assert ts.shown_state(state, doc) == ts.DEGRADED
    for state in ("FAILED", "DEAD", "RESCHEDULING"):
        assert ts.shown_state(state, doc) == state
    assert ts.shown_state("RUNNING", {"state": ts.HEALTHY}) == "RUNNING"
    assert ts.shown_state("RUNNING", None) == "RUNNING"


def test_annotate_a_row_and_print_the_list(capsys):
    health = {"state": ts.DEGRADED, "reason": "3 checkpoints in a row failed; last: x", "since": 1000.0}
    rows = [ts.annotate({"name": "a", "state": "RUNNING", "containers": 1, "tasks": 3, "uptime_secs": 5},
                        {"health": health}),
            ts.annotate({"name": "b", "state": "RUNNING", "containers": 1, "tasks": 2, "uptime_secs": 5},
                        {"health": {"state": ts.HEALTHY}})]
    assert rows[0]["state"] == ts.DEGRADED and rows[0]["reason"] == health["reason"] and rows[0]["since"] == 1000.0
    assert rows[1] == {"name": "b", "state": "RUNNING", "containers": 1, "tasks": 2, "uptime_secs": 5}

    class Args:
        json = False
    print_list(Args(), rows)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "STATE", "CONTAINERS", "TASKS", "UPTIME", "REASON"]
    assert out[1].split()[:2] == ["a", "DEGRADED"] and "since" in out[1]
    assert out[1].endswith("3 checkpoints in a row failed; last: x")
    assert out[2].split() == ["b", "RUNNING", "1", "2", "5s", "-"]


def test_one_error_record_per_run_of_failures():
    errors = [{"component": "count", "where": "x", "error": "e"}]
    for i in range(5):
        rec, new = ts.merge_error(errors, {"component": ts.SYSTEM_COMPONENT, "where": "checkpoint complete",
                                           "error": f"failed {i}", "time": 100.0 + i}, cap=3)
        assert new == (i == 0)
    mine = [e for e in errors if e["component"] == ts.SYSTEM_COMPONENT]
    assert len(mine) == 1 and mine[0]["count"] == 5 and mine[0]["error"] == "failed 4"
    assert mine[0]["first_time"] == 100.0 and mine[0]["time"] == 104.0
    ts.close_errors(errors, ts.SYSTEM_COMPONENT)  # a checkpoint completed
    for i in range(4):  # four more runs: the cap keeps the newest three
        ts.merge_error(errors, {"component": ts.SYSTEM_COMPONENT, "where": "checkpoint complete",
                                "error": f"run {i}", "time": 200.0 + i}, cap=3)
        ts.close_errors(errors, ts.SYSTEM_COMPONENT)
    mine = [e["error"] for e in errors if e["component"] == ts.SYSTEM_COMPONENT]
    assert mine == ["run 1", "run 2", "run 3"] and errors[0]["component"] == "count"
