"""An instance's checkpoints off its loop (EFFECTIVELY_ONCE): incremental, asynchronous.

Why. Taking a checkpoint used to encode the whole state, write it and fsync it on the
instance's loop: with a large keyed state that stopped processing for as long as the
state took to encode and write (a 16 MB snapshot of 1,000,000 keys every second). Now
the loop only does what must happen at the barrier, and the rest runs on one
background thread per instance:

* on the loop (:meth:`Checkpointing.prepare`): detach the keyed store's change log
  (a swap) and encode what it names (``bittern.api.deltas.encode_delta``, O(changed);
  see instance/incremental.py for when it is a full snapshot instead). The values are
  encoded here, at the barrier, because they are stored by reference and the next
  tuple may change them. Then the caller forwards the barrier at once, as before.
* on the writer thread (:class:`CheckpointWriter`): write and fsync the file (and,
  for a compaction, first merge the parent's chain with the delta into a new base:
  the live state is never encoded whole on the loop in the steady state). Jobs run in
  checkpoint order, one at a time.
* back on the loop (:meth:`Checkpointing.poll`, a timer hook that asks to run every
  2 ms while writes are pending): CKPT_SAVED for each finished write, in order; a
  failed write is reported (``report_error``) and not answered, so the topology master
  times the checkpoint out as it always did.

Rebases (the disk backend; instance/incremental.py's rebase mode). A base of a
disk-backed store is a scan of its database (~1-2 us a key, sharing the GIL with the
loop): at millions of keys it outlasts the checkpoint timeout, and on the writer
thread every later checkpoint would queue behind it. So when its chain is too long,
checkpoint *n* is written as a plain delta, and the loop also takes, at the barrier,
a point-in-time view of the database and the other stores (``State.encode_rest``).
Once *n*'s delta is written (:meth:`Checkpointing.poll` sees it), the view goes to a
second thread, the *rebaser* (:class:`Rebaser`), which streams the base into a temp
file in *n*'s directory and replaces *n*'s file with it (``CheckpointStore.rebase``):
the same state, so *n* may be complete already. Back on the loop the policy learns
it (``rebased(n)``): chains through *n* start there. At most one rebase is in flight;
a checkpoint whose chain is still too long meanwhile takes no view (it would pin the
database's files) and the next one asks again. If *n* was pruned or abandoned
meanwhile, the rebase finds no file (``CheckpointMissing``): logged at debug level,
forgotten. A restore aborts a rebase in progress at its next key group.

A sink's ``pre_commit(n)`` stays on the loop at the barrier (instance/runtime.py
``take_checkpoint``): it moves the sink to checkpoint *n+1*, which the tuples after
the barrier belong to, so it cannot wait for the write; it comes before CKPT_SAVED(n)
because CKPT_SAVED is only sent once the write finished, later.

RESTORE. :meth:`CheckpointWriter.discard` starts a new generation: queued jobs of the
old one are skipped, a job already running finishes (files of a checkpoint that will
never complete, harmless: checkpoint ids are never reused) and its result is dropped.
As the thread runs jobs one at a time in order, no old write can land after a new
one.

Before the loop runs (``Instance.run`` starts the thread) writes happen inline, on
the caller's thread: tests that drive instances by hand (tests/unit/eosim.py) see
CKPT_SAVED at once, as before.
"""
from __future__ import annotations

import collections
import contextlib
import gc
import logging
import queue
import sys
import threading
import time
from dataclasses import dataclass

from bittern.api.deltas import apply_delta, empty_doc, encode_delta, encode_doc, read_doc
from bittern.api.diskstate import dump_base
from bittern.checkpoint import CheckpointError, CheckpointMissing, component_tasks
from bittern.wire import Op

from .incremental import COMPACT, DELTA, FULL, IncrementalPolicy

log = logging.getLogger("bittern.instance")

PENDING_POLL_SECS = 0.002  # how soon the loop looks again while writes are pending
REBASE_POLL_SECS = 0.05  # ... while only a rebase is (nothing waits for it)
IDLE_POLL_SECS = 1.0
CLOSE_WAIT_SECS = 2.0  # a stopping instance lets the write in progress finish this long


@dataclass
class Job:
    checkpoint_id: int
    epoch: int
    kind: str  # incremental.DELTA / COMPACT / FULL
    parent: int | None
    data: bytes  # a delta (DELTA, COMPACT) or a full snapshot (FULL)
    key_groups: int
    align_ms: float = 0.0
    pause_ms: float = 0.0  # the loop's part: detach + encode
    gen: int = 0
    view: object = None  # the disk backend's base: a point-in-time view of its database
    rest: tuple = ()  # ... and the other stores, packed at the barrier (State.encode_rest)
    rebase: object = None  # a RebaseJob asked for at the barrier (taken by Checkpointing.submit)


@dataclass
class RebaseJob:
    """A base of checkpoint ``checkpoint_id``'s state, to replace its delta (the rebaser)."""
    checkpoint_id: int
    view: object  # a point-in-time view of the disk-backed store at the barrier
    rest: tuple  # the other stores, packed at the barrier
    key_groups: int
    gen: int = 0


class _Discarded(Exception):
    """A rebase of an older generation (a restore came meanwhile): abandoned."""


@dataclass
class Done:
    job: Job
    ok: bool
    nbytes: int = 0
    error: BaseException | None = None
    write_ms: float = 0.0


@contextlib.contextmanager
def _yielding():
    """While a compaction merges a chain on the writer thread, the thread holds the GIL
    except in its I/O, and every millisecond it holds it is a millisecond the loop
    waits. So, meanwhile: the interpreter switches threads every millisecond (not 5),
    and the cyclic GC is off (the merge allocates and frees millions of small objects;
    a collection it triggered would run on this thread, GIL held, for as long as it
    scans). Both are restored afterwards; the merge's garbage is freed by reference
    counting."""
    interval, was_enabled = sys.getswitchinterval(), gc.isenabled()
    sys.setswitchinterval(min(interval, 0.001))
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        sys.setswitchinterval(interval)


class CheckpointWriter:
    """One thread per instance that writes checkpoint files, in the order submitted."""

    name = "checkpoint-writer"

    def __init__(self, store, task):
        self.store = store
        self.task = task
        self.gen = 0
        self.pending = 0  # submitted in this generation, result not yet taken
        self._q = queue.SimpleQueue()
        self._done = collections.deque()  # Done, appended by the thread, taken by the loop
        self._thread = None
        self._queued = 0  # jobs given to the thread (counted by the loop) ...
        self._finished = 0  # ... and let go by it, executed or skipped (counted by the thread)

    @property
    def threaded(self):
        return self._thread is not None

    @property
    def busy(self):
        """A job of any generation is queued or being executed (it may hold a view of a
        database: see Checkpointing.retire)."""
        return self._queued != self._finished

    def start(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"{self.name}-{self.task}", daemon=True)
            self._thread.start()

    def submit(self, job):
        job.gen = self.gen
        self.pending += 1
        if self._thread is None:
            self._done.append(self.execute(job))
        else:
            self._queued += 1
            self._q.put(job)

    def results(self):
        """Finished jobs of the current generation, in order (older ones are dropped)."""
        out = []
        while self._done:
            r = self._done.popleft()
            if r.job.gen == self.gen:
                self.pending -= 1
                out.append(r)
        return out

    def discard(self):
        """Forget every job submitted so far (a restore): queued ones are skipped, the
        one running finishes unseen."""
        self.gen += 1
        self.pending = 0

    def close(self, timeout=CLOSE_WAIT_SECS):
        if self._thread is not None:
            self.discard()
            self._q.put(None)
            self._thread.join(timeout)

    def _run(self):
        while True:
            job = self._q.get()
            if job is None:
                return
            try:
                if job.gen == self.gen:  # (else from before a restore: skipped)
                    self._done.append(self.execute(job))
            finally:
                job = None  # (not held while waiting for the next one)
                self._finished += 1

    def execute(self, job):
        """Write ``job``'s file (merging a compaction's chain first). Never raises."""
        t0 = time.perf_counter()
        try:
            if job.view is not None:  # a base of a disk-backed store, streamed from its database
                chunks = dump_base(job.view, job.key_groups, *job.rest)
                job.view = None  # (the iterator pins the database's files: let it go when done)
                counted = _Counted(chunks)
                try:
                    self.store.save(job.checkpoint_id, self.task, counted, parent=0)
                finally:
                    chunks.close()  # (even after an error, whose traceback keeps this frame)
                return Done(job, True, counted.n, None, (time.perf_counter() - t0) * 1000.0)
            if job.kind == COMPACT:
                with _yielding():
                    full = empty_doc(job.key_groups) if job.parent is None else \
                        self.store.resolve_doc(job.parent, self.task)
                    apply_delta(full, read_doc(job.data))
                    chunks, parent = encode_doc(full, consume=True), 0
                    del full
            else:
                chunks, parent = [job.data], (job.parent if job.kind == DELTA else 0)
            self.store.save(job.checkpoint_id, self.task, chunks, parent=parent)
            return Done(job, True, sum(len(c) for c in chunks), None, (time.perf_counter() - t0) * 1000.0)
        except Exception as e:  # noqa: BLE001 - the disk, a damaged chain: reported by the loop
            return Done(job, False, 0, e, (time.perf_counter() - t0) * 1000.0)


class Rebaser(CheckpointWriter):
    """The second thread (rebase mode): writes the base of a checkpoint whose delta is
    written and replaces the delta with it. Checkpointing keeps at most one in flight."""

    name = "checkpoint-rebaser"

    def execute(self, job):
        """Stream ``job``'s base into its checkpoint's file (CheckpointStore.rebase).
        Never raises; a discard (restore, close) abandons it at the next key group."""
        t0 = time.perf_counter()
        chunks = dump_base(job.view, job.key_groups, *job.rest)
        job.view = job.rest = None
        counted = _Counted(self._until_discarded(chunks, job))
        try:
            self.store.rebase(job.checkpoint_id, self.task, counted)
            return Done(job, True, counted.n, None, (time.perf_counter() - t0) * 1000.0)
        except Exception as e:  # noqa: BLE001 - pruned meanwhile, the disk: the loop decides
            return Done(job, False, 0, e, (time.perf_counter() - t0) * 1000.0)
        finally:
            chunks.close()  # (its iterator pins the database's files: let go now)

    def _until_discarded(self, chunks, job):
        for c in chunks:
            if job.gen != self.gen:
                raise _Discarded(f"checkpoint {job.checkpoint_id}: rebase abandoned (a restore or a stop)")
            yield c


class _Counted:
    """An iterator of byte chunks that counts their bytes."""

    def __init__(self, chunks):
        self._it, self.n = iter(chunks), 0

    def __iter__(self):
        return self

    def __next__(self):
        c = next(self._it)
        self.n += len(c)
        return c


class Checkpointing:
    """The instance's side of taking checkpoints: the policy (which file), the loop's
    part (detach + encode) and the writer thread."""

    def __init__(self, inst, store, settings, key_groups):
        """``settings``: the ``bittern.checkpoint.CheckpointSettings`` of the task."""
        self.inst = inst
        self.store = store
        self.key_groups = key_groups
        self.policy = IncrementalPolicy(settings.max_deltas, settings.keep, settings.incremental)
        self.writer = CheckpointWriter(store, inst.task)
        self.rebaser = Rebaser(store, inst.task)  # (its thread starts with the first rebase)
        self.asked = None  # a RebaseJob asked for at a barrier, submitted once its delta is written
        self.last = {}  # metrics of the last checkpoint written (and of the last rebase)
        self.retired = []  # disk-backed stores replaced by a restore, closed once the writer is idle

    def start(self):
        """The loop runs: writes go to the thread from now on."""
        self.writer.start()

    @property
    def busy(self):
        """A writer or rebaser thread may be reading a database (a base's view)."""
        return self.writer.busy or self.rebaser.busy

    @property
    def rebasing(self):
        """A rebase is asked for (its delta not yet written) or in flight."""
        return self.asked is not None or self.rebaser.pending > 0

    def close(self):
        self.asked = None
        self.rebaser.discard()  # (a rebase in progress stops at its next key group)
        self.writer.close()
        self.rebaser.close()
        if not self.busy:
            self._close_retired()

    def retire(self, keyed):
        """A restore replaced the disk-backed ``keyed``: close it once no write can be
        reading it (a base being streamed from it holds an iterator on its database)."""
        self.retired.append(keyed)
        if not self.busy and not self.writer.pending and not self.rebaser.pending:
            self._close_retired()

    def _close_retired(self):
        while self.retired:
            self.retired.pop().close()

    # -- the loop's part
    def prepare(self, checkpoint_id, state, epoch, align_ms=0.0):
        """Detach ``state``'s change log and encode checkpoint ``checkpoint_id`` (a delta,
        or a full snapshot when the policy says so): the only part of a checkpoint that
        stops the loop. Returns the :class:`Job` to :meth:`submit`."""
        t0 = time.perf_counter()
        changes = state.keyed.detach_log()  # (the runtime's stores are whole in every file)
        self.policy.rebase = state.on_disk  # (disk: a long chain is rebased beside the checkpoints)
        plan = self.policy.plan(checkpoint_id, changes)
        view = rest = rebase = None
        if plan.kind != DELTA and state.on_disk:
            # a base of a disk-backed store: written from its database by the writer thread
            # (a compaction needs no chain: the database is the state)
            view, rest, data = state.keyed.view(), state.encode_rest(), b""
        elif plan.kind == FULL:
            data = state.snapshot()
        else:
            data = encode_delta(state, plan.log, plan.parent or 0)
            if plan.rebase and not self.rebasing:  # (one in flight: the next checkpoint asks again)
                rebase = RebaseJob(checkpoint_id, state.keyed.view(), state.encode_rest(),
                                   self.key_groups.n_groups)
        pause = (time.perf_counter() - t0) * 1000.0
        return Job(checkpoint_id, epoch, plan.kind, plan.parent, data, self.key_groups.n_groups,
                   align_ms, pause, view=view, rest=rest or (), rebase=rebase)

    def submit(self, job):
        if job.rebase is not None:  # (kept here until the delta is written: the writer never sees it)
            self.asked, job.rebase = job.rebase, None
        self.writer.submit(job)

    def poll(self, now=None):
        """Timer hook: CKPT_SAVED for the writes that finished (or report their errors);
        returns seconds until it wants to run again."""
        for r in self.writer.results():
            job = r.job
            self.last.update({"__checkpoint-pause-ms": round(job.pause_ms, 3),
                              "__checkpoint-write-ms": round(r.write_ms, 3)})
            asked = self.asked if self.asked is not None and self.asked.checkpoint_id == job.checkpoint_id \
                else None
            if asked is not None:
                self.asked = None  # (failed: its view is let go here)
            if r.ok:
                self.inst.send_ctrl(Op.CKPT_SAVED, id=job.checkpoint_id, epoch=job.epoch, bytes=r.nbytes,
                                    align_ms=round(job.align_ms, 3))
                if asked is not None:  # the delta is written: its base may replace it from now on
                    if self.writer.threaded:
                        self.rebaser.start()
                    self.rebaser.submit(asked)
            else:
                self.policy.failed(job.checkpoint_id)
                self.inst.report_error(f"checkpoint {job.checkpoint_id} (writing its {job.kind} file)", r.error)
        for r in self.rebaser.results():
            self._rebased(r)
        if self.retired and not self.busy:
            self._close_retired()
        if self.writer.pending or self.retired:
            return PENDING_POLL_SECS
        return REBASE_POLL_SECS if self.rebaser.pending else IDLE_POLL_SECS

    def _rebased(self, r):
        cid = r.job.checkpoint_id
        if r.ok:
            self.policy.rebased(cid)
            self.last["__checkpoint-rebase-ms"] = round(r.write_ms, 3)
            log.debug("checkpoint %s task %s: delta replaced by a %d-byte base in %.0f ms", cid, self.inst.task,
                      r.nbytes, r.write_ms)
        elif isinstance(r.error, CheckpointMissing):
            log.debug("checkpoint %s task %s: not rebased: %s", cid, self.inst.task, r.error)
        else:
            self.inst.report_error(f"checkpoint {cid} (rebasing its delta into a base)", r.error)

    # -- what the instance learns
    def complete(self, checkpoint_id):
        """CKPT_COMMIT(checkpoint_id)."""
        self.policy.complete(checkpoint_id)

    def discard(self):
        """A restore begins: writes and rebases of the old epoch are dropped."""
        self.writer.discard()
        self.rebaser.discard()
        self.asked = None

    def restored(self, checkpoint_id, layout, component, index, n):
        """The restore of ``checkpoint_id`` (taken with ``layout``) succeeded: the next
        delta applies to it if this task restored exactly its own file there."""
        old = None if checkpoint_id is None else component_tasks(layout, component)
        if old is None:  # nothing restored: the state started empty
            self.policy.reset(None, from_empty=True)
            return
        if len(old) == n and old[index] == self.inst.task:
            try:
                depth = len(self.store.chain(checkpoint_id, self.inst.task)) - 1
            except CheckpointError as e:  # (it was just read whole)
                log.warning("checkpoint %s task %s: %s; the next checkpoint is a full one", checkpoint_id,
                            self.inst.task, e)
            else:
                self.policy.reset(checkpoint_id, depth)
                return
        # restored from other tasks' files (a rescale, or task ids that moved): no file of
        # this task holds this state, so the next checkpoint is a full snapshot
        self.policy.reset(None, from_empty=False)

    def metrics(self):
        return dict(self.last)
