"""A tiny exactly-once topology for tests/test_exactly_once_smoke.py.

spout (0..N-1, offset in its State) -fields(key)-> count (par 2, keyed counts)
    -shuffle-> sink (SinkBolt over a FileSink in ``<test.out>/sink``)

Every instance writes its pid to ``<test.out>/pids/<component>-<task>``. ``test.gate``:
the numbers at or above the gate's wait (testkit.Gate).
"""
import os
import time

from bittern import Grouping, Spout, Topology
from bittern.sinks import FileSink, SinkBolt
from testkit import Gate, KeyedCountBolt, write_pid


class Numbers(Spout):
    outputs = ["n", "key"]

    def initialize(self, config, context):
        write_pid(config, context)
        self.count = int(config["test.count"])
        self.every = 1.0 / float(config["test.rate"])
        self.next_at = time.monotonic()
        self.gate = Gate(config, self.count)
        self.i = 0

    def init_state(self, state):
        self.state = state
        self.i = state.get("next", 0)

    def pre_save(self, checkpoint_id):
        self.state.put("next", self.i)

    def next_tuple(self):
        now = time.monotonic()
        if self.i >= self.gate.limit():
            self.next_at = now
            return
        if now < self.next_at:
            return
        self.next_at = max(self.next_at + self.every, now - 0.1)
        self.emit([self.i, self.i % 5])
        self.i += 1


class Count(KeyedCountBolt):
    def initialize(self, config, context):
        write_pid(config, context)


class Sink(SinkBolt):
    def initialize(self, config, context):
        write_pid(config, context)
        super().initialize(config, context)

    def make_sink(self, config, context):
        return FileSink(os.path.join(config["test.out"], "sink"), "smoke")


class Smoke(Topology):
    config = {"topology.reliability.mode": "EFFECTIVELY_ONCE",
              "topology.stateful.checkpoint.interval.seconds": 0.5}
    spout = Numbers.spec()
    count = Count.spec(par=2, inputs={spout: Grouping.fields("key")})
    sink = Sink.spec(inputs={count: Grouping.SHUFFLE})
