"""Windows and timers under exactly once (tests/test_windows_eo.py): kill -9 and
rebalance while windows are open; the committed output must equal a direct
computation.

spout (par 2, replayable: offset in State) -fields(key) or shuffle-> win (par
``TEST_WIN_PAR``) -shuffle-> sink (SinkBolt over a FileSink, par 2), in 2 containers,
EFFECTIVELY_ONCE.

* Spout task k of P emits ``[n, key, ts]`` for the numbers n ≡ k (mod P) below
  ``test.count``, key ``k{n % test.keys}``, ``ts = n / test.eps``, in order, at
  ``test.rate`` numbers per second in all (``EventTime("ts", lag=0)``: nothing is late),
  then calls ``done()`` (the watermark goes to +inf: every window and event timer fires);
  ``test.gate``: the numbers at or above the gate's wait (testkit.Gate).
* ``win``: an AggregatingWindowBolt, tumbling windows of ``test.length`` event seconds
  (``TEST_GROUPING=shuffle``: not keyed, key None; else keyed by ``key``) emitting
  ``[key, start, end, count, sum of n, min n, max n]``. For every n with
  ``n % test.timer.every == 0`` it sets, while adding n, for the tuple's key an event
  timer at ``ts + EVENT_DELAY`` (twice) and a processing timer at ``time.time() +
  PROC_DELAY``, remembering n for it in its state; each firing emits ``[key, kind,
  at]`` on stream ``timers`` (``at``: the event timer's ts, the processing timer's n).
* The sink writes ``[stream, *values]`` under the current checkpoint and commits it
  with the checkpoint: ``<test.out>/sink/win-<checkpoint>-<task>.jsonl``.
* Every instance writes its pid to ``<test.out>/pids/<component>-<task>``.
"""
import os
import time

from bittern import AggregatingWindowBolt, EventTime, Grouping, Spout, Stream, Topology, Window
from bittern.sinks import FileSink, SinkBolt
from testkit import Gate, write_pid

EVENT_DELAY = 2.35
PROC_DELAY = 1.0
KEYED = os.environ.get("TEST_GROUPING", "fields") != "shuffle"


class TimedSpout(Spout):
    outputs = ["n", "key", "ts"]
    event_time = EventTime("ts", lag=0.0)

    def initialize(self, config, context):
        write_pid(config, context)
        self.count = int(config["test.count"])
        self.keys = int(config.get("test.keys", 5))
        self.eps = float(config.get("test.eps", 100))
        self.par = len(context.get_component_tasks(context.component))
        rate = float(config.get("test.rate", 0) or 0) / self.par
        self.every = 1.0 / rate if rate > 0 else 0.0
        self.index = context.task_index
        self.i = self.index
        self.next_at = time.monotonic()
        self.finished = False
        self.gate = Gate(config, self.count)

    def init_state(self, state):
        self.state = state
        self.i = state.get("next", self.index)
        self.next_at = time.monotonic()
        self.finished = False

    def pre_save(self, checkpoint_id):
        self.state.put("next", self.i)

    def next_tuple(self):
        if self.i >= self.count:
            if not self.finished:
                self.finished = True
                self.done()
            return
        limit = self.gate.limit()
        if self.i >= limit:
            self.next_at = time.monotonic()
            return
        due = 50
        if self.every:
            now = time.monotonic()
            if now < self.next_at:
                return
            due = min(50, int((now - self.next_at) / self.every) + 1)
            self.next_at += due * self.every
        for _ in range(due):
            n = self.i
            if n >= limit:
                break
            self.emit([n, f"k{n % self.keys}", n / self.eps])
            self.i += self.par


class TimedWin(AggregatingWindowBolt):
    outputs = [Stream(["key", "start", "end", "count", "sum", "lo", "hi"]),
               Stream(["key", "kind", "at"], name="timers")]
    window = Window.tumbling(float(os.environ.get("TEST_LENGTH", "1.0")))
    timestamp_field = "ts"
    keyed = KEYED

    def initialize(self, config, context):
        write_pid(config, context)
        self.timer_every = int(config.get("test.timer.every", 50))
        self.state = None

    def init_state(self, state):
        self.state = state

    # the pending processing timers' numbers: {repr(ts): n} per key in keyed state, or
    # (not keyed) one map in the plain state, which rescale_state merges as the runtime
    # merges the windows and timers of a bolt that is not keyed: old j -> new j % n
    def _pending(self, key):
        return dict((self.state.keyed.get(key) if self.keyed else self.state.get("pending")) or {})

    def _keep(self, key, m):
        if self.keyed:
            self.state.keyed.put(key, m)
        else:
            self.state.put("pending", m)

    def rescale_state(self, old, task_index, n_tasks):
        merged = {}
        for j, plain in enumerate(old):
            if j % n_tasks == task_index:
                merged.update(plain.get("pending") or {})
        return {"pending": merged} if merged else None

    def create(self):
        return [0, 0, None, None]

    def add(self, acc, tup):
        n, key, ts = tup.values
        if n % self.timer_every == 0:
            k = key if self.keyed else None
            self.timers.set(k, ts + EVENT_DELAY)
            self.timers.set(k, ts + EVENT_DELAY)  # twice: still fires once
            at = time.time() + PROC_DELAY
            m = self._pending(k)
            m[repr(at)] = n
            self._keep(k, m)
            self.timers.set(k, at, kind="processing")
        return [acc[0] + 1, acc[1] + n, n if acc[2] is None else min(acc[2], n),
                n if acc[3] is None else max(acc[3], n)]

    def merge(self, a, b):  # (a rescale of the unkeyed bolt merges old tasks' windows)
        return [a[0] + b[0], a[1] + b[1], min(x for x in (a[2], b[2]) if x is not None),
                max(x for x in (a[3], b[3]) if x is not None)]

    def emit_window(self, key, window, acc):
        self.emit([key, window.start, window.end, acc[0], acc[1], acc[2], acc[3]])

    def on_timer(self, key, ts, kind):
        if kind == "event":
            self.emit([key, kind, ts], stream="timers")
            return
        m = self._pending(key)
        n = m.pop(repr(ts), None)
        self._keep(key, m)
        self.emit([key, kind, n if n is not None else f"unknown timer at {ts!r}"], stream="timers")


class WinSink(SinkBolt):
    def initialize(self, config, context):
        write_pid(config, context)
        super().initialize(config, context)

    def make_sink(self, config, context):
        return FileSink(os.path.join(config["test.out"], "sink"), "win")

    def row(self, tup):
        return [tup.stream, *tup.values]


class WindowsEoSeq(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "EFFECTIVELY_ONCE",
              "topology.stateful.checkpoint.interval.seconds": 0.5}
    spout = TimedSpout.spec(par=2)
    win = TimedWin.spec(par=int(os.environ.get("TEST_WIN_PAR", "2")),
                        inputs={spout: Grouping.fields("key") if KEYED else Grouping.SHUFFLE})
    sink = WinSink.spec(par=2, inputs={win: Grouping.SHUFFLE, win["timers"]: Grouping.SHUFFLE})
