"""topologies/spark_pipeline.py as the tests run it (tests/test_parquet_sink.py): the same
components, with pid files (``<test.out>/pids/<component>-<task>``) so the test can kill
tasks with kill -9; ``spend`` held to ``test.rate`` tuples per second per task, and
``events`` behind ``test.gate`` (testkit.Gate: a file with the number of events it may
have emitted, a count kept in its state beside its offset, so it rolls back with it) so
the kills land mid-run however fast or slow the machine is.

events (SparkSpout, par 1) -fields(user)-> spend (par 2) -fields(day)-> out (ParquetSinkBolt, par 2)
"""
import os
import sys
import time

from bittern import Grouping, Topology
from testkit import Gate, write_pid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "topologies"))
from spark_pipeline import Daily, Events, Spend  # noqa: E402


class GatedEvents(Events):
    def initialize(self, config, context):
        super().initialize(config, context)
        self.gate = Gate(config, float("inf"))

    def next_tuple(self):
        n = self.state.get("test.emitted", 0)
        if n < self.gate.limit():
            before = self._emitted
            super().next_tuple()
            self.state.put("test.emitted", n + self._emitted - before)


class SlowSpend(Spend):
    def initialize(self, config, context):
        write_pid(config, context)
        self.every = 1.0 / float(config.get("test.rate", 1000))
        self.free_at = time.monotonic()

    def process(self, tup):
        super().process(tup)
        # no credit for idle time (a restore, a wait): never a burst to catch up
        now = time.monotonic()
        self.free_at = max(self.free_at, now - 0.05) + self.every
        if self.free_at - now > 0.002:
            time.sleep(self.free_at - now)


class PidDaily(Daily):
    def initialize(self, config, context):
        write_pid(config, context)
        super().initialize(config, context)


class ParquetPipeline(Topology):
    config = {"topology.reliability.mode": "EFFECTIVELY_ONCE", "topology.stmgrs": 1,
              "topology.stateful.checkpoint.interval.seconds": 1.0}
    events = GatedEvents.spec(par=1)
    spend = SlowSpend.spec(par=2, inputs={events: Grouping.fields("user")})
    out = PidDaily.spec(par=2, inputs={spend: Grouping.fields("day")})
