"""A SinkBolt outside exactly once (tests/test_sink_modes.py): a replaying spout of the
numbers 0..test.count-1 -> a SinkBolt over a FileSink (par 2).

Under ATLEAST_ONCE the sink acks a tuple only once it is committed, so a sink killed with
kill -9 loses nothing (its uncommitted tuples time out and are replayed); under
ATMOST_ONCE it writes what it gets. ``test.rate``: numbers per second (0: flat out).
"""
import os
import time

from bittern import EXHAUSTED, Grouping, ReliableSpout, Topology
from bittern.sinks import FileSink, SinkBolt
from testkit import write_pid


class Numbers(ReliableSpout):
    outputs = ["n"]

    def initialize(self, config, context):
        write_pid(config, context)
        self.count = int(config["test.count"])
        rate = float(config.get("test.rate", 0) or 0)
        self.every = 1.0 / rate if rate else 0.0
        self.i, self.t0 = 0, time.monotonic()

    def next_item(self):
        if self.i >= self.count:
            return EXHAUSTED
        if self.every and self.i * self.every > time.monotonic() - self.t0:
            return None
        self.i += 1
        return self.i - 1, [self.i - 1]


class Out(SinkBolt):
    def initialize(self, config, context):
        write_pid(config, context)
        super().initialize(config, context)

    def make_sink(self, config, context):
        return FileSink(os.path.join(config["test.out"], "sink"), "seq")


class SinkModes(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "ATLEAST_ONCE",
              "topology.message.timeout.secs": 5}
    spout = Numbers.spec()
    out = Out.spec(par=2, inputs={spout: Grouping.SHUFFLE})
