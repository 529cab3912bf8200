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
from bittern.checkpoint import CheckpointError, component_tasks
from bittern.wire import Op

from .incremental import COMPACT, DELTA, FULL, IncrementalPolicy

log = logging.getLogger("bittern.instance")

PENDING_POLL_SECS = 0.002  # how soon the loop looks again while writes are pending
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

    def __init__(self, store, task):
        self.store = store
        self.task = task
        self.gen = 0
        self.pending = 0  # submitted in this generation, result not yet taken
        self._q = queue.SimpleQueue()
        self._done = collections.deque()  # Done, appended by the thread, taken by the loop
        self._thread = None
        self.busy = False  # a job is being executed (of any generation)

    @property
    def threaded(self):
        return self._thread is not None

    def start(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"checkpoint-writer-{self.task}",
                                            daemon=True)
            self._thread.start()

    def submit(self, job):
        job.gen = self.gen
        self.pending += 1
        if self._thread is None:
            self._done.append(self.execute(job))
        else:
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
            self.busy = True  # (before the check: a restore that saw it idle bumped gen first)
            try:
                if job.gen != self.gen:
                    continue  # from before a restore
                self._done.append(self.execute(job))
            finally:
                self.busy = False

    def execute(self, job):
        """Write ``job``'s file (merging a compaction's chain first). Never raises."""
        t0 = time.perf_counter()
        try:
            if job.view is not None:  # a base of a disk-backed store, streamed from its database
                counted = _Counted(dump_base(job.view, job.key_groups, *job.rest))
                job.view = None  # (the iterator pins the database's files: let it go when done)
                self.store.save(job.checkpoint_id, self.task, counted, parent=0)
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
        self.last = {}  # metrics of the last checkpoint written
        self.retired = []  # disk-backed stores replaced by a restore, closed once the writer is idle

    def start(self):
        """The loop runs: writes go to the thread from now on."""
        self.writer.start()

    def close(self):
        self.writer.close()
        if not self.writer.busy:
            self._close_retired()

    def retire(self, keyed):
        """A restore replaced the disk-backed ``keyed``: close it once no write can be
        reading it (a base being streamed from it holds an iterator on its database)."""
        self.retired.append(keyed)
        if not self.writer.busy and not self.writer.pending:
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
        plan = self.policy.plan(checkpoint_id, changes)
        view = rest = None
        if plan.kind != DELTA and state.on_disk:
            # a base of a disk-backed store: written from its database by the writer thread
            # (a compaction needs no chain: the database is the state)
            view, rest, data = state.keyed.view(), state.encode_rest(), b""
        elif plan.kind == FULL:
            data = state.snapshot()
        else:
            data = encode_delta(state, plan.log, plan.parent or 0)
        pause = (time.perf_counter() - t0) * 1000.0
        return Job(checkpoint_id, epoch, plan.kind, plan.parent, data, self.key_groups.n_groups,
                   align_ms, pause, view=view, rest=rest or ())

    def submit(self, job):
        self.writer.submit(job)

    def poll(self, now=None):
        """Timer hook: CKPT_SAVED for the writes that finished (or report their errors);
        returns seconds until it wants to run again."""
        for r in self.writer.results():
            job = r.job
            self.last = {"__checkpoint-pause-ms": round(job.pause_ms, 3),
                         "__checkpoint-write-ms": round(r.write_ms, 3)}
            if r.ok:
                self.inst.send_ctrl(Op.CKPT_SAVED, id=job.checkpoint_id, epoch=job.epoch, bytes=r.nbytes,
                                    align_ms=round(job.align_ms, 3))
            else:
                self.policy.failed(job.checkpoint_id)
                self.inst.report_error(f"checkpoint {job.checkpoint_id} (writing its {job.kind} file)", r.error)
        if self.retired and not self.writer.busy:
            self._close_retired()
        return PENDING_POLL_SECS if self.writer.pending or self.retired else IDLE_POLL_SECS

    # -- what the instance learns
    def complete(self, checkpoint_id):
        """CKPT_COMMIT(checkpoint_id)."""
        self.policy.complete(checkpoint_id)

    def discard(self):
        """A restore begins: writes of the old epoch are dropped."""
        self.writer.discard()

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
