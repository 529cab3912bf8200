"""Storm multilang components: a spout or bolt that is an external command.

:class:`ShellBolt` and :class:`ShellSpout` are ordinary Bittern components hosted by
an instance like any other. They start the component's command (cwd: the topology
file's directory), speak Storm's multilang protocol to it over its stdin/stdout
(:mod:`bittern.multilang.codec`: JSON + ``end`` lines, or pystorm's msgpack), and
translate:

* spouts are synchronous, as in Storm: ``next``/``ack``/``fail``/``activate``/
  ``deactivate`` are each answered by any number of emits, logs, errors and metrics,
  then ``sync``, within ``topology.subprocess.timeout.secs``;
* bolts are asynchronous: input tuples are written to the child under opaque ids and
  the child emits, acks and fails them whenever it likes; its stdout is one more file
  descriptor the instance's loop waits on (``Instance.watch``). An emit that wants
  task ids gets them as the next message the host writes, so they interleave
  correctly with tuples already queued. A heartbeat tuple goes out every second; a
  child that says nothing for ``topology.subprocess.timeout.secs`` after one is
  dead. At most ``topology.shellbolt.max.pending`` tuples wait to be written to the
  child; beyond that ``process`` waits, the instance stops reading its input, and
  backpressure builds upstream.

The child learns the serializer from ``$BITTERN_MULTILANG_SERIALIZER`` (a pystorm
component run without ``-s`` follows it: bittern/compat/streamparse.py). With
``topology.debug`` every emit is logged (``emitting: <stream> <values>``), as Storm does.

The subprocess belongs to its instance: the child's death (exit, protocol garbage,
heartbeat timeout, acking an unknown id) ends the instance with a clear error
(``Crash``; the supervisor restarts it, its pending tuples time out and are
replayed), and the child dies with the instance (``PR_SET_PDEATHSIG``). Its stderr
goes to the instance's log.
"""
from __future__ import annotations

import collections
import ctypes
import errno
import fcntl
import itertools
import logging
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from bittern.api.component import Bolt, Spout
from bittern.api.stream import DEFAULT_STREAM
from bittern.multilang.codec import ProtocolError, codec

from .runtime import Crash

log = logging.getLogger("bittern.instance")

COMMAND_KEY = "multilang.command"
SCRIPT_KEY = "multilang.script"
# Tells the child which serializer the host speaks (pystorm children have no other way to know)
SERIALIZER_ENV = "BITTERN_MULTILANG_SERIALIZER"
HEARTBEAT_EVERY = 1.0
READ_CHUNK = 65536
STDERR_TAIL = 20
# Storm's ShellLogLevel: TRACE, DEBUG, INFO, WARN, ERROR
LOG_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


class ShellError(Exception):
    """What a multilang component did wrong (reported as the instance's error)."""


class ShellMetric:
    """A metric the child updates with ``{"command": "metrics", "name", "params"}``:
    numbers are added up, a dict of numbers adds per key, anything else is assigned."""

    def __init__(self):
        self.value = None

    def update(self, params):
        v = self.value
        if isinstance(params, (int, float)) and not isinstance(params, bool):
            self.value = (v if isinstance(v, (int, float)) else 0) + params
        elif isinstance(params, dict) and all(isinstance(x, (int, float)) for x in params.values()):
            d = v if isinstance(v, dict) else {}
            for k, x in params.items():
                d[k] = d.get(k, 0) + x
            self.value = d
        else:
            self.value = params

    def get_value_and_reset(self):
        v, self.value = self.value, None
        return v


def _die_with_parent():
    """In the child before exec: get SIGKILL when the instance process dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the child then sees EOF on stdin
        pass


def resolve_command(conf, topology_file):
    """The argv and cwd of a component: ``multilang.command`` + ``multilang.script``,
    the script resolved against the topology file's directory (or its ``resources/``,
    like Storm's multilang/resources)."""
    cmd = conf.get(COMMAND_KEY) or []
    if isinstance(cmd, str):
        cmd = [cmd]
    cmd = [str(c) for c in cmd]
    script = conf.get(SCRIPT_KEY) or ""
    base = os.path.dirname(os.path.abspath(topology_file)) if topology_file else os.getcwd()
    if script:
        if not os.path.isabs(script):
            cands = [os.path.join(base, script), os.path.join(base, "resources", script)]
            found = [c for c in cands if os.path.exists(c)]
            if not found:
                raise ShellError(f"multilang script {script!r} not found (looked in {', '.join(cands)})")
            script = found[0]
        cmd.append(script)
    if not cmd:
        raise ShellError(f"no command given ({COMMAND_KEY} is empty); declare the component with "
                         "bittern.ShellBolt.spec(command=..., script=...)")
    return cmd, base


def storm_context(plan, task, component):
    """The ``context`` of the handshake, with Storm's key names."""
    tdef, pk = plan.topology, plan.packing
    cdef = tdef.components[component]
    targets = {}
    for c in tdef.components.values():
        for i in c.inputs:
            if i.component == component:
                targets.setdefault(i.stream, {})[c.name] = i.grouping.to_dict()
    sources, source_fields = {}, {}
    for i in cdef.inputs:
        sources.setdefault(i.component, {})[i.stream] = i.grouping.to_dict()
        source_fields.setdefault(i.component, {})[i.stream] = \
            list(tdef.components[i.component].outputs[i.stream]["fields"])
    return {"task->component": {str(t): c for t, c in pk.task_component.items()},
            "taskid": task, "componentid": component,
            "stream->outputfields": {s: list(d["fields"]) for s, d in cdef.outputs.items()},
            "stream->target->grouping": targets,
            "source->stream->grouping": sources,
            "source->stream->fields": source_fields}


class _ShellComponent:
    """What ShellSpout and ShellBolt share: the subprocess, the codec, messages."""

    _shell_kind = "component"

    def _runtime_attach(self, inst):
        self._inst = inst

    # -- start ----------------------------------------------------------------------
    def _start(self, config, context):
        inst = self._inst
        self._name = context.component
        self._task = context.task_id
        self._who = f"multilang {self._shell_kind} {self._name!r} task {self._task}"
        self._timeout = float(config["topology.subprocess.timeout.secs"])
        self._codec = codec(str(config["topology.multilang.serializer"]).lower())
        self._log = logging.getLogger(f"{self._name}[{self._task}]")
        self._debug = bool(config.get("topology.debug"))  # Storm: log every tuple emitted
        self._metrics = {}
        self._dead = False
        argv, cwd = resolve_command(config, inst.plan.topology.source.get("file"))
        self._argv = argv
        self._who += f" ({' '.join(argv)})"
        self._piddir = tempfile.mkdtemp(prefix=f"bittern-{self._name}-{self._task}-")
        try:
            self._proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, bufsize=0, close_fds=True,
                                          preexec_fn=_die_with_parent,
                                          env=dict(os.environ, **{SERIALIZER_ENV: self._codec.name}))
        except OSError as e:
            raise ShellError(f"{self._who} cannot be started: {e}") from None
        self._stdin, self._stdout = self._proc.stdin.fileno(), self._proc.stdout.fileno()
        self._stderr_tail = collections.deque(maxlen=STDERR_TAIL)
        self._stderr_thread = threading.Thread(target=self._read_stderr, daemon=True,
                                               name=f"stderr {self._name}[{self._task}]")
        self._stderr_thread.start()
        self._inbox = collections.deque()  # messages read and not handled yet
        self._last_heard = time.monotonic()
        self._write_now({"conf": _plain(config), "pidDir": self._piddir,
                         "context": storm_context(inst.plan, self._task, self._name)})
        deadline = time.monotonic() + self._timeout
        while True:
            msg = self._next_message(deadline, "the handshake's {\"pid\": N}")
            if isinstance(msg, dict) and "pid" in msg:
                self._pid = msg["pid"]
                break
            self._handle_side(msg)
        self._log.info("%s started: pid %s, %s serializer", self._who, self._pid, self._codec.name)

    def _read_stderr(self):
        for raw in iter(self._proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._stderr_tail.append(line)
            self._log.info("stderr: %s", line)

    # -- writing ----------------------------------------------------------------------
    def _write_now(self, msg):
        """A blocking write (the handshake, spout commands)."""
        data = memoryview(self._codec.encode(msg))
        try:
            while data:
                data = data[os.write(self._stdin, data):]
        except (BrokenPipeError, OSError):
            self._child_gone("its stdin closed")

    # -- reading ----------------------------------------------------------------------
    def _read_available(self, wait=0.0):
        """Read what the child wrote (waiting up to ``wait`` seconds for something);
        decode it into ``_inbox``."""
        fd = self._stdout
        if wait > 0:
            r, _, _ = select.select([fd], [], [], wait)
            if not r:
                return
        while True:
            try:
                data = os.read(fd, READ_CHUNK)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise
            if not data:
                self._child_gone("its stdout closed")
            self._last_heard = time.monotonic()
            try:
                self._inbox.extend(self._codec.feed(data))
            except ProtocolError as e:
                self._fail_protocol(e)
            if len(data) < READ_CHUNK or not self._nonblocking:
                return

    _nonblocking = False

    def _next_message(self, deadline, what):
        """The next message, waiting for it until ``deadline`` (synchronous exchanges)."""
        while not self._inbox:
            left = deadline - time.monotonic()
            if left <= 0:
                self._die(f"{self._who} sent nothing for {self._timeout:g} s while the host waited "
                          f"for {what} (topology.subprocess.timeout.secs)")
            self._read_available(wait=min(left, 1.0))
            if not self._inbox and self._proc.poll() is not None:
                self._child_gone("it exited")
        return self._inbox.popleft()

    # -- messages both kinds handle ------------------------------------------------------
    def _log_emit(self, msg):
        """topology.debug: one line per emit, ``emitting: <stream> <values>`` (Python literals)."""
        self._log.info("emitting: %r %r%s", msg.get("stream") or DEFAULT_STREAM, msg.get("tuple") or [],
                       f" to task {msg['task']}" if msg.get("task") is not None else "")

    def _handle_side(self, msg):
        """log / error / metrics (and sync, which only matters to the caller)."""
        if not isinstance(msg, dict):
            self._die(f"{self._who} sent {msg!r} where a command was expected")
        cmd = msg.get("command")
        if cmd == "log":
            level = msg.get("level", 2)
            self._log.log(LOG_LEVELS.get(level, logging.INFO) if isinstance(level, int) else logging.INFO,
                          "%s", msg.get("msg"))
        elif cmd == "error":
            self._inst.report_error("multilang component", ShellError(str(msg.get("msg"))))
        elif cmd == "metrics":
            name = msg.get("name")
            if not isinstance(name, str) or not name:
                self._die(f"{self._who} sent a metrics message without a name: {msg!r}")
            m = self._metrics.get(name)
            if m is None:
                m = self._metrics[name] = self.context.register_metric(name, ShellMetric())
            m.update(msg.get("params"))
        elif cmd == "sync":
            pass
        else:
            self._die(f"{self._who} sent an unknown command {cmd!r}: {msg!r}")

    # -- death -----------------------------------------------------------------------------
    def _fail_protocol(self, e):
        self._die(f"{self._who} wrote something to stdout that is not a multilang message: "
                  f"{e.offending!r} ({e.reason}). Is there a print() in the component? A multilang "
                  "component must write only protocol messages to stdout; log with the protocol's "
                  "log command or to stderr")

    def _child_gone(self, how):
        code = None
        try:
            code = self._proc.wait(timeout=5.0)  # its stdout closed: it is exiting
        except subprocess.TimeoutExpired:
            pass
        self._stderr_thread.join(timeout=1.0)
        tail = "\n".join(self._stderr_tail)
        self._die(f"{self._who} died: {how}" + (f", exit code {code}" if code is not None else "")
                  + (f"; last lines of its stderr:\n{tail}" if tail else ""))

    def _die(self, reason):
        """The component is broken: report, kill the child, end the instance."""
        if not self._dead:
            self._dead = True
            try:  # (report_error logs it too)
                self._inst.report_error("multilang component", ShellError(reason))
            except Exception:  # noqa: BLE001 - reporting must not hide the crash
                pass
            self._kill()
        raise Crash(reason)

    def _kill(self):
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    proc.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    pass
        piddir = getattr(self, "_piddir", None)
        if piddir:
            shutil.rmtree(piddir, ignore_errors=True)

    def close(self):
        self._dead = True
        self._kill()


def _plain(conf):
    """The config as JSON/msgpack can carry it."""
    out = {}
    for k, v in conf.items():
        out[k] = v if isinstance(v, (str, int, float, bool, list, dict, type(None))) else str(v)
    return out


class ShellSpout(_ShellComponent, Spout):
    """A spout run as an external multilang command (declare it with
    ``bittern.ShellSpout.spec(command=..., script=..., outputs=[...])``)."""

    _shell_kind = "spout"
    outputs = []

    def initialize(self, config, context):
        self._start(config, context)
        self._inst.add_timer(self._check_alive)

    def _check_alive(self, now):
        """An idle (deactivated, backpressured, done) spout still notices its child's death."""
        if not self._dead and self._proc.poll() is not None:
            self._child_gone("it exited")
        return 1.0

    def _exchange(self, command):
        """Send one command and handle what comes back until ``sync``."""
        self._write_now(command)
        deadline = time.monotonic() + self._timeout
        while True:
            msg = self._next_message(deadline, f"the sync after {command['command']!r}")
            if isinstance(msg, dict) and msg.get("command") == "emit":
                self._emit(msg)
                deadline = time.monotonic() + self._timeout
            elif isinstance(msg, dict) and msg.get("command") == "sync":
                return
            else:
                self._handle_side(msg)

    def _emit(self, msg):
        task = msg.get("task")
        need = task is None and msg.get("need_task_ids", True) is not False
        if self._debug:
            self._log_emit(msg)
        try:
            tasks = self.emit(msg.get("tuple") or [], tup_id=msg.get("id"),
                              stream=msg.get("stream") or DEFAULT_STREAM, direct_task=task,
                              need_task_ids=need)
        except Exception as e:  # noqa: BLE001 - the component emitted something invalid
            self._die(f"{self._who}: emit {msg!r} failed: {type(e).__name__}: {e}")
        if need:
            self._write_now(list(tasks or []))

    def next_tuple(self):
        self._exchange({"command": "next"})

    def ack(self, tup_id):
        self._exchange({"command": "ack", "id": tup_id})

    def fail(self, tup_id):
        self._exchange({"command": "fail", "id": tup_id})

    def activate(self):
        self._exchange({"command": "activate"})

    def deactivate(self):
        self._exchange({"command": "deactivate"})


class ShellBolt(_ShellComponent, Bolt):
    """A bolt run as an external multilang command (declare it with
    ``bittern.ShellBolt.spec(command=..., script=..., outputs=[...], inputs=...)``).
    The child acks, fails and anchors itself: nothing is automatic."""

    _shell_kind = "bolt"
    outputs = []
    auto_ack = False
    auto_anchor = False
    auto_fail = False

    def initialize(self, config, context):
        self._start(config, context)
        self._max_pending = max(1, int(config["topology.shellbolt.max.pending"]))
        self._ids = itertools.count(1)
        self._inputs = {}  # id sent to the child -> Tuple, until it acks or fails it
        self._out = collections.deque()  # [bytes, is_tuple] not yet written to the child
        self._queued = 0  # tuples in _out
        self._hb_sent = None  # when the outstanding heartbeat was queued
        self._next_hb = time.monotonic() + HEARTBEAT_EVERY
        for fd in (self._stdin, self._stdout):
            fl = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, fl | os.O_NONBLOCK)
        self._nonblocking = True
        self._handle_inbox()  # anything sent right after the pid
        self._inst.watch(self._stdout, self._on_readable)
        self._inst.add_timer(self._on_timer)

    # -- to the child ----------------------------------------------------------------------
    def _queue(self, msg, is_tuple=False):
        self._out.append([self._codec.encode(msg), is_tuple])
        if is_tuple:
            self._queued += 1

    def _flush_out(self):
        out = self._out
        while out:
            head = out[0]
            try:
                n = os.write(self._stdin, head[0])
            except BlockingIOError:
                return
            except (BrokenPipeError, OSError):
                self._child_gone("its stdin closed")
            if n < len(head[0]):
                head[0] = head[0][n:]
                return
            out.popleft()
            if head[1]:
                self._queued -= 1

    def _send_tuple(self, tup, tid):
        self._queue({"id": tid, "comp": tup.component, "stream": tup.stream, "task": tup.task,
                     "tuple": list(tup.values)}, is_tuple=True)
        self._flush_out()
        self._handle_inbox()
        while self._queued >= self._max_pending:
            self._service(min(HEARTBEAT_EVERY, self._timeout))

    def _service(self, wait):
        """Wait up to ``wait`` s for the child to read or write, then handle it
        (``process`` blocked on a full queue: heartbeats still go out and time out)."""
        r, w, _ = select.select([self._stdout], [self._stdin] if self._out else [], [], wait)
        if w:
            self._flush_out()
        if r:
            self._read_available()
        self._handle_inbox()
        self._on_timer(time.monotonic())

    def process(self, tup):
        tid = str(next(self._ids))
        self._inputs[tid] = tup
        self._send_tuple(tup, tid)

    def _runtime_in_flight(self):
        """Inputs handed to the child that it has not acked or failed yet: its process()
        is asynchronous, so a drain waits for these too (``__in-flight``)."""
        return len(self._inputs)

    def process_tick(self, tup):
        tid = str(next(self._ids))
        self._inputs[tid] = tup
        self._send_tuple(tup, tid)

    # -- from the child ----------------------------------------------------------------------
    def _on_readable(self):
        self._read_available()
        self._handle_inbox()
        if self._out:
            self._flush_out()

    def _handle_inbox(self):
        inbox = self._inbox
        while inbox:
            msg = inbox.popleft()
            cmd = msg.get("command") if isinstance(msg, dict) else None
            if cmd == "emit":
                self._emit(msg)
            elif cmd == "ack" or cmd == "fail":
                tup = self._take_input(msg, cmd)
                (self.ack if cmd == "ack" else self.fail)(tup)
            elif cmd == "sync":
                self._hb_sent = None
            else:
                self._handle_side(msg)
        if self._out:
            self._flush_out()

    def _take_input(self, msg, what):
        tid = msg.get("id")
        tup = self._inputs.pop(str(tid) if tid is not None else None, None)
        if tup is None:
            self._die(f"{self._who} {what}ed id {tid!r}, which is not a tuple it was given or was "
                      "already acked or failed")
        return tup

    def _emit(self, msg):
        anchors = []
        for a in msg.get("anchors") or ():
            tup = self._inputs.get(str(a))
            if tup is None:
                self._die(f"{self._who} anchored an emit to id {a!r}, which is not a tuple it was given "
                          "or was already acked or failed")
            if tup.id is not None:
                anchors.append(tup)
        task = msg.get("task")
        need = task is None and msg.get("need_task_ids", True) is not False
        if self._debug:
            self._log_emit(msg)
        try:
            tasks = self.emit(msg.get("tuple") or [], stream=msg.get("stream") or DEFAULT_STREAM,
                              anchors=anchors, direct_task=task, need_task_ids=need)
        except Exception as e:  # noqa: BLE001 - the component emitted something invalid
            self._die(f"{self._who}: emit {msg!r} failed: {type(e).__name__}: {e}")
        if need:
            # the next message the child reads after what is already queued
            self._queue(list(tasks or []))

    # -- heartbeats ----------------------------------------------------------------------
    def _on_timer(self, now):
        if self._dead:
            return HEARTBEAT_EVERY
        if self._hb_sent is not None and now - max(self._hb_sent, self._last_heard) > self._timeout:
            self._read_available()  # it may have answered while this process was busy
            self._handle_inbox()
            if self._hb_sent is not None and time.monotonic() - max(self._hb_sent, self._last_heard) \
                    > self._timeout:
                self._die(f"{self._who} did not answer a heartbeat within {self._timeout:g} s "
                          "(topology.subprocess.timeout.secs)")
        if self._proc.poll() is not None:
            self._read_available()
            self._handle_inbox()
            self._child_gone("it exited")
        if now >= self._next_hb:
            self._next_hb = now + HEARTBEAT_EVERY
            if self._hb_sent is None:
                self._hb_sent = now
                self._queue({"id": f"hb{next(self._ids)}", "comp": None, "stream": "__heartbeat",
                             "task": -1, "tuple": []})
                self._flush_out()
        return max(0.0, self._next_hb - now)

    def close(self):
        inst = getattr(self, "_inst", None)
        if inst is not None and getattr(self, "_stdout", None) is not None:
            try:
                inst.unwatch(self._stdout)
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        super().close()
