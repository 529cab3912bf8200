"""A steady trickle for lifecycle and recovery tests.

The spout emits about ``test.rate`` numbers per second forever and logs every
activate/deactivate and its next_tuple calls to ``<test.out>/spout-<task>.log``;
the sink counts what it receives and rewrites ``<test.out>/sink-<task>.txt``
("count pid") on every tick, so a test can watch tuples flow.
"""
import os
import time

from bittern import Bolt, Spout, Topology


class TrickleSpout(Spout):
    outputs = ["n"]

    def initialize(self, config, context):
        self.out = config["test.out"]
        os.makedirs(self.out, exist_ok=True)
        self.log = open(os.path.join(self.out, f"spout-{context.task_id}.log"), "a", buffering=1)
        self.every = 1.0 / float(config.get("test.rate", 200))
        self.next_at = time.monotonic()
        self.i = 0
        self.calls = 0
        self.log.write(f"init {os.getpid()}\n")

    def next_tuple(self):
        self.calls += 1
        if self.calls % 50 == 0:
            self.log.write(f"calls {self.calls}\n")
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + self.every
        self.emit([self.i])
        self.i += 1

    def activate(self):
        self.log.write("activate\n")

    def deactivate(self):
        self.log.write("deactivate\n")


class SinkBolt(Bolt):
    outputs = []

    def initialize(self, config, context):
        self.path = os.path.join(config["test.out"], f"sink-{context.task_id}.txt")
        self.count = 0

    def process(self, tup):
        self.count += 1

    def process_tick(self, tup):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{self.count} {os.getpid()}\n")
        os.replace(tmp, self.path)


class Flow(Topology):
    config = {"topology.stmgrs": 2}
    spout = TrickleSpout.spec(par=1)
    sink = SinkBolt.spec(par=2, inputs=[spout], config={"topology.tick.tuple.freq.secs": 0.2})
