"""Timers under test (tests/test_timers.py): a keyed bolt that sets event-time and
processing-time timers and reports every firing.

spout (par 2, event time ``ts``, lag 0) -fields(key)-> timer (par 2) -shuffle-> sink (par 2)

* Spout task k of P emits ``[n, key, ts]`` for the numbers n ≡ k (mod P) below
  ``test.count``, key ``k{n % test.keys}``, ``ts = n / test.eps``, at ``test.rate``
  numbers per second per task. It never calls ``done()``: the watermark stays finite, so an
  event timer past the end of the input never fires.
* ``timer``, the first time it sees a key (at ts ``t0`` = that tuple's ts), sets event
  timers at ``t0 +`` each of ``EVENT_OFFSETS`` (in that order: out of order, 2.5 set
  twice, and ``FAR``: past the end of the input, it must never fire), ``DELETED``
  (deleted again when the 2.5 timer fires), and processing timers at ``now +`` each of
  ``PROC_OFFSETS`` (1.0 set twice). When the ``CHAIN_FROM`` timer fires it sets another
  at ``ts + CHAIN_STEP``.
* Every firing emits ``[task, seq, key, ts, kind, watermark, wall, set_at, t0]``
  (``seq``: the firing's number in its task; ``watermark``: ``self.timers.watermark``
  in ``on_timer``; ``wall``: ``time.time()`` then; ``set_at``: when a processing timer
  was set, else None; ``t0``: the key's first timestamp).
* The first tuple a task processes makes it try timers for keys ``k0``,
  ``k1``, ... until one is refused (a key that task does not own): the ValueError's
  message goes out on stream ``errors`` as ``[task, message]`` (a key it owns gets its
  probe timer deleted again at once).
* The sink appends ``[stream, *values]`` to ``<test.out>/rows/rows-<task>.jsonl``.
"""
import json
import os
import time

from bittern import Bolt, EventTime, Grouping, Spout, Stream, Topology
from testkit import write_pid

EVENT_OFFSETS = [7.5, 2.5, 12.5, 5.0, 2.5, 10.0, 1000.0]
FAR = 1000.0
DELETED = 6.0
CHAIN_FROM, CHAIN_STEP = 12.5, 5.0
PROC_OFFSETS = [1.5, 0.5, 1.0, 1.0]
PROBE_TS = -12345.0


class TimedSpout(Spout):
    outputs = ["n", "key", "ts"]
    event_time = EventTime("ts", lag=0.0)

    def initialize(self, config, context):
        write_pid(config, context)
        self.count = int(config["test.count"])
        self.keys = int(config.get("test.keys", 6))
        self.eps = float(config.get("test.eps", 100))
        self.every = 1.0 / float(config.get("test.rate", 300))
        self.par = len(context.get_component_tasks(context.component))
        self.i = context.task_index
        self.next_at = time.monotonic()

    def next_tuple(self):
        now = time.monotonic()
        if self.i >= self.count or now < self.next_at:
            return
        due = min(20, int((now - self.next_at) / self.every) + 1)
        self.next_at += due * self.every
        for _ in range(due):
            n = self.i
            if n >= self.count:
                break
            self.emit([n, f"k{n % self.keys}", n / self.eps])
            self.i += self.par


class TimerBolt(Bolt):
    outputs = [Stream(["task", "seq", "key", "ts", "kind", "watermark", "wall", "set_at", "t0"]),
               Stream(["task", "message"], name="errors")]

    def initialize(self, config, context):
        write_pid(config, context)
        self.task = context.task_id
        self.keys = int(config.get("test.keys", 6))
        self.t0 = {}  # key -> timestamp of its first tuple
        self.seq = 0
        self.probed = False
        self.proc_set_at = {}  # (key, ts) -> when that processing timer was set

    def probe(self):
        for i in range(self.keys):
            key = f"k{i}"
            try:
                self.timers.set(key, PROBE_TS)
            except ValueError as e:
                self.emit([self.task, str(e)], stream="errors")
                return
            self.timers.delete(key, PROBE_TS)
        self.emit([self.task, "no key refused"], stream="errors")

    def process(self, tup):
        n, key, ts = tup.values
        if not self.probed:
            self.probed = True
            self.probe()
        if key in self.t0:
            return
        self.t0[key] = ts
        for off in EVENT_OFFSETS:
            self.timers.set(key, ts + off)
        self.timers.set(key, ts + DELETED)
        now = time.time()
        for off in PROC_OFFSETS:
            self.proc_set_at.setdefault((key, now + off), now)
            self.timers.set(key, now + off, kind="processing")

    def on_timer(self, key, ts, kind):
        wall = time.time()
        self.seq += 1
        set_at = self.proc_set_at.pop((key, ts), None) if kind == "processing" else None
        self.emit([self.task, self.seq, key, ts, kind, self.timers.watermark, wall, set_at, self.t0[key]])
        if kind == "event":
            t0 = self.t0[key]
            if ts == t0 + 2.5:
                self.timers.delete(key, t0 + DELETED)
            elif ts == t0 + CHAIN_FROM:
                self.timers.set(key, ts + CHAIN_STEP)


class RowSink(Bolt):
    def initialize(self, config, context):
        write_pid(config, context)
        d = os.path.join(config["test.out"], "rows")
        os.makedirs(d, exist_ok=True)
        self.fd = os.open(os.path.join(d, f"rows-{context.task_id}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def process(self, tup):
        os.write(self.fd, (json.dumps([tup.stream, *tup.values]) + "\n").encode())


class TimersSeq(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "ATMOST_ONCE"}
    spout = TimedSpout.spec(par=2)
    timer = TimerBolt.spec(par=2, inputs={spout: Grouping.fields("key")})
    sink = RowSink.spec(par=2, inputs={timer: Grouping.SHUFFLE, timer["errors"]: Grouping.SHUFFLE})
