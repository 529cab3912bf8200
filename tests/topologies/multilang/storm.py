"""A minimal storm.py: Storm's multilang protocol for Python components, written for
Bittern's tests (components written the way Storm's storm.py examples are:
``storm.BasicBolt`` subclasses with ``process(tup)``, ``storm.emit([...])``).

The host's serializer is told from the first byte it sends: ``{`` is JSON (each
message followed by a line ``end``), anything else msgpack (pystorm's framing).
Tuples that arrive while an emit waits for its task ids are kept for later, and
task-id lists that arrive while a tuple is awaited are kept for the next emit.
"""
import json
import os
import sys

_in = sys.stdin.buffer
_out = sys.stdout.buffer
_mode = None  # "json" | "msgpack"
_unpacker = None
pending_commands = []
pending_taskids = []
ANCHOR_TUPLE = None


def _read_json():
    lines = []
    while True:
        line = _in.readline()
        if not line:
            sys.exit(0)  # the host closed our stdin: it is gone
        line = line.rstrip(b"\r\n")
        if line == b"end":
            return json.loads(b"\n".join(lines))
        lines.append(line)


def _read_msgpack():
    while True:
        for msg in _unpacker:
            return msg
        data = _in.read1(65536)
        if not data:
            sys.exit(0)
        _unpacker.feed(data)


def read_message():
    global _mode, _unpacker
    if _mode is None:
        first = _in.peek(1)[:1]
        if not first:
            sys.exit(0)
        _mode = "json" if first in b"{[ \r\n" else "msgpack"
        if _mode == "msgpack":
            import msgpack
            _unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    return _read_json() if _mode == "json" else _read_msgpack()


def send_message(msg):
    if _mode == "msgpack":
        import msgpack
        _out.write(msgpack.packb(msg, use_bin_type=True))
    else:
        _out.write(json.dumps(msg).encode() + b"\nend\n")
    _out.flush()


def read_task_ids():
    if pending_taskids:
        return pending_taskids.pop(0)
    msg = read_message()
    while not isinstance(msg, list):
        pending_commands.append(msg)
        msg = read_message()
    return msg


def read_command():
    if pending_commands:
        return pending_commands.pop(0)
    msg = read_message()
    while isinstance(msg, list):
        pending_taskids.append(msg)
        msg = read_message()
    return msg


class Tuple:
    def __init__(self, id, component, stream, task, values):
        self.id, self.component, self.stream, self.task, self.values = id, component, stream, task, values

    def __repr__(self):
        return f"Tuple({self.id!r}, {self.component!r}, {self.stream!r}, {self.task!r}, {self.values!r})"

    def is_heartbeat(self):
        return self.task == -1 and self.stream == "__heartbeat"

    def is_tick(self):
        return self.component == "__system" and self.stream == "__tick"


def read_tuple():
    cmd = read_command()
    return Tuple(cmd["id"], cmd["comp"], cmd["stream"], cmd["task"], cmd["tuple"])


def sync():
    send_message({"command": "sync"})


def emit(tup, stream=None, anchors=None, direct_task=None, need_task_ids=True):
    """A bolt's emit; anchored to the tuple being processed by a BasicBolt."""
    if anchors is None:
        anchors = [ANCHOR_TUPLE] if ANCHOR_TUPLE is not None else []
    msg = {"command": "emit", "anchors": [a.id for a in anchors], "tuple": tup}
    if stream is not None:
        msg["stream"] = stream
    if direct_task is not None:
        msg["task"] = direct_task
    if not need_task_ids:
        msg["need_task_ids"] = False
    send_message(msg)
    if direct_task is None and need_task_ids:
        return read_task_ids()
    return None


def emit_spout(tup, id=None, stream=None, direct_task=None):
    msg = {"command": "emit", "tuple": tup}
    if id is not None:
        msg["id"] = id
    if stream is not None:
        msg["stream"] = stream
    if direct_task is not None:
        msg["task"] = direct_task
    send_message(msg)
    if direct_task is None:
        return read_task_ids()
    return None


def ack(tup):
    send_message({"command": "ack", "id": tup.id})


def fail(tup):
    send_message({"command": "fail", "id": tup.id})


def report_error(msg):
    send_message({"command": "error", "msg": msg})


def log(msg, level=2):
    send_message({"command": "log", "msg": msg, "level": level})


def metric(name, params):
    send_message({"command": "metrics", "name": name, "params": params})


def init_component():
    setup = read_command()
    pid = os.getpid()
    open(os.path.join(setup["pidDir"], str(pid)), "w").close()
    send_message({"pid": pid})
    return setup["conf"], setup["context"]


class Bolt:
    def initialize(self, conf, context):
        pass

    def process(self, tup):
        pass

    def run(self):
        conf, context = init_component()
        self.initialize(conf, context)
        while True:
            tup = read_tuple()
            if tup.is_heartbeat():
                sync()
            else:
                self.process(tup)


class BasicBolt(Bolt):
    """Anchors its emits to the input and acks it after process (fails it on error)."""

    def run(self):
        global ANCHOR_TUPLE
        conf, context = init_component()
        self.initialize(conf, context)
        while True:
            tup = read_tuple()
            if tup.is_heartbeat():
                sync()
                continue
            ANCHOR_TUPLE = tup
            try:
                self.process(tup)
                ack(tup)
            except Exception as e:
                report_error(f"{type(e).__name__}: {e}")
                fail(tup)
            ANCHOR_TUPLE = None


class Spout:
    def initialize(self, conf, context):
        pass

    def activate(self):
        pass

    def deactivate(self):
        pass

    def ack(self, id):
        pass

    def fail(self, id):
        pass

    def next_tuple(self):
        pass

    def run(self):
        conf, context = init_component()
        self.initialize(conf, context)
        while True:
            msg = read_command()
            cmd = msg["command"]
            if cmd == "next":
                self.next_tuple()
            elif cmd == "ack":
                self.ack(msg["id"])
            elif cmd == "fail":
                self.fail(msg["id"])
            elif cmd == "activate":
                self.activate()
            elif cmd == "deactivate":
                self.deactivate()
            sync()
