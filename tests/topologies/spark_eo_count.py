"""Exactly once with a SparkSpout: ids from Parquet, counted per bucket in keyed state,
committed through a transactional file sink.

spout (SparkSpout, par 2, ``id``) -fields(bucket)-> count (par 2) -fields(bucket)-> out (par 1)

``count`` keeps ``bucket = id % 100 -> count`` in ``state.keyed`` and, at each
checkpoint, emits ``[bucket, count]`` for the buckets that changed; ``out`` writes
them under that checkpoint to ``<test.out>/counts-<n>-<task>.jsonl``, visible once
the checkpoint is complete. The final count of a bucket is its largest committed one.
"""

from bittern import Bolt, Grouping, Topology
from bittern.sinks import FileSink, SinkBolt
from bittern.spark import SparkSpout


class Ids(SparkSpout):
    format = "parquet"
    fields = ["id"]


class Bucket(Bolt):
    outputs = ["bucket"]

    def process(self, tup):
        self.emit([tup.values[0] % 100])


class Count(Bolt):
    outputs = ["bucket", "count"]

    def init_state(self, state):
        self.counts = state.keyed
        self.changed = {}

    def process(self, tup):
        b = tup.values[0]
        n = self.counts.get(b, 0) + 1
        self.counts.put(b, n)
        self.changed[b] = n

    def pre_save(self, checkpoint_id):
        for b, n in self.changed.items():
            self.emit([b, n])
        self.changed = {}


class Out(SinkBolt):
    def make_sink(self, config, context):
        return FileSink(config["test.out"], "counts")


class SparkEOCount(Topology):
    config = {"topology.reliability.mode": "EFFECTIVELY_ONCE", "topology.stmgrs": 1,
              "topology.stateful.checkpoint.interval.seconds": 1.0}
    spout = Ids.spec(par=2)
    bucket = Bucket.spec(par=1, inputs=[spout])
    count = Count.spec(par=2, inputs={bucket: Grouping.fields("bucket")})
    out = Out.spec(par=1, inputs={count: Grouping.fields("bucket")})
