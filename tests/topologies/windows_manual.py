"""Late and too-late tuples, deterministically: one spout task on
``EventTime.manual()`` plays SCRIPT, tuples and watermarks in band, one step per
``next_tuple`` call, then calls ``done()``.

    spout (1 task) -fields(key)-> win (tumbling 1 s, allowed lateness 2 s, late_stream
    "late", par 2) -global-> record; win["late"] -global-> record

Each step is ``("t", n, key, ts)`` (emit ``[n, key, ts]``) or ``("w", ts)``
(``emit_watermark(ts)``). A watermark is sent after the tuples before it, on the same
channel, so whether a tuple is late is fixed by the script, not by timing. ``record``
(one task) appends every tuple it gets to ``<test.out>/rows.jsonl`` as
``{"stream": ..., "values": ...}`` before the next one: per window, its fires in order.
The window bolt emits ``[key, start, end, count, sorted numbers, late]``.
"""
import json
import os

from bittern import AggregatingWindowBolt, Bolt, EventTime, Grouping, Spout, Topology, Window
from testkit import write_pid

SCRIPT = [
    ("t", 0, "a", 0.1), ("t", 1, "a", 0.5), ("t", 2, "a", 1.2), ("t", 3, "a", 1.7), ("t", 4, "a", 2.3),
    ("t", 5, "b", 0.3),
    ("w", 2.0),               # a [0,1) {0,1}, a [1,2) {2,3}, b [0,1) {5} fire
    ("t", 6, "a", 1.5),       # late, within lateness: a [1,2) fires again with it
    ("t", 7, "b", 0.9),       # late: b [0,1) fires again
    ("w", 1.0),               # lower than the last: ignored
    ("w", 4.5),               # a [2,3) {4} fires; a [0,1), b [0,1) (end + 2 <= 4.5) and a [1,2) are gone
    ("t", 8, "a", 1.8),       # too late: its window ended more than 2 s before the watermark
    ("t", 9, "a", "x"),       # a timestamp that is not a number
    ("t", 10, "a", 3.9),      # late for a window that never fired: a [3,4) fires at once
    ("t", 11, "a", 4.6),      # on time: a [4,5)
    ("t", 12, "a", 2.6),      # late: a [2,3) fires again with it
    ("t", 13, "b", None),     # no timestamp
    ("t", 14, "b", 0.2),      # too late
]


class ScriptSpout(Spout):
    outputs = ["n", "key", "ts"]
    event_time = EventTime.manual()

    def initialize(self, config, context):
        write_pid(config, context)
        self.step = 0

    def next_tuple(self):
        if self.step > len(SCRIPT):
            return
        if self.step == len(SCRIPT):
            self.step += 1
            self.done()  # the watermark goes to +inf: a [4,5) fires
            return
        s = SCRIPT[self.step]
        self.step += 1
        if s[0] == "w":
            self.emit_watermark(s[1])
        else:
            self.emit(list(s[1:]))


class LateWin(AggregatingWindowBolt):
    outputs = ["key", "start", "end", "count", "numbers", "late"]
    window = Window.tumbling(1.0)
    timestamp_field = "ts"
    allowed_lateness = 2.0
    late_stream = "late"

    def initialize(self, config, context):
        write_pid(config, context)

    def create(self):
        return []

    def add(self, acc, tup):
        return acc + [tup.values[0]]

    def emit_window(self, key, window, acc):
        self.emit([key, window.start, window.end, len(acc), sorted(acc), window.late])


class Record(Bolt):
    outputs = []

    def initialize(self, config, context):
        write_pid(config, context)
        os.makedirs(config["test.out"], exist_ok=True)
        self.fd = os.open(os.path.join(config["test.out"], "rows.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def process(self, tup):
        os.write(self.fd, (json.dumps({"stream": tup.stream, "values": tup.values}) + "\n").encode())


class WindowsManual(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "ATMOST_ONCE"}
    spout = ScriptSpout.spec()
    win = LateWin.spec(par=2, inputs={spout: Grouping.fields("key")})
    record = Record.spec(inputs={win: Grouping.GLOBAL, win["late"]: Grouping.GLOBAL})
