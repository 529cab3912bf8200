"""The wire protocol between instances, stream managers, the topology master and the CLI.

Every message is a ZeroMQ multipart message whose first frame (after a ROUTER's
identity frame) is a one-byte kind:

* ``DATA``: ``[DATA, dest_task(4 bytes), batch]`` from an instance or a peer stream
  manager; ``[DATA, batch]`` to an instance. ``batch`` is opaque to stream managers:
  ``[src_task, stream, [values, ...], runs | None]`` encoded by the topology's
  serializer (one batch per source task, stream and destination task). ``runs`` is
  ``[start, id, start, id, ...]``: the tuples from ``start`` on share ``id``, None or
  ``[root, edge, ...]``, whose edges are acked when all of them are (see
  ``instance/emitter.py``). Under
  EFFECTIVELY_ONCE a batch has a fifth element, the sender's epoch, and a checkpoint
  barrier is a DATA frame whose batch is ``[src_task, BARRIER_STREAM, checkpoint id,
  epoch]`` (see docs/EXACTLY_ONCE.md). A watermark is a DATA frame whose batch is
  ``[src_task, WATERMARK_STREAM, ts]`` (+ epoch; see bittern/time/watermarks.py).
* ``ACK``: like ``DATA``, to a spout task; the batch is ``[[root, xor, ...], [failed root, ...]]``.
* ``CTRL``: ``[CTRL, msgpack map]`` with an ``op`` key (see :class:`Op`).

Data batches are encoded by the topology's serializer (msgpack by default; pickle
only when a topology opts in); control messages are always msgpack, so nothing
pickled ever crosses a control channel.
"""
from __future__ import annotations

import pickle
import struct

import msgpack

DATA = b"D"
ACK = b"A"  # acks/fails on their way to the spout task that tracks the root
CTRL = b"C"
ROUTED = (DATA, ACK)  # kinds the stream manager forwards by destination task

_TASK = struct.Struct(">I")
task_bytes = _TASK.pack


def task_of(frame):
    return _TASK.unpack(frame)[0]


def instance_identity(task):
    return b"t%d" % task


def stmgr_identity(container, placed=0):
    """A stream manager's identity toward peers and the topology master. In cluster mode
    it carries ``placed``, the assignment version its container was placed at
    (``s<C>@<V>``): a newer copy of a moved container never shares an identity with the
    older one, and receivers tell them apart (streammgr/fencing.py)."""
    return b"s%d@%d" % (container, placed) if placed else b"s%d" % container


def stmgr_ctrl_identity(container, placed=0):
    """Peer control (backpressure) has its own connection, so it never waits behind data."""
    return b"c%d@%d" % (container, placed) if placed else b"c%d" % container


def parse_stmgr_identity(identity):
    """``(kind, container, placed)`` of a stream manager identity (kind ``b"s"`` data or
    ``b"c"`` peer control; placed 0 without a version), or None if it is not one."""
    if len(identity) < 2 or identity[:1] not in (b"s", b"c"):
        return None
    body, _, ver = identity[1:].partition(b"@")
    if not body.isdigit() or len(body) > 9 or (_ and (not ver.isdigit() or len(ver) > 15 or ver[:1] == b"0")):
        return None
    return identity[:1], int(body), int(ver) if _ else 0


class Op:
    """Control operations (the ``op`` field of a CTRL message)."""

    # instance -> stream manager (and on to the topology master)
    REGISTER = "register"  # {task, component, pid, ok, error?}
    HEARTBEAT = "heartbeat"  # {task} / {container}
    CREDIT = "credit"  # {task, n}: the instance has read n more batches
    METRICS = "metrics"  # {task, seq, metrics}
    ERROR = "error"  # {task, component, error, traceback, fatal}
    # stream manager -> topology master
    STMGR_REGISTER = "stmgr_register"  # {container, pid, tasks}
    # topology master -> stream manager -> instance
    START = "start"  # {active}
    REREGISTER = "reregister"
    ACTIVATE = "activate"
    DEACTIVATE = "deactivate"
    REPORT = "report"  # {seq}: send metrics now
    BACKPRESSURE = "backpressure"  # {on}: stream manager -> its spouts, and -> peer stream managers
    # topology master -> the stream manager of the task's container (health manager)
    RESTART_TASK = "restart_task"  # {task, pid, reason}: it SIGTERMs the instance; its supervisor restarts it
    # fencing (streammgr/fencing.py): topology master -> stream manager -> instances, and
    # stream manager -> an instance of an older placement: a newer copy of this container
    # runs elsewhere, so stop (exit bittern.proc.EXIT_FENCED) and emit nothing more
    FENCED = "fenced"  # {container, placed, newer}
    # CLI -> topology master (request/reply)
    STATUS = "status"
    GET_METRICS = "get_metrics"  # {window}: the metrics document
    ERRORS = "errors"  # {component?, limit?}: recent exceptions, newest first
    # exactly once (docs/EXACTLY_ONCE.md); stream managers relay these without reading them:
    # topology master -> every instance
    CKPT_START = "ckpt_start"  # {id, epoch}: spouts take checkpoint id (bolts ignore it)
    CKPT_COMMIT = "ckpt_commit"  # {id}: checkpoint id is complete (sinks commit)
    RESTORE = "restore"  # {id or None, epoch}: roll back to checkpoint id, enter epoch
    RESUME = "resume"  # {epoch}: every task restored; spouts may emit again
    # instance -> topology master
    CKPT_SAVED = "ckpt_saved"  # {task, id, epoch, bytes, align_ms}
    RESTORED = "restored"  # {task, epoch}
    CKPT_COMMITTED = "ckpt_committed"  # {task, id}: a sink task made checkpoint id's output visible


#: Control ops the stream manager relays as they are: topology master -> every local
#: instance, and instance -> topology master.
CKPT_TO_INSTANCES = frozenset({Op.CKPT_START, Op.CKPT_COMMIT, Op.RESTORE, Op.RESUME})
CKPT_TO_TMASTER = frozenset({Op.CKPT_SAVED, Op.RESTORED, Op.CKPT_COMMITTED})
#: The stream name of a checkpoint barrier in a DATA frame's batch.
BARRIER_STREAM = "__barrier"
#: The stream name of a watermark in a DATA frame's batch: ``[src_task, WATERMARK_STREAM,
#: ts]`` (ts None: the source is idle), plus the epoch under EFFECTIVELY_ONCE. It travels
#: in order with the data of its (source task, destination task) channel.
WATERMARK_STREAM = "__watermark"


_ctrl_packb = msgpack.Packer(use_bin_type=True).pack


def ctrl(op, **fields):
    fields["op"] = op
    return [CTRL, _ctrl_packb(fields)]


def decode_ctrl(frame):
    return msgpack.unpackb(frame, raw=False, strict_map_key=False)


class Serializer:
    """Encodes and decodes data batches."""

    def __init__(self, name="msgpack"):
        self.name = name
        if name == "msgpack":
            self.dumps = msgpack.Packer(use_bin_type=True, autoreset=True).pack
            self.loads = _msgpack_loads
        elif name == "pickle":
            self.dumps = _pickle_dumps
            self.loads = pickle.loads
        else:
            raise ValueError(f"unknown serializer {name!r}")


def _msgpack_loads(b):
    return msgpack.unpackb(b, raw=False, strict_map_key=False)


def _pickle_dumps(obj):
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
