"""Transactional sinks: output becomes visible only for complete checkpoints.

With exactly-once processing a topology is rolled back to its last complete
checkpoint on any failure and replays everything after it. A sink that wrote
straight to the outside world would then emit that output twice. A
``TransactionalSink`` instead *stages* what it is given under the checkpoint the
data belongs to, and makes it visible in two phases (two-phase commit, as
Flink's ``TwoPhaseCommitSinkFunction``): phase 1 (``pre_commit``) makes the staged
output of checkpoint *n* durable but still invisible, when the task saves its
state for *n*; phase 2 (``commit``) makes it visible once *n* is complete, that
is once every task of the topology has saved *n*.

Checkpoint ids
==============
Checkpoint ids are integers >= 1 and increase within a run. A tuple the sink
task receives after barrier *n-1* and before barrier *n* belongs to checkpoint
*n*: it is written with ``write(n, values)``. After a rollback to checkpoint *m*
the coordinator may hand out ids *m+1, m+2...* again (``recover`` has discarded
everything above *m*, so a reused id starts empty) or keep counting upwards;
both work.

The call order the runtime follows (one sink object per sink task)
==================================================================
::

    open(context, config)                    once, in the task's initialize
    recover(completed_ids, last_complete)    before the first write, with what the
                                             checkpoint store says; again after
                                             every restore (rollback)
    loop:
        write(n, values)*                    each input tuple of checkpoint n
        pre_commit(n)                        barrier n aligned, before the task's
                                             state for n is saved; it must return
                                             before the task reports n saved (if it
                                             raises, the task must not report n)
        ... writes for n+1 go on ...
        commit(n)                            when the coordinator says n is
                                             complete (may arrive after writes or
                                             pre_commit of later checkpoints; may
                                             be repeated; a lost one is covered by
                                             the next: commit(k) commits every
                                             pre-committed id <= k)
    on failure: the task (or the process) is restored to the last complete
        checkpoint m, then recover(completed_ids, m) is called before any write;
        a restarted process calls open() then recover() the same way
    close()                                  on clean shutdown (staged output stays
                                             staged; the next recover aborts it)

``recover`` resolves what a previous incarnation left: every checkpoint that was
pre-committed and is <= ``last_complete`` is committed (unless it already was);
everything else (staged and never pre-committed, or pre-committed for a
checkpoint above ``last_complete``) is aborted, because the spouts rewind to *m*
and that output will be produced again.

``abort(n)`` discards checkpoint *n*'s output (staged or pre-committed). The
runtime may use it instead of ``recover`` when it rolls a live task back past
*n*. It must not be used for a checkpoint the coordinator merely gave up on
without rolling back: that output belongs to the next checkpoint to complete,
whose ``commit`` commits it (Flink's rule: checkpoint *k* subsumes every earlier
one). A committed checkpoint cannot be aborted (``SinkError``).

Rules the driver enforces (each a ``SinkError``, to catch runtime bugs early):
``write`` and ``pre_commit`` only after ``recover``; ``write(n)`` only while *n*
is above every checkpoint already pre-committed or restored here, and not
committed; ``pre_commit(n)`` never below an earlier ``pre_commit``/restore
point; ``commit(n)`` never for a checkpoint above the last ``pre_commit``.
``pre_commit(n)`` covers everything staged under ids <= *n*. A checkpoint in
which nothing was written leaves no trace (no file, no row); committing it is
a no-op.

Writing a sink
==============
Subclass ``TransactionalSink`` and implement the primitives ``_open``,
``_write``, ``_pre_commit``, ``_commit``, ``_abort``, ``_scan`` and ``_close``
(see their docstrings): each must be idempotent and leave the durable state
either before or after it if the process dies inside it. The driver keeps the
bookkeeping, ordering and checks. ``FileSink`` and ``SqliteSink`` are the
worked examples; ``bittern.sinks.idempotent`` helps a sink whose ``_commit``
writes to a key-value store without transactions.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from ..api.component import Bolt
from ..errors import BitternError

log = logging.getLogger("bittern.sinks")


class SinkError(BitternError):
    """A transactional sink was driven out of order, or its durable state conflicts."""


@dataclass
class Inventory:
    """What a sink's durable storage holds for its task (``_scan``'s answer)."""

    staged: set = field(default_factory=set)        # written, not pre-committed
    precommitted: set = field(default_factory=set)  # phase 1 done, not visible
    committed: set = field(default_factory=set)     # visible


@dataclass
class RecoveryReport:
    """What ``recover`` did: checkpoints it committed and aborted, the checkpoints
    that were already committed, and committed checkpoints above the restore point
    (output that cannot be taken back; replays may duplicate it)."""

    committed: list
    aborted: list
    already_committed: list
    beyond_restore: list


def _check_id(n, what):
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SinkError(f"{what}: checkpoint id must be an integer >= 1, got {n!r}")
    return n


def task_of(context, default=None):
    """The task id from a ``TopologyContext`` (or anything with ``task_id``)."""
    if default is not None:
        return default
    if context is None:
        raise SinkError("the sink needs a task id: pass task= or a context with task_id")
    task = getattr(context, "task_id", None)
    if task is None and hasattr(context, "get_task_id"):
        task = context.get_task_id()
    if task is None:
        raise SinkError(f"context {context!r} has no task id")
    return task


class TransactionalSink:
    """The two-phase-commit driver; see the module docstring for the contract."""

    def __init__(self):
        self._lock = threading.RLock()
        self._opened = False
        self._recovered = False
        self._staged = set()
        self._precommitted = set()
        self._committed = set()
        self._high = 0          # highest checkpoint whose barrier passed here (or restore point)
        self.context = None
        self.config = None

    # -- the runtime's calls ------------------------------------------------------------
    def open(self, context, config):
        """Connect to the output (directory, database). Called once per incarnation."""
        with self._lock:
            if self._opened:
                raise SinkError(f"{self!r}: open() called twice")
            self.context, self.config = context, dict(config or {})
            self._open(context, self.config)
            self._opened = True

    @property
    def current_checkpoint(self):
        """The id a tuple arriving now belongs to: one above the last ``pre_commit``
        or restore point. What ``SinkBolt.process`` writes under."""
        return self._high + 1

    @property
    def committed(self):
        """Checkpoint ids whose output is visible (as far as this task knows)."""
        with self._lock:
            return sorted(self._committed)

    @property
    def pending(self):
        """Pre-committed checkpoint ids waiting for ``commit``."""
        with self._lock:
            return sorted(self._precommitted)

    def write(self, checkpoint_id, values):
        """Stage one tuple's values under ``checkpoint_id``."""
        with self._lock:
            self._require_recovered("write")
            n = _check_id(checkpoint_id, "write")
            if n <= self._high:
                raise SinkError(f"write({n}): checkpoint {self._high} was already pre-committed or restored "
                                f"here; a tuple now belongs to checkpoint {self._high + 1} or later")
            if n in self._committed:
                raise SinkError(f"write({n}): checkpoint {n} is already committed")
            self._write(n, values)
            self._staged.add(n)

    def pre_commit(self, checkpoint_id):
        """Phase 1 for checkpoint ``n``: make everything staged under ids <= n durable,
        still invisible. Idempotent for the same ``n``."""
        with self._lock:
            self._require_recovered("pre_commit")
            n = _check_id(checkpoint_id, "pre_commit")
            if n < self._high:
                raise SinkError(f"pre_commit({n}): checkpoint {self._high} was already pre-committed or "
                                f"restored here")
            for m in sorted(m for m in self._staged if m <= n):
                if self._pre_commit(m):
                    self._precommitted.add(m)
                self._staged.discard(m)
            self._high = n

    def commit(self, checkpoint_id):
        """Phase 2: checkpoint ``n`` is complete; make the output of every pre-committed
        id <= n visible. Idempotent. Returns the ids committed by this call."""
        with self._lock:
            self._require_recovered("commit")
            n = _check_id(checkpoint_id, "commit")
            if n > self._high:
                raise SinkError(f"commit({n}) before pre_commit({n}) (last pre-commit or restore point: "
                                f"{self._high}): checkpoint {n} cannot be complete")
            done = []
            for m in sorted(m for m in self._precommitted if m <= n):
                self._commit(m)
                self._precommitted.discard(m)
                self._committed.add(m)
                done.append(m)
            return done

    def abort(self, checkpoint_id):
        """Discard checkpoint ``n``'s output, staged or pre-committed. Idempotent."""
        with self._lock:
            self._require_open("abort")
            n = _check_id(checkpoint_id, "abort")
            if n in self._committed:
                raise SinkError(f"abort({n}): checkpoint {n} is already committed and visible")
            self._abort(n)
            self._staged.discard(n)
            self._precommitted.discard(n)
            if n <= self._high:  # n may be written again, unless a later id was pre-committed
                self._high = max([n - 1, *(c for c in self._committed | self._precommitted if c <= self._high)])

    def recover(self, completed_ids=(), last_complete=None):
        """Resolve what earlier incarnations left, given the checkpoint store's view:
        ``completed_ids`` (complete checkpoints it knows) and ``last_complete`` (the
        checkpoint the topology restores to; defaults to ``max(completed_ids)``, None
        when nothing is complete). Commits every pre-committed id <= last_complete,
        aborts the rest. Returns a ``RecoveryReport``."""
        with self._lock:
            self._require_open("recover")
            completed = {_check_id(c, "recover") for c in completed_ids}
            if last_complete is None and completed:
                last_complete = max(completed)
            if last_complete is not None:
                _check_id(last_complete, "recover")
            last = last_complete or 0
            self._discard_volatile()
            inv = self._scan()
            to_commit = sorted(p for p in inv.precommitted if p <= last and p not in inv.committed)
            for n in to_commit:
                self._commit(n)
            self._committed = set(inv.committed) | set(to_commit)
            # _abort removes only uncommitted traces, so it also clears staged leftovers of a
            # committed checkpoint (which the contract does not produce)
            leftovers = inv.staged | inv.precommitted
            for n in sorted(leftovers):
                self._abort(n)
            to_abort = sorted(leftovers - self._committed)
            self._staged, self._precommitted = set(), set()
            self._high = last
            beyond = sorted(c for c in self._committed if c > last)
            if beyond:
                log.warning("%r: checkpoints %s were committed but the topology restores to %s; their "
                            "output is visible and may be produced again", self, beyond, last_complete)
            self._recovered = True
            return RecoveryReport(committed=to_commit, aborted=to_abort,
                                  already_committed=sorted(inv.committed), beyond_restore=beyond)

    def close(self):
        """Release files and connections. Staged output stays staged (recover aborts it)."""
        with self._lock:
            if self._opened:
                self._close()
            self._opened = self._recovered = False

    def _require_open(self, what):
        if not self._opened:
            raise SinkError(f"{what}() before open()")

    def _require_recovered(self, what):
        self._require_open(what)
        if not self._recovered:
            raise SinkError(f"{what}() before recover(): call recover(completed_ids, last_complete) first "
                            f"(recover([], None) for a fresh topology)")

    # -- primitives (override) ----------------------------------------------------------
    def _open(self, context, config):
        """Connect; create directories or tables. Must not resolve leftovers (recover does)."""

    def _write(self, n, values):
        """Stage ``values`` under ``n``; staged data may be lost in a crash."""
        raise NotImplementedError

    def _pre_commit(self, n):
        """Make what is staged under ``n`` durable and invisible. Return False when
        nothing was staged (no trace is left), True otherwise."""
        raise NotImplementedError

    def _commit(self, n):
        """Make pre-committed ``n`` visible, atomically; a no-op if already committed
        or if nothing is pre-committed under ``n``."""
        raise NotImplementedError

    def _abort(self, n):
        """Remove every uncommitted trace of ``n`` (staged and pre-committed), durably;
        never touch committed output; a no-op when there is nothing."""
        raise NotImplementedError

    def _scan(self):
        """The durable state of this task's output as an ``Inventory``."""
        raise NotImplementedError

    def _discard_volatile(self):
        """Drop in-memory staging (buffers, open handles) before ``recover`` scans."""

    def _close(self):
        """Release resources."""


class SinkBolt(Bolt):
    """A bolt whose output goes through a ``TransactionalSink``, in every delivery mode.

    Override ``make_sink(config, context)`` to build the sink (and ``row(tup)`` to
    choose what is written; the tuple's values by default). ``initialize`` opens it.

    * EFFECTIVELY_ONCE: ``process`` writes each tuple under ``sink.current_checkpoint``;
      the runtime finds the sink as ``bolt.sink`` and drives
      ``recover``/``pre_commit``/``commit``/``abort`` on it, in the order the module
      docstring gives: output is visible once, when its checkpoint is complete.
    * ATLEAST_ONCE: tuples are written, then made durable and visible in groups (a
      ``pre_commit`` + ``commit`` of the next id, at most ``topology.batch.flush.interval.millis``
      after the first of them, or every ``FLUSH_TUPLES``), and only then acked. A failure
      before that replays them: output may be duplicated, never lost.
    * ATMOST_ONCE: written and made visible in the same groups; a crash loses what was
      not yet committed.

    ::

        class CountsOut(SinkBolt):
            def make_sink(self, config, context):
                return FileSink(config.get("counts_dir", "out"), "counts")
    """

    sink: TransactionalSink = None
    auto_ack = False  # acked once written durably (at least once), see _flush_sink
    FLUSH_TUPLES = 1000

    def make_sink(self, config, context):
        raise NotImplementedError(f"{type(self).__qualname__}.make_sink(config, context) is not implemented")

    def row(self, tup):
        return tup.values

    def initialize(self, config, context):
        self.sink = self.make_sink(config, context)
        if not isinstance(self.sink, TransactionalSink):
            raise SinkError(f"{type(self).__qualname__}.make_sink returned {self.sink!r}, "
                            f"not a TransactionalSink")
        self.sink.open(context, config)
        self._direct = config.get("topology.reliability.mode") != "EFFECTIVELY_ONCE"
        if self._direct:
            # no checkpoints: this task numbers its own commits, above what earlier
            # incarnations committed; what they left uncommitted is aborted (replayed)
            rep = self.sink.recover([], None)
            self._next = max(rep.already_committed or [0]) + 1
            self._held, self._since = [], None
            self._every = float(config.get("topology.batch.flush.interval.millis", 5)) / 1000.0

    def process(self, tup):
        if not self._direct:
            self.sink.write(self.sink.current_checkpoint, self.row(tup))
            return
        self.sink.write(self._next, self.row(tup))
        self._held.append(tup)
        if self._since is None:
            self._since = time.monotonic()
        if len(self._held) >= self.FLUSH_TUPLES:
            self._flush_sink()

    def _runtime_flush(self, now=None):
        """The runtime calls this with its periodic work (and before it flushes): commit
        and ack what waited long enough; returns seconds until it wants to run again."""
        if not self._direct or self._since is None:
            return 0.05
        wait = self._since + self._every - (now if now is not None else time.monotonic())
        if wait <= 0:
            self._flush_sink()
            return 0.05
        return wait

    def _flush_sink(self):
        """Make what was written durable and visible, then ack it."""
        held, self._held, self._since = self._held, [], None
        if not held:
            return
        n, self._next = self._next, self._next + 1
        try:
            self.sink.pre_commit(n)
            self.sink.commit(n)
        except Exception:  # noqa: BLE001 - the sink's storage: its tuples fail (and are replayed)
            log.exception("%s: commit %d of %d tuples failed; they are failed and will be replayed "
                          "(at least once)", type(self).__qualname__, n, len(held))
            try:
                self.sink.abort(n)
            except Exception:  # noqa: BLE001
                log.exception("%s: abort of %d failed too", type(self).__qualname__, n)
            for tup in held:
                self.fail(tup)
            return
        for tup in held:
            self.ack(tup)

    def close(self):
        if self.sink is not None:
            if getattr(self, "_direct", False):
                self._flush_sink()
            self.sink.close()

    cleanup = close
