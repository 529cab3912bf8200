"""A ParquetSinkBolt outside exactly once (tests/test_parquet_sink.py): a replaying spout of
rows ``[n, n % 7]`` for n in 0..test.count-1 -> ParquetSinkBolt (par 2) into
``sink.parquet.dir``; pid files in ``<test.out>/pids``.

``test.rate``: rows per second (0: flat out). ``test.bad.at``: row *k* carries the
string ``"bad"`` in ``mod`` instead of an int (a type change mid-stream).
"""
import time

from bittern import EXHAUSTED, Grouping, ReliableSpout, Topology
from bittern.sinks import ParquetSinkBolt
from testkit import write_pid


class Numbers(ReliableSpout):
    outputs = ["n", "mod"]

    def initialize(self, config, context):
        write_pid(config, context)
        self.count = int(config["test.count"])
        rate = float(config.get("test.rate", 0) or 0)
        self.every = 1.0 / rate if rate else 0.0
        self.bad_at = int(config.get("test.bad.at", -1))
        self.i, self.t0 = 0, time.monotonic()

    def next_item(self):
        if self.i >= self.count:
            return EXHAUSTED
        if self.every and self.i * self.every > time.monotonic() - self.t0:
            return None
        n = self.i
        self.i += 1
        return n, [n, "bad" if n == self.bad_at else n % 7]


class Out(ParquetSinkBolt):
    def initialize(self, config, context):
        write_pid(config, context)
        super().initialize(config, context)


class ParquetModes(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "ATLEAST_ONCE",
              "topology.message.timeout.secs": 5}
    spout = Numbers.spec()
    out = Out.spec(par=2, inputs={spout: Grouping.SHUFFLE})
