"""topologies/spark_pipeline.py as the tests run it (tests/test_parquet_sink.py): the same
components, with pid files (``<test.out>/pids/<component>-<task>``) so the test can kill
tasks with kill -9, and ``spend`` held to ``test.rate`` tuples per second per task so
the kills land mid-run however fast the machine is.

events (SparkSpout, par 1) -fields(user)-> spend (par 2) -fields(day)-> out (ParquetSinkBolt, par 2)
"""
import os
import sys
import time

from bittern import Grouping, Topology
from testkit import write_pid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "topologies"))
from spark_pipeline import Daily, Events, Spend  # noqa: E402


class SlowSpend(Spend):
    def initialize(self, config, context):
        write_pid(config, context)
        self.every = 1.0 / float(config.get("test.rate", 1000))

    def init_state(self, state):
        super().init_state(state)  # (at start-up and after every rollback: no burst to catch up)
        self.seen, self.t0 = 0, time.monotonic()

    def process(self, tup):
        super().process(tup)
        self.seen += 1
        ahead = self.seen * self.every - (time.monotonic() - self.t0)
        if ahead > 0.002:
            time.sleep(ahead)


class PidDaily(Daily):
    def initialize(self, config, context):
        write_pid(config, context)
        super().initialize(config, context)


class ParquetPipeline(Topology):
    config = {"topology.reliability.mode": "EFFECTIVELY_ONCE", "topology.stmgrs": 1,
              "topology.stateful.checkpoint.interval.seconds": 1.0}
    events = Events.spec(par=1)
    spend = SlowSpend.spec(par=2, inputs={events: Grouping.fields("user")})
    out = PidDaily.spec(par=2, inputs={spend: Grouping.fields("day")})
