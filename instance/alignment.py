"""Barrier alignment for checkpoints (Flink's asynchronous barrier snapshots), as a
pure state machine: no clocks, no I/O, deterministic.

A task with several input channels (a channel is one upstream ``(task, stream)``
pair) takes its snapshot for checkpoint *n* only when every channel has
delivered barrier *n*: then the snapshot reflects exactly the tuples that came
before *n* on every input. While waiting, a channel that already delivered *n*
is *blocked*: its batches belong after the snapshot and are buffered, in
arrival order, while the other channels keep flowing.

The caller's loop::

    r = aligner.on_data(ch, len(batch), batch)
    if r is DELIVER:        process(batch)
    elif r is BUFFER:       pass                          # held by the aligner
    else:                   # Overflow(n): checkpoint n abandoned, see below
        for ch, b in aligner.release(): process(b)        # includes this batch, last
    r = aligner.on_barrier(ch, n)
    Aligned(n)   -> pre_save(n); save state for n; forward barrier n on every
                    output; then process every batch of aligner.release()
    Abandoned(n) -> log it; process every batch of aligner.release()
    Ignored(...) -> log it (a stale or duplicate barrier)
    None         -> still waiting for other channels

After ``Aligned``, ``Abandoned`` or ``Overflow`` the caller must call
``release()`` before feeding more input (the aligner raises otherwise: the
buffered batches must be processed before anything that arrives later).

Decisions
---------
* **A newer barrier abandons an older alignment.** Barrier *m > n* arriving while
  *n* is being aligned means some upstream gave up *n* (it overflowed, or the
  topology master timed *n* out and started *m*). Checkpoint *n* can no longer
  complete here, so it is abandoned (``Abandoned(n)``): everything buffered is
  released, and alignment of *m* starts with the channel that delivered it.
  Buffered batches are all from before barrier *m* on their channels, so
  processing them before snapshot *m* is right.
* **Older and duplicate barriers are ignored** (``Ignored``): a barrier for a
  checkpoint that was completed or abandoned here, or one a channel already
  delivered.
* **Bounded buffering: overflow abandons the checkpoint.** When the buffered
  tuples would exceed ``max_buffered`` (``bittern.barrier.buffer.max.tuples``),
  ``on_data`` returns ``Overflow(n)``: checkpoint *n* is abandoned, this batch is
  appended to the buffer and ``release()`` hands back everything in order. The
  alternatives are worse: blocking the input forever (a slow or dead upstream
  would stall the whole topology, with backpressure spreading to the spouts) or
  dropping data (breaks exactly-once). Abandoning costs only the checkpoint:
  *n*'s later barriers are ignored, the topology master times *n* out and starts
  *n+1* (a task that overflowed may also tell it so, to skip the wait). No
  tuple is lost and per-channel order is kept. Downstream tasks that were
  aligning on *n* are unblocked by barrier *n+1* or by their own bound.
* **Channels that go away** (``remove_channel``: the upstream finished or is
  gone) stop counting: if every remaining channel has delivered *n*, that
  completes the alignment. Their buffered batches stay, in order, for
  ``release()``. A task with one channel aligns on every barrier at once and
  never buffers.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

DELIVER = "DELIVER"
BUFFER = "BUFFER"


@dataclass(frozen=True)
class Aligned:
    """Every channel delivered barrier ``checkpoint_id``: snapshot, forward, release.
    ``abandoned``: an older checkpoint given up by the same call, if any."""
    checkpoint_id: int
    abandoned: int | None = None


@dataclass(frozen=True)
class Abandoned:
    """Alignment of ``checkpoint_id`` was given up because barrier ``by`` arrived."""
    checkpoint_id: int
    by: int


@dataclass(frozen=True)
class Overflow:
    """The buffer bound was hit while aligning ``checkpoint_id``, which is abandoned."""
    checkpoint_id: int
    buffered_tuples: int


@dataclass(frozen=True)
class Ignored:
    """A barrier that changes nothing (stale or duplicate); ``reason`` is for the log."""
    checkpoint_id: int
    channel: object
    reason: str


class BarrierAligner:
    def __init__(self, input_channels, max_buffered=100_000):
        """``input_channels``: the upstream ``(task, stream)`` pairs (any hashables);
        ``max_buffered``: the most tuples held while aligning (0: never buffer, so any
        data on a blocked channel abandons the checkpoint)."""
        if isinstance(max_buffered, bool) or not isinstance(max_buffered, int) or max_buffered < 0:
            raise ValueError(f"max_buffered must be a whole number >= 0, got {max_buffered!r}")
        self._channels = set(input_channels)
        self.max_buffered = max_buffered
        self._current = None        # the checkpoint being aligned, or None
        self._done = set()          # channels that delivered barrier _current
        self._last = None           # highest checkpoint aligned or abandoned here
        self._buffer = deque()      # (channel, batch, n_tuples), arrival order
        self._buffered = 0
        self._must_release = False

    # -- introspection
    @property
    def channels(self):
        return frozenset(self._channels)

    @property
    def aligning(self):
        """The checkpoint being aligned, or None."""
        return self._current

    @property
    def last(self):
        """The highest checkpoint aligned or abandoned here (later barriers must be newer)."""
        return self._last

    @property
    def blocked(self):
        """Channels whose input is buffered (they delivered the barrier being aligned)."""
        return frozenset(self._done)

    @property
    def buffered_tuples(self):
        return self._buffered

    @property
    def release_pending(self):
        return self._must_release

    # -- input
    def _check(self, channel):
        if self._must_release:
            raise RuntimeError("BarrierAligner: call release() (and process what it returns) before "
                               "feeding more input")
        if channel not in self._channels:
            raise KeyError(f"BarrierAligner: unknown input channel {channel!r}")

    def on_data(self, channel, batch_len, batch=None):
        """A batch of ``batch_len`` tuples arrived on ``channel``: DELIVER, BUFFER (the
        aligner keeps ``batch``), or ``Overflow(n)`` (``release()`` returns it, last)."""
        self._check(channel)
        if channel not in self._done:
            return DELIVER
        self._buffer.append((channel, batch, batch_len))
        self._buffered += batch_len
        if self._buffered > self.max_buffered:
            n = self._current
            self._finish()
            return Overflow(n, self._buffered)
        return BUFFER

    def on_barrier(self, channel, checkpoint_id):
        """Barrier ``checkpoint_id`` arrived on ``channel``: None (waiting), ``Aligned``,
        ``Abandoned`` (of the older checkpoint; alignment of this one has begun) or
        ``Ignored``."""
        self._check(channel)
        n = checkpoint_id
        if self._last is not None and n <= self._last:
            return Ignored(n, channel, f"barrier {n} from {channel!r} is stale: checkpoint {self._last} "
                                       f"was already aligned or abandoned here")
        abandoned = None
        if self._current is not None:
            if n < self._current:
                return Ignored(n, channel, f"barrier {n} from {channel!r} is stale: aligning "
                                           f"checkpoint {self._current}")
            if n == self._current:
                if channel in self._done:
                    return Ignored(n, channel, f"duplicate barrier {n} from {channel!r}")
                self._done.add(channel)
                return self._maybe_aligned()
            abandoned = self._last = self._current  # newer barrier: give up the older one
        self._current = n
        self._done = {channel}
        aligned = self._maybe_aligned()
        if abandoned is None:
            return aligned
        self._must_release = True  # the batches buffered for the abandoned checkpoint
        # aligning at once needs a single channel, which cannot have been aligning an
        # older checkpoint; kept general all the same
        return Aligned(n, abandoned) if aligned is not None else Abandoned(abandoned, n)

    def remove_channel(self, channel):
        """``channel`` finished (its upstream is gone): None, or ``Aligned(n)`` if it was
        the last channel that had not delivered barrier n. Removing an unknown channel
        does nothing. Its batches already buffered stay, in order, for ``release()``."""
        if self._must_release:
            raise RuntimeError("BarrierAligner: call release() before removing a channel")
        if channel not in self._channels:
            return None
        self._channels.discard(channel)
        if self._current is None:
            return None
        self._done.discard(channel)
        return self._maybe_aligned()

    def release(self):
        """The buffered batches as ``(channel, batch)`` in arrival order; clears them."""
        out = [(ch, b) for ch, b, _ in self._buffer]
        self._buffer.clear()
        self._buffered = 0
        self._must_release = False
        return out

    # -- internals
    def _maybe_aligned(self):
        if self._done >= self._channels:
            n = self._current
            self._finish()
            return Aligned(n)
        return None

    def _finish(self):
        """End the current alignment (aligned or abandoned): unblock every channel."""
        self._last = self._current
        self._current = None
        self._done = set()
        self._must_release = True
