"""The checkpoint coordinator of the topology master (EFFECTIVELY_ONCE), as a pure state
machine: no I/O, no clock of its own (every call takes ``now``), deterministic.

It decides; the topology master (streammgr/tmaster.py) does what it says. Every call
returns a list of actions:

* ``Start(id, epoch)``: broadcast CKPT_START (spouts take checkpoint ``id``).
* ``Complete(id, tasks)``: every task saved ``id`` in this epoch: the caller records it
  (``CheckpointStore.mark_complete``), then broadcasts CKPT_COMMIT. If recording
  fails, it calls :meth:`CheckpointCoordinator.complete_failed`.
* ``Abandon(id, reason)``: checkpoint ``id`` will not complete (timed out, or a
  rollback began); only for the log: the next checkpoint subsumes it.
* ``Restore(id, epoch)``: broadcast RESTORE: every task rolls back to checkpoint ``id``
  (None: empty state) and enters ``epoch``. The caller adds the task layout ``id`` was
  taken with (from its metadata), so tasks find their old state after a rebalance.
  Also sent again to tasks that register during the rollback, and re-sent while
  answers are missing (a control message to an instance that was not connected is
  lost).
* ``Resume(epoch)``: every task answered RESTORED for ``epoch``: broadcast RESUME.

Life cycle. The coordinator is idle until :meth:`start` (the topology master saw every
task register). Start-up is itself a restore round: epoch + 1, RESTORE(latest complete
checkpoint); so a restarted topology master, or a whole topology restarted, goes on
from its last complete checkpoint, and every task learns the epoch from the same
message. During a rollback no checkpoint is started. After RESUME, checkpoint *n* is
started every ``interval`` seconds when none is in flight; one in flight longer than
``timeout`` seconds is abandoned and the next one is started at once. A task that
registers again after :meth:`start` (a restarted instance, or the instances of a
restarted stream manager) triggers a rollback; one that registers again during a
rollback is sent RESTORE again and awaited.

Checkpoint ids only grow (after a rollback to *m* the next id is not *m+1* but the
next unused one): a reused id could meet files a task saved for it before the
rollback.
"""
from __future__ import annotations

from dataclasses import dataclass, field

ROLLBACK_REASON = "a rollback began"  # an Abandon that is no failure of the checkpoint


@dataclass(frozen=True)
class Start:
    checkpoint_id: int
    epoch: int


@dataclass(frozen=True)
class Complete:
    checkpoint_id: int
    tasks: tuple


@dataclass(frozen=True)
class Abandon:
    checkpoint_id: int
    reason: str


@dataclass(frozen=True)
class Restore:
    checkpoint_id: int | None
    epoch: int


@dataclass(frozen=True)
class Resume:
    epoch: int


@dataclass
class _InFlight:
    checkpoint_id: int
    epoch: int
    started: float
    saved: dict = field(default_factory=dict)  # task -> {"bytes", "align_ms"}


@dataclass
class _Rollback:
    checkpoint_id: int | None
    epoch: int
    started: float
    pending: set
    last_sent: float


class CheckpointCoordinator:
    def __init__(self, tasks, interval, timeout, latest_complete=None, next_id=1, epoch=0,
                 resend_every=2.0):
        """``tasks``: every task id of the topology; ``interval``/``timeout``: seconds;
        ``latest_complete``: the newest complete checkpoint in the store (None: none);
        ``next_id``: the first id to hand out (above every id the store has seen);
        ``epoch``: the last epoch a previous topology master used (0: none)."""
        if not interval > 0:
            raise ValueError(f"checkpoint interval must be > 0, got {interval!r}")
        if not timeout > 0:
            raise ValueError(f"checkpoint timeout must be > 0, got {timeout!r}")
        self.tasks = frozenset(tasks)
        self.interval = float(interval)
        self.timeout = float(timeout)
        self.resend_every = float(resend_every)
        self.latest = latest_complete
        self.next_id = max(int(next_id), (latest_complete or 0) + 1)
        self.epoch = int(epoch)
        self.running = False
        self.inflight = None
        self.rollback = None
        self.next_due = None
        # metrics
        self.completed = 0
        self.abandoned = 0
        self.restores = 0  # rollbacks after the start-up restore
        self.last_duration = None  # seconds from CKPT_START to the last CKPT_SAVED
        self.last_bytes = None
        self.last_align_ms = None  # the longest alignment of the last complete checkpoint

    # -- introspection
    @property
    def rolling_back(self):
        return self.rollback is not None

    def metrics(self):
        return {"last_complete": self.latest, "completed": self.completed, "abandoned": self.abandoned,
                "restores": self.restores, "epoch": self.epoch,
                "in_flight": self.inflight.checkpoint_id if self.inflight else None,
                "waiting_for": sorted(self.tasks - set(self.inflight.saved)) if self.inflight else [],
                "rolling_back": self.rollback is not None,
                "last_duration_ms": None if self.last_duration is None else round(self.last_duration * 1000, 1),
                "last_bytes": self.last_bytes, "last_max_align_ms": self.last_align_ms}

    # -- events
    def start(self, now):
        """The topology runs (every task registered): the start-up restore round."""
        if self.running:
            return []
        self.running = True
        return self._begin_rollback(now, counted=False)

    def task_registered(self, task, now):
        """``task`` registered again (a new incarnation) after the start."""
        return self.tasks_registered([task], now)

    def tasks_registered(self, tasks, now):
        tasks = [t for t in tasks if t in self.tasks]
        if not self.running or not tasks:
            return []
        rb = self.rollback
        if rb is not None:
            # a new incarnation has not restored, whatever its old one answered
            rb.pending.update(tasks)
            rb.last_sent = now
            return [Restore(rb.checkpoint_id, rb.epoch)]
        return self._begin_rollback(now, counted=True)

    def on_saved(self, task, checkpoint_id, epoch, now, nbytes=0, align_ms=0.0):
        """CKPT_SAVED from ``task``."""
        f = self.inflight
        if f is None or epoch != self.epoch or checkpoint_id != f.checkpoint_id or task not in self.tasks:
            return []  # late, from before a rollback, or for an abandoned checkpoint
        f.saved[task] = (int(nbytes or 0), float(align_ms or 0.0))
        if len(f.saved) < len(self.tasks):
            return []
        self.inflight = None
        self._prev_latest = self.latest
        self.latest = f.checkpoint_id
        self.completed += 1
        self.last_duration = now - f.started
        self.last_bytes = sum(b for b, _ in f.saved.values())
        self.last_align_ms = max(a for _, a in f.saved.values())
        self.next_due = f.started + self.interval
        return [Complete(f.checkpoint_id, tuple(sorted(f.saved)))]

    def complete_failed(self, checkpoint_id):
        """The caller could not record ``checkpoint_id`` as complete: it is not."""
        if self.latest == checkpoint_id:
            self.latest = getattr(self, "_prev_latest", None)
            self.completed -= 1
            self.abandoned += 1

    def on_restored(self, task, epoch, now):
        """RESTORED from ``task``."""
        rb = self.rollback
        if rb is None or epoch != rb.epoch:
            return []
        rb.pending.discard(task)
        if rb.pending:
            return []
        self.rollback = None
        self.next_due = now + self.interval
        return [Resume(rb.epoch)]

    def tick(self, now):
        """Timers: re-send RESTORE, time a checkpoint out, start the next one."""
        if not self.running:
            return []
        rb = self.rollback
        if rb is not None:
            if now - rb.last_sent >= self.resend_every:
                rb.last_sent = now
                return [Restore(rb.checkpoint_id, rb.epoch)]
            return []
        out = []
        f = self.inflight
        if f is not None:
            if now - f.started < self.timeout:
                return []
            out.append(self._abandon(f"timed out after {self.timeout:g}s: "
                                     f"{len(f.saved)} of {len(self.tasks)} tasks saved it"))
            self.next_due = now
        if self.next_due is not None and now >= self.next_due:
            n = self.next_id
            self.next_id += 1
            self.inflight = _InFlight(n, self.epoch, now)
            self.next_due = None
            out.append(Start(n, self.epoch))
        return out

    # -- internals
    def _abandon(self, reason):
        f, self.inflight = self.inflight, None
        self.abandoned += 1
        return Abandon(f.checkpoint_id, reason)

    def _begin_rollback(self, now, counted):
        out = []
        if self.inflight is not None:
            out.append(self._abandon(ROLLBACK_REASON))
        self.epoch += 1
        if counted:
            self.restores += 1
        self.rollback = _Rollback(self.latest, self.epoch, now, set(self.tasks), now)
        self.next_due = None
        out.append(Restore(self.latest, self.epoch))
        return out
