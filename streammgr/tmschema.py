"""What the topology master accepts on its control socket (issue 18): every decoded
message is checked here before the topology master acts on it.

Pure: no I/O, no sockets. :class:`ControlSchema` is built from the plan's packing and
checks

* a stream manager's message (:meth:`ControlSchema.stmgr`), given the container the
  message comes from (its identity's): the op is one stream managers send, each field
  has its type, range and size, and **a container speaks only for itself and its own
  tasks**: ``container`` is the sender's, every task the message names (REGISTER's
  ``task``, METRICS/ERROR/CKPT_* ``task``, every key of STMGR_REGISTER's ``tasks``, the
  per-task keys of HEARTBEAT) is one of the sender's tasks in the plan, and the component
  a task reports (REGISTER, ERROR) is that task's own;
* a client's request (:meth:`ControlSchema.request`): STATUS, ACTIVATE, DEACTIVATE,
  REPORT, GET_METRICS and ERRORS with their fields.

Each returns ``(message, None)``, the message normalized (only the fields listed below,
task keys as ints, texts cut to :data:`TEXT_KEEP` characters, a missing component filled
in), or ``(None, reason)``: one line naming the op and the field. A field the topology
master reads must be listed in :data:`STMGR_OPS` or :data:`REQUEST_OPS`: the others are
left out of what it gets.
"""
from __future__ import annotations

import math
import reprlib

from bittern.wire import Op

from .metrics import GAUGES, WINDOWS, is_counter

MAX_CTRL_BYTES = 8 << 20  # a control frame larger than this is dropped before it is decoded
TEXT_KEEP = 16 * 1024  # error texts and tracebacks are cut to this many characters
NAME_MAX = 256  # component, metric and counter names, ``where``, a request's component
INT64 = 2 ** 63 - 1
PID_MAX = 2 ** 32
USER_METRICS_MAX = 256  # entries of a task's user metrics
PLAIN_NODES = 4096  # values (and keys) in a task's user metrics, all told

_short = reprlib.Repr()
_short.maxstring = _short.maxother = 40
_short.maxlist = _short.maxdict = _short.maxtuple = _short.maxset = 4
_short.maxlevel = 2


def show(value):
    """A value as a reason shows it: short, however big or deep it is."""
    return _short.repr(value)


def clip(text, keep=TEXT_KEEP):
    """``text`` cut to ``keep`` characters, saying how many were left out."""
    if not isinstance(text, str) or len(text) <= keep:
        return text
    return f"{text[:keep]}... ({len(text) - keep} more characters cut)"


class Bad(Exception):
    """A field is not what it must be (the reason, without the op)."""


class Ctx:
    """What a check may need besides the value: the sender's container and tasks, the
    plan's components, and the fields of the message checked so far."""

    def __init__(self, sender, own, component_of, done):
        self.sender, self.own, self.component_of, self.done = sender, own, component_of, done


# -- checks: callables (value, ctx) -> the value to keep, raising Bad ------------------------
def _int(v):
    return type(v) is int


def _num(v):
    return type(v) in (int, float)


class Int:
    def __init__(self, lo=0, hi=INT64):
        self.lo, self.hi = lo, hi

    def __call__(self, v, ctx):
        if not _int(v) or not self.lo <= v <= self.hi:
            raise Bad(f"{show(v)} is not an int from {self.lo} to {self.hi}")
        return v


class Num:
    """A finite int or float from ``lo`` on."""

    def __init__(self, lo=0.0):
        self.lo = lo

    def __call__(self, v, ctx):
        if not _num(v) or not math.isfinite(v) or v < self.lo:
            raise Bad(f"{show(v)} is not a finite number >= {self.lo:g}")
        return v


class Str:
    def __init__(self, most=NAME_MAX):
        self.most = most

    def __call__(self, v, ctx):
        if type(v) is not str or len(v) > self.most:
            raise Bad(f"{show(v)} is not a string of at most {self.most} characters")
        return v


def text(v, ctx):
    """An error text or traceback: any string, cut to TEXT_KEEP characters."""
    if type(v) is not str:
        raise Bad(f"{show(v)} is not a string")
    return clip(v)


def boolean(v, ctx):
    if type(v) is not bool:
        raise Bad(f"{show(v)} is not true or false")
    return v


def req(v, ctx):
    """A request's id, echoed in the reply."""
    if not (_int(v) and -INT64 - 1 <= v <= INT64) and not (type(v) is str and len(v) <= 64):
        raise Bad(f"{show(v)} is not an int or a string of at most 64 characters")
    return v


def window(v, ctx):
    if type(v) is not str or v not in WINDOWS:
        raise Bad(f"{show(v)} is not one of {', '.join(WINDOWS)}")
    return v


def _task_id(v, as_key=False):
    """An int task id, or (``as_key``) its canonical decimal string; None if neither."""
    if _int(v):
        return v
    if as_key and type(v) is str and 0 < len(v) <= 9 and v.isascii() and v.isdigit() and str(int(v)) == v:
        return int(v)
    return None


def _own(task, raw, ctx):
    if task is None:
        raise Bad(f"{show(raw)} is not a task id")
    if task not in ctx.own:
        raise Bad(f"task {task} is not one of container {ctx.sender}'s tasks ({_tasks(ctx.own)})")
    return task


def _tasks(tasks):
    ts = sorted(tasks)
    return ", ".join(map(str, ts[:8])) + (", ..." if len(ts) > 8 else "") if ts else "none"


def own_task(v, ctx):
    """A task of the sender's container (an int)."""
    return _own(_task_id(v), v, ctx)


def same_container(v, ctx):
    if not _int(v) or v != ctx.sender:
        raise Bad(f"{show(v)} is not the sender's container {ctx.sender}")
    return v


def task_component(v, ctx):
    """The component of the message's task (None: filled in)."""
    comp = ctx.component_of[ctx.done["task"]]
    if v is not None and v != comp:
        raise Bad(f"{show(v)} is not the component of task {ctx.done['task']} ({comp!r})")
    return comp


class Opt:
    """None, or what ``check`` takes."""

    def __init__(self, check):
        self.check = check

    def __call__(self, v, ctx):
        return None if v is None else self.check(v, ctx)


class Map:
    """A dict of at most ``most`` entries, each key and value checked."""

    def __init__(self, key, value, most):
        self.key, self.value, self.most = key, value, most

    def __call__(self, v, ctx):
        if type(v) is not dict:
            raise Bad(f"{show(v)} is not a map")
        if len(v) > self.most:
            raise Bad(f"a map of {len(v)} entries (at most {self.most})")
        out = {}
        for k, x in v.items():
            k2 = self.key(k, ctx)
            try:
                out[k2] = self.value(x, ctx)
            except Bad as e:
                raise Bad(f"[{show(k)}]: {e}") from None
        return out


def own_task_key(k, ctx):
    """A map key naming a task of the sender (an int or its decimal string), kept as the
    string (the per-task keys of a heartbeat, as the metrics document reads them)."""
    return str(_own(_task_id(k, as_key=True), k, ctx))


FILL = "fill"  # a field's check, when it is missing: its value comes from the check of None


class Record:
    """A dict with the fields ``fields`` (name -> (check, required: True, False or
    FILL)), checked in order; other keys are left out. ``done``: fields already known
    (kept, seen by the checks)."""

    def __init__(self, fields):
        self.fields = fields

    def __call__(self, v, ctx, done=None):
        if type(v) is not dict:
            raise Bad(f"{show(v)} is not a map")
        out = {} if done is None else done
        inner = Ctx(ctx.sender, ctx.own, ctx.component_of, out) if ctx is not None else None
        for name, (check, required) in self.fields.items():
            if name not in v and required is not FILL:
                if required:
                    raise Bad(f"{name}: missing")
                continue
            try:
                out[name] = check(v.get(name), inner)
            except Bad as e:
                raise Bad(f"{name}: {e}") from None
        return out


class Registrations:
    """STMGR_REGISTER's ``tasks``: a task of the sender (an int or its decimal string,
    kept as the int) -> its registration (:data:`REGISTRATION`), whose ``task``, when
    given, is its key."""

    def __call__(self, v, ctx):
        if type(v) is not dict:
            raise Bad(f"{show(v)} is not a map")
        if len(v) > len(ctx.own):
            raise Bad(f"{len(v)} tasks, container {ctx.sender} has {len(ctx.own)}")
        out = {}
        for k, reg in v.items():
            task = _own(_task_id(k, as_key=True), k, ctx)
            if task in out:
                raise Bad(f"task {task} twice")
            try:
                if type(reg) is dict and _task_id(reg.get("task", task)) != task:
                    raise Bad(f"task: {show(reg.get('task'))} is not its key {task}")
                out[task] = REGISTRATION_OF_KEY(reg, ctx, done={"task": task})
            except Bad as e:
                raise Bad(f"[{task}]: {e}") from None
        return out


class Plain:
    """A small plain value (a task's user metrics): None, bools, numbers, strings of
    at most ``max_str`` characters, and lists and maps (keys strings or ints) of them, at
    most ``depth`` deep and :data:`PLAIN_NODES` values all told."""

    def __init__(self, depth=3, max_str=NAME_MAX):
        self.depth, self.max_str = depth, max_str

    def __call__(self, v, ctx):
        left = [PLAIN_NODES]
        self._walk(v, self.depth, left)
        return v

    def _walk(self, v, depth, left):
        left[0] -= 1
        if left[0] < 0:
            raise Bad(f"more than {PLAIN_NODES} values")
        t = type(v)
        if v is None or t in (bool, int, float):
            return
        if t is str:
            if len(v) > self.max_str:
                raise Bad(f"a string of {len(v)} characters (at most {self.max_str})")
            return
        if t not in (list, dict):
            raise Bad(f"{show(v)}: a {t.__name__} is not a plain value")
        if depth <= 0:
            raise Bad("nested too deep")
        if t is dict:
            for k, x in v.items():
                if type(k) not in (str, int) or (type(k) is str and len(k) > self.max_str):
                    raise Bad(f"key {show(k)} is not a string of at most {self.max_str} characters or an int")
                left[0] -= 1
                self._walk(x, depth - 1, left)
        else:
            for x in v:
                self._walk(x, depth - 1, left)


def _summed(name):
    """True for a metric the topology master adds up or compares (a counter, a gauge it
    shows, a latency percentile): never None."""
    return is_counter(name) or name in GAUGES or name.endswith(("-p50", "-p99"))


def metric_value(name, v):
    """A system metric: a number (inf and NaN too: event-time gauges) or a bool; None
    for one that may be absent (a watermark before the first one)."""
    if v is None and not _summed(name):
        return v
    if type(v) not in (bool, int, float):
        raise Bad(f"{show(v)} is not a number")
    return v


def metrics(v, ctx):
    """A task's metrics: names to numbers, plus ``user`` (its user metrics)."""
    if type(v) is not dict:
        raise Bad(f"{show(v)} is not a map")
    if len(v) > 512:
        raise Bad(f"{len(v)} metrics (at most 512)")
    out = {}
    for k, x in v.items():
        if type(k) is not str or len(k) > NAME_MAX:
            raise Bad(f"name {show(k)} is not a string of at most {NAME_MAX} characters")
        try:
            out[k] = USER_METRICS(x, ctx) if k == "user" else metric_value(k, x)
        except Bad as e:
            raise Bad(f"{k}: {e}") from None
    return out


NAME = Str(NAME_MAX)
PID = Int(0, PID_MAX)
COUNT = Int(0)
_USER_NAMES = Map(NAME, lambda v, ctx: v, USER_METRICS_MAX)
_USER_VALUES = Plain(depth=4)


def user_metrics(v, ctx):
    """A task's user metrics: at most USER_METRICS_MAX names, their values plain and
    within one budget of PLAIN_NODES values all told (they are kept in every history
    point of the task's metrics)."""
    _USER_NAMES(v, ctx)
    return _USER_VALUES(v, ctx)


USER_METRICS = Opt(user_metrics)
PROBE = Record({"path": (Opt(Str(4096)), False), "nonce": (Opt(Str(256)), False),
                "error": (Opt(Str(4096)), False)})

# The fields of a task's registration: REGISTER, and each entry of STMGR_REGISTER's tasks
# (whose "task", when there, must be its key: see Registrations).
REGISTRATION = {
    "task": (own_task, True),
    "ok": (boolean, True),
    "component": (task_component, FILL),
    "pid": (Opt(PID), False),
    "container": (same_container, False),
    "sink": (Opt(boolean), False),
    "placed": (Opt(COUNT), False),
    "error": (Opt(text), False),
    "traceback": (Opt(text), False),
}
REGISTRATION_OF_KEY = Record({k: f for k, f in REGISTRATION.items() if k != "task"})

#: op -> fields (name -> (check, required)) of what stream managers send; "op" and
#: "container" are checked for every one of them.
STMGR_OPS = {
    Op.STMGR_REGISTER: {
        "pid": (PID, True),
        "tasks": (Opt(Registrations()), False),
        "probe": (Opt(PROBE), False),
    },
    Op.HEARTBEAT: {
        "counters": (Opt(Map(NAME, Num(), 64)), False),
        "queued": (Opt(COUNT), False),
        "proc": (Opt(Map(NAME, Opt(Num()), 32)), False),
        "backpressure": (Opt(boolean), False),
        "backpressure_secs": (Opt(Num()), False),
        "backpressure_secs_by_task": (Opt(Map(own_task_key, Num(), 4096)), False),
        "queued_by_task": (Opt(Map(own_task_key, COUNT, 4096)), False),
    },
    Op.REGISTER: REGISTRATION,
    Op.METRICS: {
        "task": (own_task, True),
        "metrics": (Opt(metrics), False),
        "seq": (Opt(Int(-1)), False),
        "pid": (Opt(PID), False),
        "component": (Opt(NAME), False),
    },
    Op.ERROR: {
        "task": (own_task, True),
        "component": (task_component, FILL),
        "where": (Opt(Str(NAME_MAX)), False),
        "error": (Opt(text), False),
        "traceback": (Opt(text), False),
        "fatal": (Opt(boolean), False),
        "time": (Opt(Num()), False),
    },
    Op.CKPT_SAVED: {
        "task": (own_task, True),
        "id": (COUNT, True),
        "epoch": (COUNT, True),
        "bytes": (Opt(COUNT), False),
        "align_ms": (Opt(Num()), False),
    },
    Op.RESTORED: {
        "task": (own_task, True),
        "epoch": (COUNT, True),
    },
    Op.CKPT_COMMITTED: {
        "task": (own_task, True),
        "id": (COUNT, True),
        "epoch": (Opt(COUNT), False),
    },
}

#: op -> fields of a client's request; "op" and "req" are checked for every one.
REQUEST_OPS = {
    Op.STATUS: {},
    Op.ACTIVATE: {},
    Op.DEACTIVATE: {},
    Op.REPORT: {},
    Op.GET_METRICS: {"window": (Opt(window), False)},
    Op.ERRORS: {"component": (Opt(NAME), False), "limit": (Opt(Int(0, 10 ** 6)), False)},
}


class ControlSchema:
    """The checks for one plan (its containers and their tasks)."""

    def __init__(self, packing):
        self.own = {int(c): frozenset(ts) for c, ts in packing.containers.items()}
        self.component_of = dict(packing.task_component)
        self._stmgr = {op: Record(fields) for op, fields in STMGR_OPS.items()}
        self._request = {op: Record(fields) for op, fields in REQUEST_OPS.items()}

    def stmgr(self, msg, sender):
        """Check a message from the stream manager of container ``sender`` (from its
        identity): ``(normalized message, None)`` or ``(None, reason)``."""
        if type(msg) is not dict:
            return None, f"a message is a map, not {show(msg)}"
        op = msg.get("op")
        rec = self._stmgr.get(op) if type(op) is str else None
        if rec is None:
            return None, f"op {show(op)} is not one a stream manager sends"
        if sender not in self.own:
            return None, f"{op}: container {sender} is not one of this topology's ({_tasks(self.own)})"
        ctx = Ctx(sender, self.own[sender], self.component_of, {})
        out = {"op": op}
        try:
            out["container"] = same_container(msg.get("container"), ctx)
            rec(msg, ctx, done=out)
        except Bad as e:
            return None, f"{op}: {e}"
        return out, None

    def request(self, msg):
        """Check a client's request: ``(normalized message, None)`` or ``(None, reason)``."""
        if type(msg) is not dict:
            return None, f"a request is a map, not {show(msg)}"
        op = msg.get("op")
        rec = self._request.get(op) if type(op) is str else None
        if rec is None:
            return None, f"unknown request {show(op)}"
        out = {"op": op}
        try:
            if "req" in msg:
                out["req"] = req(msg["req"], None)
            rec(msg, None, done=out)
        except Bad as e:
            return None, f"{op}: {e}"
        return out, None

    @staticmethod
    def reply_to(msg):
        """The ``req`` of a request that failed its check, if it can be echoed; else None."""
        if type(msg) is not dict or msg.get("req") is None:
            return None
        try:
            return req(msg["req"], None)
        except Bad:
            return None
