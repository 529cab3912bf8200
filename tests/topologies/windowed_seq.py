"""Windows and timers under test: sequence numbers with event times, keyed windows, a
sink. The end-to-end tests of tests/test_windows*.py run it in several shapes.

spout (``test.spouts`` tasks, replayable under exactly once: offset in State)
    -fields(key)-> win (``test.window``, par ``test.win.par``)
    -shuffle-> sink (SinkBolt over a FileSink under EFFECTIVELY_ONCE; a LineSink otherwise)

* Spout task k of P emits ``[n, key, ts]`` for the numbers n ≡ k (mod P) below
  ``test.count``, key ``n % test.keys``, event time ``ts = n / test.eps`` (``eps``:
  numbers per event second), in order per task: the input is out of order only across
  tasks, never later than the slowest task's watermark (the minimum), so every window
  is complete and the result is exact. ``test.rate``: numbers per second (0: flat out).
  It calls ``done()`` at the end (the watermark goes to +inf and every window fires).
* ``test.window``: ``tumbling:L``, ``sliding:L:S``, ``session:G``, ``count:N`` or
  ``pcount:L:S`` (sliding count) — the window bolt emits ``[key, start, end, count,
  sum of n, min n, max n]`` per window (aggregating, or from the tuple list with
  ``test.tuples=1``).
* ``test.skip=P:R``: only the numbers n with ``n % P < R`` are emitted (gaps in event
  time, so that session windows form); ``test.slow=K:RATE[,...]``: spout task K is paced
  at RATE numbers per second (the others at ``test.rate``); ``test.stop=K:M[,...]``:
  spout task K emits only its numbers below M and then stays open without calling
  ``done()`` (its watermark stalls until it is idle: ``topology.watermark.idle.secs``).
* Environment: ``TEST_TIME=processing`` windows on processing time (no
  ``timestamp_field``, and the spout declares no event time); ``TEST_SETS=1`` appends
  the sorted list of the window's numbers to every row.
* Every instance writes its pid to ``<test.out>/pids/<component>-<task>``.
"""
import json
import os
import time

from bittern import (AggregatingWindowBolt, Bolt, Count, EventTime, Grouping, Spout, Topology, Window,
                     WindowedBolt)
from bittern.sinks import FileSink, SinkBolt
from testkit import write_pid


PROCESSING_TIME = os.environ.get("TEST_TIME") == "processing"
SETS = bool(os.environ.get("TEST_SETS"))


def _pairs(config, name):
    """``K:V[,K:V...]`` config values (``test.slow``, ``test.stop``) as {task index: float}."""
    v = config.get(name)
    if v in (None, ""):
        return {}
    return {int(k): float(x) for k, x in (p.split(":") for p in str(v).split(","))}


class TimedSpout(Spout):
    outputs = ["n", "key", "ts"]
    event_time = None if PROCESSING_TIME else EventTime("ts", lag=0.0)

    def initialize(self, config, context):
        write_pid(config, context)
        self.count = int(config["test.count"])
        self.keys = int(config.get("test.keys", 5))
        self.eps = float(config.get("test.eps", 100))
        self.par = len(context.get_component_tasks(context.component))
        self.index = context.task_index
        rate = float(config.get("test.rate", 0) or 0)
        slow, stop = _pairs(config, "test.slow"), _pairs(config, "test.stop")
        rate = slow.get(self.index, rate)
        self.every = 1.0 / rate if rate > 0 else 0.0
        self.limit, self.open_end = self.count, False
        if self.index in stop:
            self.limit, self.open_end = min(self.count, int(stop[self.index])), True
        skip = config.get("test.skip")
        self.skip = tuple(int(x) for x in str(skip).split(":")) if skip not in (None, "") else None
        if not hasattr(self, "i"):
            self.i = self.index
        self.next_at = time.monotonic()
        self.finished = False

    def init_state(self, state):
        self.state = state
        self.i = state.get("next", self.index)
        self.finished = False

    def pre_save(self, checkpoint_id):
        self.state.put("next", self.i)

    def next_tuple(self):
        if self.i >= self.limit:
            if not self.finished and not self.open_end:
                self.finished = True
                self.done()
            return
        due = 50
        if self.every:
            now = time.monotonic()
            if now < self.next_at:
                return
            due = min(50, int((now - self.next_at) / self.every) + 1)
            self.next_at += due * self.every
        skip = self.skip
        for _ in range(due):
            n = self.i
            while skip and n < self.limit and n % skip[0] >= skip[1]:
                n += self.par
            if n >= self.limit:
                self.i = n
                break
            self.emit([n, f"k{n % self.keys}", n / self.eps], tup_id=n)
            self.i = n + self.par


def window_of(spec):
    kind, *args = spec.split(":")
    if kind == "tumbling":
        return Window.tumbling(float(args[0]))
    if kind == "sliding":
        return Window.sliding(float(args[0]), float(args[1]))
    if kind == "session":
        return Window.session(float(args[0]))
    if kind == "count":
        return Window.tumbling(Count(int(args[0])))
    if kind == "pcount":
        return Window.sliding(Count(int(args[0])), Count(int(args[1])))
    raise ValueError(spec)


WINDOW = window_of(os.environ.get("TEST_WINDOW", "tumbling:1"))
EVENT_TIME = not WINDOW.by_count and not PROCESSING_TIME


ROW = ["key", "start", "end", "count", "sum", "lo", "hi"] + (["numbers"] if SETS else [])


class AggWin(AggregatingWindowBolt):
    outputs = ROW
    window = WINDOW
    timestamp_field = "ts" if EVENT_TIME else None

    def initialize(self, config, context):
        write_pid(config, context)

    def create(self):
        return [0, 0, None, None] + ([[]] if SETS else [])

    def add(self, acc, tup):
        n = tup.values[0]
        return [acc[0] + 1, acc[1] + n, n if acc[2] is None else min(acc[2], n),
                n if acc[3] is None else max(acc[3], n)] + ([acc[4] + [n]] if SETS else [])

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1], min(x for x in (a[2], b[2]) if x is not None),
                max(x for x in (a[3], b[3]) if x is not None)] + ([a[4] + b[4]] if SETS else [])

    def emit_window(self, key, window, acc):
        self.emit([key, window.start, window.end, acc[0], acc[1], acc[2], acc[3]]
                  + ([sorted(acc[4])] if SETS else []))


class ListWin(WindowedBolt):
    outputs = ROW
    window = WINDOW
    timestamp_field = "ts" if EVENT_TIME else None

    def initialize(self, config, context):
        write_pid(config, context)

    def process_window(self, w):
        ns = [t.values[0] for t in w.tuples]
        self.emit([w.key, w.start, w.end, len(ns), sum(ns), min(ns), max(ns)] + ([sorted(ns)] if SETS else []))


class WinSink(SinkBolt):
    def initialize(self, config, context):
        write_pid(config, context)
        super().initialize(config, context)

    def make_sink(self, config, context):
        return FileSink(os.path.join(config["test.out"], "sink"), "win")


class JsonLines(Bolt):
    """At most / at least once: every row, appended before the tuple is acked."""

    def initialize(self, config, context):
        write_pid(config, context)
        os.makedirs(os.path.join(config["test.out"], "rows"), exist_ok=True)
        self.fd = os.open(os.path.join(config["test.out"], "rows", f"rows-{context.task_id}.jsonl"),
                          os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def process(self, tup):
        os.write(self.fd, (json.dumps(tup.values) + "\n").encode())


EO = os.environ.get("TEST_MODE", "EFFECTIVELY_ONCE") == "EFFECTIVELY_ONCE"


class WindowedSeq(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": os.environ.get("TEST_MODE", "EFFECTIVELY_ONCE"),
              "topology.stateful.checkpoint.interval.seconds": 0.5}
    spout = TimedSpout.spec(par=int(os.environ.get("TEST_SPOUTS", "2")))
    win = (ListWin if os.environ.get("TEST_TUPLES") else AggWin).spec(
        par=int(os.environ.get("TEST_WIN_PAR", "2")), inputs={spout: Grouping.fields("key")})
    sink = (WinSink if EO else JsonLines).spec(par=2, inputs={win: Grouping.SHUFFLE})
