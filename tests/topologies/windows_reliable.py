"""Windows at least once, with a spout that replays: kill -9 of a window task loses
what its windows held, and the replays bring it back (late, within the allowed
lateness), so every window's result still covers all of its tuples.

    spout (ReplaySpout, ``test.spouts`` tasks) -fields(key)-> win (tumbling
    ``test.window`` s, allowed lateness 60 s, par 2) -shuffle-> sink (1 task)

* Spout task k of P emits ``[n, key, ts]`` for the numbers n = k (mod P) below
  ``test.count`` (key ``n % test.keys``, ``ts = n / test.eps``), paced at ``test.rate``
  per second, as a ``ReliableSpout``: a failed or timed-out number is emitted again.
  It is on ``EventTime.manual()``: its watermark is the largest timestamp it emitted
  (replays are older: late, and within the 60 s lateness they update their windows).
  When everything is emitted it sends ``last ts + window`` (every window fires), and
  it returns EXHAUSTED (watermark +inf, ``done()``) only once nothing is pending, so
  that no replay comes after the end of time.
* The window bolt emits ``[key, start, end, count, sorted numbers]``; the sink appends
  every row to ``<test.out>/rows/rows-<task>.jsonl`` before acking it.
* Every instance writes its pid to ``<test.out>/pids/<component>-<task>``.
"""
import json
import os
import time

from bittern import (EXHAUSTED, AggregatingWindowBolt, Bolt, EventTime, Grouping, ReliableSpout, Topology,
                     Window)
from testkit import write_pid

LENGTH = float(os.environ.get("TEST_LENGTH", "1"))


class ReplaySpout(ReliableSpout):
    outputs = ["n", "key", "ts"]
    event_time = EventTime.manual()

    def initialize(self, config, context):
        write_pid(config, context)
        self.count = int(config["test.count"])
        self.keys = int(config.get("test.keys", 5))
        self.eps = float(config.get("test.eps", 100))
        rate = float(config.get("test.rate", 0) or 0)
        self.every = 1.0 / rate if rate > 0 else 0.0
        self.par = len(context.get_component_tasks(context.component))
        self.i = context.task_index
        self.t0 = time.monotonic()
        self.emitted = 0
        self.max_ts = 0.0
        self.wm_at = 0.0
        self.ended = False

    def watermark(self, ts, force=False):
        now = time.monotonic()
        if force or now - self.wm_at >= 0.1:
            self.wm_at = now
            self.emit_watermark(ts)

    def next_item(self):
        if self.i >= self.count:
            if not self.ended:
                self.ended = True
                self.watermark(self.max_ts + LENGTH, force=True)
            return EXHAUSTED if not self.pending else None
        if self.every and self.emitted > (time.monotonic() - self.t0) / self.every:
            return None  # paced
        n, self.i = self.i, self.i + self.par
        self.emitted += 1
        ts = self.max_ts = n / self.eps
        self.watermark(ts)
        return n, [n, f"k{n % self.keys}", ts]


class SetWin(AggregatingWindowBolt):
    outputs = ["key", "start", "end", "count", "numbers"]
    window = Window.tumbling(LENGTH)
    timestamp_field = "ts"
    allowed_lateness = 60.0

    def initialize(self, config, context):
        write_pid(config, context)

    def create(self):
        return []

    def add(self, acc, tup):
        return acc + [tup.values[0]]

    def emit_window(self, key, window, acc):
        self.emit([key, window.start, window.end, len(acc), sorted(acc)])


class Rows(Bolt):
    def initialize(self, config, context):
        write_pid(config, context)
        os.makedirs(os.path.join(config["test.out"], "rows"), exist_ok=True)
        self.fd = os.open(os.path.join(config["test.out"], "rows", f"rows-{context.task_id}.jsonl"),
                          os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def process(self, tup):
        os.write(self.fd, (json.dumps(tup.values) + "\n").encode())


class WindowsReliable(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "ATLEAST_ONCE",
              "topology.message.timeout.secs": 6}
    spout = ReplaySpout.spec(par=int(os.environ.get("TEST_SPOUTS", "2")))
    win = SetWin.spec(par=2, inputs={spout: Grouping.fields("key")})
    sink = Rows.spec(inputs={win: Grouping.SHUFFLE})
