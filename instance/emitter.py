"""The output side of an instance: schema check, grouping, per-task batches.

``emit`` is the hot path of every topology. It checks the arity against the
declared fields, asks the stream's router for destination tasks, and appends
the tuple to one batch per destination task; a batch is encoded and handed to
``send`` when it is full, when the instance goes idle, or when the flush
interval passes. Nothing here does I/O itself.
"""
from __future__ import annotations

import time

from bittern.api.stream import DEFAULT_STREAM
from bittern.errors import SchemaError
from bittern.wire import BARRIER_STREAM, DATA, WATERMARK_STREAM, task_bytes

from .acking import new_edge
from .grouping import StreamRouter, make_chooser


def build_routers(plan, component, context, key_groups=None):
    """One :class:`StreamRouter` per output stream of ``component``; ``key_groups``
    under EFFECTIVELY_ONCE (fields grouping routes by key group)."""
    tdef, packing = plan.topology, plan.packing
    comp_tasks = packing.component_tasks
    local = set(packing.containers[packing.task_container[context.task_id]])
    fields_hash = plan.config.get("topology.fields.grouping.hash", "crc32")
    routers = {}
    for stream, decl in tdef.components[component].outputs.items():
        choosers, direct_tasks = [], []
        for bolt, grouping in tdef.subscribers(component, stream):
            tasks = comp_tasks[bolt]
            if grouping.kind == "direct":
                direct_tasks.extend(tasks)
                continue
            choosers.append(make_chooser(grouping, tasks, decl["fields"], local, context, component,
                                         stream, where=f"component {bolt!r} input {component!r}",
                                         key_groups=key_groups, fields_hash=fields_hash))
        routers[stream] = StreamRouter(component, stream, decl["fields"], decl["direct"], choosers,
                                       direct_tasks)
    return routers


def downstream_tasks(plan, component):
    """Every task of every component subscribed to any stream of ``component``, whatever
    the grouping: where its checkpoint barriers go (sorted)."""
    tdef, comp_tasks = plan.topology, plan.packing.component_tasks
    out = set()
    for stream in tdef.components[component].outputs:
        for bolt, _ in tdef.subscribers(component, stream):
            out.update(comp_tasks[bolt])
    return sorted(out)


def upstream_tasks(plan, component):
    """Every task of every component ``component`` subscribes to: the input channels a
    task aligns checkpoint barriers over (each of them sends it every barrier)."""
    comp_tasks = plan.packing.component_tasks
    out = set()
    for i in plan.topology.components[component].inputs:
        out.update(comp_tasks[i.component])
    return sorted(out)


class Emitter:
    """Batches are kept per (destination task, stream) as ``[values, runs, open root]``
    and encoded as ``[src_task, stream, [values...], runs | None]``: the source and
    stream are written once per batch, not once per tuple. Order is kept per source
    task, stream and destination task, as Storm promises.

    ``runs`` (None when nothing in the batch is tracked) is a flat ``[start, id, start,
    id, ...]``: the tuples from ``start`` to the next start share ``id``, None
    (untracked) or ``[root, edge, root, edge, ...]``. An edge belongs to the whole run
    and is acked once, when the receiver has acked every tuple of the run (see
    ``instance/acking.py``). A run stays open, and takes the next tuples of its root,
    while the emitter is anchoring to one tree: a sentence's words travel as one run
    under one edge instead of one edge per word. ``open root`` is that root, 0 for an
    open untracked run, None when the last run cannot grow."""

    def __init__(self, task, component, routers, serializer, send, batch_size):
        self.task = task
        self.component = component
        self.routers = routers
        self._dumps = serializer.dumps
        self._send = send  # send(frames)
        self.batch_size = batch_size
        self.buffers = {}  # (dest task, stream) -> [values list, msgid list or None]
        self.oldest = None  # monotonic time of the oldest unflushed tuple
        self.emit_count = 0
        self.transfer_count = 0
        self._default = routers.get(DEFAULT_STREAM)
        # the fast path of emit and emit_auto: the default stream's one chooser, and its arity
        self._only = self._default.only if self._default is not None else None
        self._arity = self._default.arity if self._default is not None else -1
        # A bolt's current input, for auto-anchored emits (see emit_auto): the root of
        # its one tree (None: no single-tree anchor, take the general path) and the XOR
        # of the edges emitted under it so far.
        self.anchor_root = None
        self.anchor_acc = 0
        self.general_emit = None  # the bolt's emit for everything but the common case
        # The id ([root, edge]) of the last run emit_rooted/emit_auto started, while its
        # batch is unsent (any flush forgets it): a bolt may fold an input's whole ack
        # into it instead of sending the ack (see BoltInstance._process_tracked).
        self.last_run = None

    def _router(self, values, stream):
        router = self._default if stream == DEFAULT_STREAM else self.routers.get(stream)
        if router is None:
            raise SchemaError(f"component {self.component!r} emitted on undeclared stream {stream!r} "
                              f"(streams: {', '.join(self.routers) or 'none'})")
        if len(values) != router.arity:
            raise SchemaError(f"component {self.component!r} stream {stream!r}: emitted {len(values)} "
                              f"values {list(values)!r:.80} for fields {router.fields}")
        return router

    def _new_buffer(self, key):
        self.buffers[key] = buf = [[], None, None]
        if self.oldest is None:
            self.oldest = time.monotonic()
        return buf

    def _open_run(self, buf, root):
        """Start a run of ``root`` under a fresh edge at the end of ``buf`` and return the
        edge (once per run, not per tuple)."""
        e = new_edge()
        self.last_run = rid = [root, e]
        self._start_run(buf, rid, root)
        return e

    @staticmethod
    def _start_run(buf, msgid, root):
        """Start a run of tuples with id ``msgid`` at the end of ``buf``; it stays open
        for ``root`` (see the class)."""
        runs, n = buf[1], len(buf[0])
        if runs is None:
            buf[1] = [0, msgid] if n == 0 else [0, None, n, msgid]
        else:
            runs.append(n)
            runs.append(msgid)
        buf[2] = root

    def emit(self, values, stream=DEFAULT_STREAM, anchors=None, direct_task=None, need_task_ids=False):
        """An untracked emit (at-most-once, or a bolt emit with no anchors)."""
        only = self._only
        if only is not None and stream == DEFAULT_STREAM and direct_task is None \
                and len(values) == self._arity:
            tasks = only(values)
        else:
            tasks = self._router(values, stream).route(values, direct_task)
        bufs = self.buffers
        for t in tasks:
            key = (t, stream)
            buf = bufs.get(key) or self._new_buffer(key)
            if buf[1] is not None and buf[2] != 0:
                self._start_run(buf, None, 0)
            vals = buf[0]
            vals.append(values)
            if len(vals) >= self.batch_size:
                self._flush_one(key, buf)
        self.emit_count += 1
        self.transfer_count += len(tasks)
        return list(tasks) if need_task_ids else None

    def emit_rooted(self, values, stream, root, direct_task=None, need_task_ids=False):
        """The common tracked emit (a spout's tuple, or a bolt's anchored to one tuple of
        one tree): the tuple joins the open run of ``root`` toward each destination, or
        starts one under a fresh edge. Returns ``(tasks, XOR of the new edges)``."""
        only = self._only
        if only is not None and stream == DEFAULT_STREAM and direct_task is None \
                and len(values) == self._arity:
            tasks = only(values)
        else:
            tasks = self._router(values, stream).route(values, direct_task)
        bufs = self.buffers
        xor = 0
        for t in tasks:
            key = (t, stream)
            buf = bufs.get(key) or self._new_buffer(key)
            if buf[2] != root:
                xor ^= self._open_run(buf, root)
            vals = buf[0]
            vals.append(values)
            if len(vals) >= self.batch_size:
                self._flush_one(key, buf)
        self.emit_count += 1
        self.transfer_count += len(tasks)
        return (list(tasks) if need_task_ids else tasks), xor

    def emit_auto(self, values, stream=DEFAULT_STREAM, anchors=None, direct_task=None,
                  need_task_ids=False):
        """A reliable bolt's ``emit``. The common case (auto-anchored to the current input,
        which belongs to one tree, default stream, one grouping) is done here in one call,
        because it runs once per emitted tuple; everything else goes to ``general_emit``.
        Edge ids have their low bit set: never zero, and as random as 63 bits can be. A
        new edge is XORed into the input's ``anchor_acc``: the input's ack creates it."""
        root = self.anchor_root
        only = self._only
        if (root is None or only is None or anchors is not None or direct_task is not None
                or stream != DEFAULT_STREAM or len(values) != self._arity):
            return self.general_emit(values, stream, anchors, direct_task, need_task_ids)
        tasks = only(values)
        bufs = self.buffers
        xor = 0
        for t in tasks:
            key = (t, stream)
            buf = bufs.get(key) or self._new_buffer(key)
            if buf[2] != root:
                xor ^= self._open_run(buf, root)
            vals = buf[0]
            vals.append(values)
            if len(vals) >= self.batch_size:
                self._flush_one(key, buf)
        if xor:
            self.anchor_acc ^= xor
        self.emit_count += 1
        self.transfer_count += len(tasks)
        return list(tasks) if need_task_ids else None

    def emit_tracked(self, values, stream, anchor_roots, direct_task=None, need_task_ids=False):
        """Emit a tuple anchored to tuples whose roots are ``anchor_roots`` (one list of
        root ids per anchor). As in Storm, every (destination, anchor) pair gets a fresh
        edge id, XORed into the new tuple's id under each of that anchor's roots.
        Returns ``(tasks, [XOR of the edges drawn for each anchor])``."""
        tasks = self._router(values, stream).route(values, direct_task)
        bufs = self.buffers
        xors = [0] * len(anchor_roots)
        single = len(anchor_roots) == 1 and len(anchor_roots[0]) == 1
        for t in tasks:
            if single:
                e = new_edge()
                xors[0] ^= e
                msgid = [anchor_roots[0][0], e]
            else:
                ids = {}
                for k, roots in enumerate(anchor_roots):
                    e = new_edge()
                    xors[k] ^= e
                    for r in roots:
                        ids[r] = ids.get(r, 0) ^ e
                msgid = [x for pair in ids.items() for x in pair]
            key = (t, stream)
            buf = bufs.get(key) or self._new_buffer(key)
            self._start_run(buf, msgid, None)  # a run of one: its edges are its own
            vals = buf[0]
            vals.append(values)
            if len(vals) >= self.batch_size:
                self._flush_one(key, buf)
        self.emit_count += 1
        self.transfer_count += len(tasks)
        return (list(tasks) if need_task_ids else tasks), xors

    def _frame(self, stream, buf):
        """A batch as it goes on the wire (once per batch, not per tuple)."""
        return [self.task, stream, buf[0], buf[1]]

    def _flush_one(self, key, buf):
        payload = self._dumps(self._frame(key[1], buf))
        del self.buffers[key]
        self.last_run = None
        if not self.buffers:
            self.oldest = None
        self._send([DATA, task_bytes(key[0]), payload])

    def flush(self):
        if not self.buffers:
            return
        bufs, self.buffers, self.oldest, self.last_run = self.buffers, {}, None, None
        dumps, send, frame = self._dumps, self._send, self._frame
        for (task, stream), buf in bufs.items():
            send([DATA, task_bytes(task), dumps(frame(stream, buf))])

    def due(self, now, interval):
        return self.oldest is not None and now - self.oldest >= interval

    def watermark_payload(self, w):
        """A watermark batch (``w`` None: the source is idle); see bittern/wire.py."""
        return self._dumps([self.task, WATERMARK_STREAM, w])


class EpochEmitter(Emitter):
    """The emitter under EFFECTIVELY_ONCE: batches carry the epoch as a fifth element
    (``[src, stream, values, msgids, epoch]``), so a receiver can drop data from before
    a rollback; and it sends checkpoint barriers. A subclass, so that the other modes'
    flushes do not test a flag."""

    epoch = 0

    def _frame(self, stream, buf):
        return [self.task, stream, buf[0], buf[1], self.epoch]

    def watermark_payload(self, w):
        return self._dumps([self.task, WATERMARK_STREAM, w, self.epoch])

    def drop(self):
        """Forget every unsent batch (a rollback: they belong to the old epoch)."""
        self.buffers, self.oldest, self.last_run = {}, None, None

    def send_barrier(self, checkpoint_id, tasks):
        """Flush everything pending, then barrier ``checkpoint_id`` to each of ``tasks``:
        on each path it follows the data emitted before it."""
        self.flush()
        payload = self._dumps([self.task, BARRIER_STREAM, checkpoint_id, self.epoch])
        for t in tasks:
            self._send([DATA, task_bytes(t), payload])
