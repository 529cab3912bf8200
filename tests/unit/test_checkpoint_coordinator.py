"""The topology master's checkpoint coordinator (streammgr/checkpoints.py): pure, clock passed in."""
from __future__ import annotations

import pytest

from streammgr.checkpoints import Abandon, CheckpointCoordinator, Complete, Restore, Resume, Start

TASKS = (1, 2, 3)


def running(**kw):
    """A coordinator past its start-up restore round, at time 0."""
    kw.setdefault("interval", 5.0)
    kw.setdefault("timeout", 30.0)
    c = CheckpointCoordinator(TASKS, **kw)
    acts = c.start(0.0)
    assert acts == [Restore(kw.get("latest_complete"), kw.get("epoch", 0) + 1)]
    for t in TASKS:
        acts = c.on_restored(t, c.epoch, 0.0)
    assert acts == [Resume(c.epoch)]
    return c


def save_all(c, n, now, tasks=TASKS):
    out = []
    for t in tasks:
        out += c.on_saved(t, n, c.epoch, now, nbytes=10 * t, align_ms=float(t))
    return out


def test_nothing_before_start_and_startup_is_a_restore_round():
    c = CheckpointCoordinator(TASKS, 5.0, 30.0, latest_complete=7, next_id=9, epoch=4)
    assert c.tick(100.0) == [] and c.task_registered(1, 100.0) == []
    assert c.start(100.0) == [Restore(7, 5)]
    assert c.start(100.0) == []  # once
    assert c.tick(101.0) == []  # no checkpoint during the restore round
    assert c.on_restored(1, 4, 101.0) == []  # an older epoch's answer
    assert c.on_restored(1, 5, 101.0) == [] and c.on_restored(2, 5, 101.0) == []
    assert c.on_restored(3, 5, 101.0) == [Resume(5)]
    assert c.restores == 0  # the start-up round is not a rollback
    assert c.tick(105.9) == []
    assert c.tick(106.0) == [Start(9, 5)]  # ids continue above what the store has seen


def test_checkpoint_completes_when_every_task_saved_it_in_this_epoch():
    c = running()
    assert c.tick(4.9) == []
    assert c.tick(5.0) == [Start(1, 1)]
    assert c.tick(6.0) == []  # one in flight
    assert c.on_saved(1, 1, 0, 6.0) == []  # another epoch
    assert c.on_saved(1, 2, 1, 6.0) == []  # another id
    assert c.on_saved(99, 1, 1, 6.0) == []  # not a task
    assert c.on_saved(1, 1, 1, 6.0, nbytes=10, align_ms=1.0) == []
    assert c.on_saved(1, 1, 1, 6.1, nbytes=10, align_ms=1.0) == []  # a repeat counts once
    assert c.on_saved(2, 1, 1, 6.2, nbytes=20, align_ms=7.5) == []
    assert c.on_saved(3, 1, 1, 6.5, nbytes=30, align_ms=2.0) == [Complete(1, (1, 2, 3))]
    m = c.metrics()
    assert m["last_complete"] == 1 and m["completed"] == 1 and m["last_bytes"] == 60
    assert m["last_duration_ms"] == 1500.0 and m["last_max_align_ms"] == 7.5
    assert c.on_saved(3, 1, 1, 6.6) == []  # after completion
    assert c.tick(9.9) == []
    assert c.tick(10.0) == [Start(2, 1)]  # every interval from the start of the previous one


def test_timeout_abandons_and_starts_the_next_at_once():
    c = running(timeout=3.0)
    assert c.tick(5.0) == [Start(1, 1)]
    save_all(c, 1, 6.0, tasks=(1, 2))
    assert c.tick(7.9) == []
    acts = c.tick(8.0)
    assert isinstance(acts[0], Abandon) and acts[0].checkpoint_id == 1 and "2 of 3" in acts[0].reason
    assert acts[1:] == [Start(2, 1)]
    assert c.on_saved(3, 1, 1, 8.1) == []  # the abandoned one can no longer complete
    assert save_all(c, 2, 9.0) == [Complete(2, TASKS)]
    assert c.metrics()["abandoned"] == 1 and c.latest == 2


def test_rollback_on_reregistration():
    c = running()
    assert c.tick(5.0) == [Start(1, 1)]
    assert save_all(c, 1, 6.0) == [Complete(1, TASKS)]
    assert c.tick(10.0) == [Start(2, 1)]
    c.on_saved(1, 2, 1, 10.5)
    acts = c.task_registered(2, 11.0)
    assert acts[0] == Abandon(2, "a rollback began") and acts[1:] == [Restore(1, 2)]
    assert c.rolling_back and c.restores == 1
    assert c.on_saved(2, 2, 1, 11.1) == []  # from before the rollback
    assert c.tick(100.0)[:1] == [Restore(1, 2)]  # re-sent while answers are missing; nothing started
    assert c.on_restored(1, 2, 12.0) == [] and c.on_restored(2, 2, 12.0) == []
    # task 2 dies again during the rollback: RESTORE again, and its answer is awaited anew
    assert c.task_registered(2, 12.5) == [Restore(1, 2)]
    assert c.epoch == 2
    assert c.on_restored(3, 2, 13.0) == []
    assert c.on_restored(2, 2, 13.5) == [Resume(2)]
    assert not c.rolling_back
    assert c.tick(18.4) == []
    assert c.tick(18.5) == [Start(3, 2)]  # ids never reused
    assert save_all(c, 3, 19.0) == [Complete(3, TASKS)]


def test_rollback_before_any_complete_checkpoint_restores_none():
    c = running()
    assert c.tick(5.0) == [Start(1, 1)]
    assert c.tasks_registered([3, 99], 6.0)[1:] == [Restore(None, 2)]
    assert c.tasks_registered([99], 6.0) == []  # not a task of the topology


def test_restore_is_resent_only_every_resend_interval():
    c = CheckpointCoordinator(TASKS, 5.0, 30.0, resend_every=2.0)
    c.start(0.0)
    assert c.tick(1.9) == []
    assert c.tick(2.0) == [Restore(None, 1)]
    assert c.tick(3.0) == []


def test_complete_failed_takes_it_back():
    c = running(latest_complete=4, next_id=5)
    assert c.tick(5.0) == [Start(5, 1)]
    assert save_all(c, 5, 6.0) == [Complete(5, TASKS)]
    c.complete_failed(5)
    assert c.latest == 4 and c.metrics()["completed"] == 0
    assert c.task_registered(1, 7.0) == [Restore(4, 2)]


def test_bad_settings():
    with pytest.raises(ValueError):
        CheckpointCoordinator(TASKS, 0, 30)
    with pytest.raises(ValueError):
        CheckpointCoordinator(TASKS, 5, 0)
