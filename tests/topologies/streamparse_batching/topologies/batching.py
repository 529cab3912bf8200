"""Numbers, batched per key by a tick-driven BatchingBolt and by a TicklessBatchingBolt
(whose results go to the sink on a direct stream), counted by a sink."""
from streamparse import Grouping, Topology

from bolts.batching import KeyBatcher, TicklessKeyBatcher
from bolts.sink import Sink
from spouts.numbers import NumberSpout


class Batching(Topology):
    config = {
        "topology.max.spout.pending": 300,
        "topology.message.timeout.secs": 30,
        "topology.acker.executors": 1,
        "topology.workers": 1,
        "topology.worker.childopts": "-Xmx768m",
        "topology.max.task.parallelism": 8,
        "numbers.count": 2000,
    }
    numbers = NumberSpout.spec(par=2)
    batcher = KeyBatcher.spec(inputs={numbers: Grouping.fields("key")}, par=2,
                              config={"topology.tick.tuple.freq.secs": 1})
    tickless = TicklessKeyBatcher.spec(inputs={numbers: Grouping.fields("key")})
    sink = Sink.spec(inputs={batcher["batches"]: Grouping.SHUFFLE, tickless["direct_batches"]: Grouping.DIRECT},
                     par=2)
