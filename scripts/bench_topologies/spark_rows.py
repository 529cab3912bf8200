"""Bench topology for ``scripts/bench.py --spark``: a SparkSpout over Parquet rows
``(id, word)`` (par ``$BENCH_SPARK_PAR``, default 1; path: ``spout.spark.path``) into
one bolt that counts the rows and prints ``{"rows": n}`` when it closes.
At most once: the figure is the spout's streaming rate, not the acker's."""
import json
import os

from bittern import Bolt, Topology
from bittern.spark import SparkSpout


class Rows(SparkSpout):
    format = "parquet"
    fields = ["id", "word"]


class CountRows(Bolt):
    outputs = []

    def initialize(self, config, context):
        self.n = 0

    def process(self, tup):
        self.n += 1

    def close(self):
        print(json.dumps({"rows": self.n}))


class SparkRows(Topology):
    config = {"topology.reliability.mode": "ATMOST_ONCE"}
    spout = Rows.spec(par=int(os.environ.get("BENCH_SPARK_PAR", "1")))
    count = CountRows.spec(par=1, inputs=[spout])
