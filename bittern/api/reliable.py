"""A spout that keeps what it emitted until it is acked and replays what failed:
the pending map every at-least-once spout needs, written once."""
from __future__ import annotations

from collections import deque

from .component import Spout
from .stream import DEFAULT_STREAM


EXHAUSTED = object()  # returned by next_item() when a bounded source has nothing more


class ReliableSpout(Spout):
    """Implement :meth:`next_item`; the helper emits each item with its id, keeps it
    until the tree is acked, and emits it again when it fails or times out::

        class Numbers(ReliableSpout):
            outputs = ["n"]
            def initialize(self, config, context):
                self.i = 0
            def next_item(self):
                if self.i < 1000:
                    self.i += 1
                    return self.i - 1, [self.i - 1]   # (tup_id, values)
                return None

    Replays go first, before new items. ``max_retries`` (None: forever) bounds the
    replays of one item; past it :meth:`on_gave_up` is called. Override ``ack`` or
    ``fail`` only with a call to ``super()``.
    """

    max_retries = None

    def next_item(self):
        """The next ``(tup_id, values)`` or ``(tup_id, values, stream)``; None if nothing
        now. Return :data:`EXHAUSTED` when the source has no more items: the spout then
        calls ``done()`` as soon as nothing is pending."""
        return None

    def on_acked(self, tup_id):
        """Called once when the tree of ``tup_id`` completed."""

    def on_gave_up(self, tup_id, values):
        """Called when ``tup_id`` failed more than ``max_retries`` times."""

    # -- the pending map --------------------------------------------------------------------
    @property
    def pending(self):
        """``{tup_id: [values, stream, failures]}`` of everything not yet acked."""
        try:
            return self._rs_pending
        except AttributeError:
            self._rs_pending, self._rs_replay = {}, deque()
            return self._rs_pending

    @property
    def replay_queue(self):
        self.pending  # noqa: B018 - creates both on first use
        return self._rs_replay

    def next_tuple(self):
        pending, replay = self.pending, self._rs_replay
        while replay:
            tup_id = replay.popleft()
            entry = pending.get(tup_id)
            if entry is not None:
                self.emit(entry[0], tup_id=tup_id, stream=entry[1])
                return
        if getattr(self, "_rs_exhausted", False):
            if not pending:
                self.done()
            return
        item = self.next_item()
        if item is None:
            return
        if item is EXHAUSTED:
            self._rs_exhausted = True
            ended = getattr(self, "_runtime_source_ended", None)
            if ended is not None:  # event time: the watermark goes to +inf (replays are late)
                ended()
            if not pending:
                self.done()
            return
        tup_id, values = item[0], item[1]
        stream = item[2] if len(item) > 2 else DEFAULT_STREAM
        if tup_id in pending:
            raise ValueError(f"{type(self).__name__}.next_item returned tup_id {tup_id!r} "
                             "that is still pending")
        pending[tup_id] = [values, stream, 0]
        self.emit(values, tup_id=tup_id, stream=stream)

    def ack(self, tup_id):
        if self.pending.pop(tup_id, None) is not None:
            self.on_acked(tup_id)

    def fail(self, tup_id):
        entry = self.pending.get(tup_id)
        if entry is None:
            return
        entry[2] += 1
        if self.max_retries is not None and entry[2] > self.max_retries:
            del self.pending[tup_id]
            self.on_gave_up(tup_id, entry[0])
        else:
            self._rs_replay.append(tup_id)
