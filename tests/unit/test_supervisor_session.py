"""When a cluster supervisor stops its containers: the session guard (pure, times
passed in) and a fenced exit in ProcessGroup (real child processes)."""
from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

from bittern.config import defaults
from bittern.proc import EXIT_FENCED
from supervisor.procs import ProcessGroup
from supervisor.session import DEFAULT_GRACE_SECS, GRACE_KEY, SessionGuard, check_grace


# -- the guard ----------------------------------------------------------------------------

def test_back_within_the_grace_changes_nothing():
    g = SessionGuard(3.0, now=100.0)
    g.alive(100.5)
    g.on_state(False)  # ZooKeeper away
    assert [g.due(t) for t in (101.0, 102.0, 103.0, 103.5)] == [False] * 4  # 3.0 s since 100.5
    g.on_state(True)
    g.alive(103.6)  # an answer in our session: back
    assert not g.due(200.0) and not g.stopped and g.without(103.6) == 0.0


def test_away_longer_than_the_grace_fires_once():
    g = SessionGuard(3.0, now=0.0)
    g.alive(10.0)
    g.on_state(False)
    assert not g.due(13.0)  # exactly the grace: not over it
    assert g.due(13.01) and g.stopped
    assert g.without(13.01) == pytest.approx(3.01)
    assert [g.due(t) for t in (14.0, 60.0, 600.0)] == [False] * 3  # once per loss
    g.on_state(True)
    g.alive(601.0)  # the session is back: the next loss counts afresh
    assert not g.stopped
    g.on_state(False)
    assert not g.due(603.0) and g.due(604.5)


def test_counted_from_the_last_answer_not_from_when_the_loss_is_seen():
    """A frozen process (SIGSTOP) learns of the loss only when it resumes: the time
    it was frozen counts at once, and kazoo's stale 'connected' only defers it."""
    g = SessionGuard(3.0, now=0.0)
    g.alive(50.0)  # the last read before the freeze
    g.on_state(True)  # resumed at 90: kazoo still says connected
    assert not g.due(90.0) and not g.stopped
    g.on_state(False)  # its next read finds the session expired
    assert g.due(90.2) and g.without(90.2) == pytest.approx(40.2)


def test_a_new_session_counts_only_once_answered():
    g = SessionGuard(3.0, now=0.0)
    g.alive(1.0)
    g.on_state(False)
    assert g.due(10.0)
    g.on_state(True)  # kazoo reconnected (a new session, reopen done): not proven yet
    assert g.stopped and not g.due(11.0)
    g.alive(9.0)  # an answer to a request sent before the stop does not end this loss
    assert g.stopped and g.last_alive == 9.0
    g.alive(11.0)
    assert not g.stopped
    g.alive(5.0)  # answers arrive out of order: the newest one counts
    assert g.last_alive == 11.0


def test_connected_never_fires_however_long():
    g = SessionGuard(1.0, now=0.0)
    g.on_state(True)
    assert not g.due(1e6)  # e.g. one sync that took long: kazoo says connected


def test_grace_must_be_a_positive_number():
    assert check_grace("2.5") == 2.5 and check_grace(30) == 30.0
    for bad in (0, -1, "0", "abc", None, float("nan"), float("inf"), True, ""):
        with pytest.raises(ValueError) as e:
            SessionGuard(bad, now=0.0)
        msg = str(e.value)
        assert GRACE_KEY in msg and "positive number" in msg and "\n" not in msg, msg
    with pytest.raises(ValueError, match="--session-lost-grace"):
        check_grace("-3", name="--session-lost-grace")
    assert DEFAULT_GRACE_SECS == 30.0


# -- a fenced exit in ProcessGroup --------------------------------------------------------

class FakeGroup(ProcessGroup):
    """A ProcessGroup of real child processes with the given commands instead of a
    plan's stream managers and instances."""

    def __init__(self, cmds, log_dir, fencing):
        self.cmds, self.log_dir = cmds, log_dir
        conf = dict(defaults(), **{"bittern.restart.backoff.initial.secs": 0.2,
                                   "bittern.shutdown.timeout.secs": 5.0})
        super().__init__(SimpleNamespace(name="fake", config=conf), "unused", [], False, conf=conf,
                         home=log_dir, fencing=fencing)

    def _build(self):
        for key, code in self.cmds.items():
            self._add(key, [sys.executable, "-c", code], os.path.join(self.log_dir, "%s-%s.log" % key))

    def container_of(self, key):
        return key[1] if key[0] != "instance" else 100 + key[1]


RUN = "import time; time.sleep(60)"
FENCED = f"import sys; sys.exit({EXIT_FENCED})"


def check_until(group, pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        group.check()
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_fenced_stream_manager_is_not_restarted(tmp_path):
    g = FakeGroup({("stmgr", 1): FENCED, ("stmgr", 2): RUN, ("tmaster", 0): RUN,
                   ("instance", 7): FENCED}, str(tmp_path), fencing=True)
    g.start()
    try:
        first = {k: p.pid for k, p in g.procs.items()}
        fenced = g.procs[("stmgr", 1)]
        check_until(g, lambda: g.fenced and g.procs[("instance", 7)].restarts >= 1)
        assert g.fenced == {1}
        assert fenced.fenced and fenced.restart_at is None and fenced.restarts == 0
        assert fenced.popen.returncode == EXIT_FENCED and not psutil.pid_exists(first[("stmgr", 1)])
        # an instance exiting 86 is a crash like any other (only container processes are fenced)
        assert g.procs[("instance", 7)].pid != first[("instance", 7)]
        for _ in range(10):  # checks go on (the instance keeps crashing): never restarted
            g.check()
            time.sleep(0.05)
        assert fenced.pid == first[("stmgr", 1)] and fenced.restarts == 0 and g.fenced == {1}
        assert g.procs[("stmgr", 2)].pid == first[("stmgr", 2)] and g.procs[("stmgr", 2)].alive()
        running = g.pids()
        assert first[("stmgr", 2)] in running and first[("tmaster", 0)] in running
    finally:
        g.shutdown()
    assert not g.pids()
    assert not any(psutil.pid_exists(p.pid) and psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE
                   for p in g.procs.values())


def test_fenced_topology_master_names_container_0(tmp_path):
    g = FakeGroup({("tmaster", 0): FENCED, ("stmgr", 0): RUN}, str(tmp_path), fencing=True)
    g.start()
    try:
        check_until(g, lambda: g.fenced)
        assert g.fenced == {0} and g.procs[("tmaster", 0)].restarts == 0
    finally:
        g.shutdown()
    assert not g.pids()


def test_without_fencing_a_fenced_exit_is_restarted_like_a_crash(tmp_path):
    """Local mode: EXIT_FENCED cannot happen there, and must not break anything."""
    g = FakeGroup({("stmgr", 1): FENCED, ("stmgr", 2): RUN}, str(tmp_path), fencing=False)
    g.start()
    try:
        first = g.procs[("stmgr", 1)].pid
        check_until(g, lambda: g.procs[("stmgr", 1)].restarts >= 2)
        assert not g.fenced and not g.procs[("stmgr", 1)].fenced
        assert g.procs[("stmgr", 1)].pid != first
    finally:
        g.shutdown()
    assert not g.pids()
