"""Windowed topologies that must be refused before anything starts, chosen by the
environment variable ``TEST_BAD``:

* ``sliding``: a sliding window whose interval (3 s) is longer than the window (2 s);
* ``field``: ``timestamp_field = "when"``, a field the input stream does not declare;
* ``timeout``: ATLEAST_ONCE with ``topology.message.timeout.secs`` (4) shorter than the
  window (10 s): its tuples would time out and be replayed forever.
"""
import os

from bittern import CountWindowBolt, EventTime, Grouping, Spout, Topology, Window

BAD = os.environ.get("TEST_BAD", "")


class Stamped(Spout):
    outputs = ["n", "key", "ts"]
    event_time = EventTime("ts")

    def initialize(self, config, context):
        self.i = 0

    def next_tuple(self):
        if self.i < 100:
            self.emit([self.i, f"k{self.i % 3}", self.i / 10.0])
            self.i += 1


class Counts(CountWindowBolt):
    outputs = ["key", "start", "end", "count"]
    window = Window.sliding(2.0, 3.0) if BAD == "sliding" else Window.tumbling(10.0 if BAD == "timeout" else 1.0)
    timestamp_field = "when" if BAD == "field" else "ts"


class WindowsBad(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE" if BAD == "timeout" else "ATMOST_ONCE",
              "topology.message.timeout.secs": 4, "topology.stmgrs": 2}
    stamps = Stamped.spec()
    counts = Counts.spec(par=2, inputs={stamps: Grouping.fields("key")})
