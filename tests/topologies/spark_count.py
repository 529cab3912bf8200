"""A SparkSpout over a Parquet dataset of rows ``(id, word)`` into a counting bolt.

spout (SparkSpout, par $SPARK_COUNT_PAR, default 3) -fields(id)-> count (par 2)

The path comes from ``spout.spark.path`` (``--config``). Each count task keeps a
``bytearray`` of ``test.rows`` counters (one per id) and writes it to
``<test.out>/counts-<task>.bin`` when it closes. ``test.fail.pct``: the bolt fails
that percentage of the ids (``id % 100 < pct``), each only the first time its
task sees it (the fields grouping sends a replay to the same task).
"""
import os

from bittern import Bolt, Grouping, Topology
from bittern.spark import SparkSpout


class Rows(SparkSpout):
    format = "parquet"
    fields = ["id", "word"]


class CountBolt(Bolt):
    outputs = []

    def initialize(self, config, context):
        self.out = config["test.out"]
        os.makedirs(self.out, exist_ok=True)
        self.counts = bytearray(int(config["test.rows"]))
        self.fail_pct = int(config.get("test.fail.pct", 0))
        self.failed = set()
        self.task = context.task_id

    def process(self, tup):
        n = tup.values[0]
        if self.fail_pct and n % 100 < self.fail_pct and n not in self.failed:
            self.failed.add(n)
            self.fail(tup)
            return
        c = self.counts
        if c[n] < 255:
            c[n] += 1

    def close(self):
        tmp = os.path.join(self.out, f".counts-{self.task}.tmp")
        with open(tmp, "wb") as f:
            f.write(self.counts)
        os.replace(tmp, os.path.join(self.out, f"counts-{self.task}.bin"))


class SparkCount(Topology):
    config = {"topology.stmgrs": 1, "topology.reliability.mode": "ATMOST_ONCE"}
    spout = Rows.spec(par=int(os.environ.get("SPARK_COUNT_PAR", "3")))
    count = CountBolt.spec(par=2, inputs={spout: Grouping.fields("id")})
