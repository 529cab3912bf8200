"""Exactly N tuples, all acked: for checking metric values.

The spout emits 0..N-1 (``test.count``) reliably and calls done(); the bolt acks
everything, raises on every ``test.raise.every``-th number (and is then
failed and replayed), and counts what it saw in a user metric."""
from bittern import EXHAUSTED, Bolt, Grouping, ReliableSpout, Topology
from bittern.api.metrics import AssignableMetric, CountMetric


class Numbers(ReliableSpout):
    outputs = ["n"]

    def initialize(self, config, context):
        self.i = 0
        self.count = int(config["test.count"])

    def next_item(self):
        if self.i >= self.count:
            return EXHAUSTED
        self.i += 1
        return self.i - 1, [self.i - 1]


class Check(Bolt):
    outputs = []

    def initialize(self, config, context):
        self.raise_every = int(config.get("test.raise.every", 0))
        self.raised = set()
        self.seen = context.register_metric("seen", AssignableMetric(0))
        self.batch = context.register_metric("per_interval", CountMetric())
        self.total = 0

    def process(self, tup):
        n = tup.values[0]
        if self.raise_every and n % self.raise_every == 0 and n not in self.raised:
            self.raised.add(n)
            raise ValueError(f"number {n} is unlucky")
        self.total += 1
        self.seen.update(self.total)
        self.batch.incr()


class Counted(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE", "topology.stmgrs": 2,
              "topology.metrics.interval.secs": 1}
    numbers = Numbers.spec(par=1)
    check = Check.spec(par=2, inputs={numbers: Grouping.fields("n")})  # a replay meets the same task
