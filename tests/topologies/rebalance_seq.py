"""A rebalance target: sequence numbers through a counter-like keyed bolt.

spout (0..N-1) -shuffle-> count -fields(key)... -shuffle-> sink

Like reliable_seq.py, but the spout resumes: at start-up it reads
``<test.out>/acks.txt`` and emits only the ids not acked yet (a real source resumes
from committed offsets), so a rebalance (which restarts every process) does not
replay what was already acked. It writes ``<test.out>/done`` once every id is acked.
``count`` keeps a per-key counter and appends ``n`` to the sink's files through
``sink``. ``test.fail.above = k``: ``count``'s initialize raises when it has more
than k tasks (a rebalance that cannot start). ``spout`` has a split limit of
``test.spout.max`` tasks (the ``max_parallelism`` hook, bittern/rebalance.py).
``test.gate``: the ids at or above the gate's wait (testkit.Gate).
"""
import json
import os
import time

from bittern import Bolt, Grouping, ReliableSpout, Topology

from testkit import Gate, LineSinkBolt


class ResumingSpout(ReliableSpout):
    outputs = ["n", "key"]

    @classmethod
    def max_parallelism(cls, config):
        return int(config.get("test.spout.max", 1))

    def initialize(self, config, context):
        self.out = config["test.out"]
        os.makedirs(self.out, exist_ok=True)
        self.count = int(config["test.count"])
        self.every = 1.0 / float(config.get("test.rate", 0) or 1e9)
        self.next_at = time.monotonic()
        path = os.path.join(self.out, "acks.txt")
        try:
            self.done_ids = {int(x) for x in open(path).read().split()}
        except FileNotFoundError:
            self.done_ids = set()
        self.todo = iter([i for i in range(self.count) if i not in self.done_ids])
        self.gate, self.held = Gate(config, self.count), None
        self.acks = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self.failures = 0

    def next_item(self):
        now = time.monotonic()
        if now < self.next_at:
            return None
        i = self.held if self.held is not None else next(self.todo, None)
        if i is None:
            return None
        if i >= self.gate.limit():
            self.held, self.next_at = i, now
            return None
        self.held = None
        self.next_at += self.every
        if self.next_at < now - 1.0:  # do not burst after a pause
            self.next_at = now
        return i, [i, i % 97]

    def fail(self, tup_id):
        self.failures += 1
        super().fail(tup_id)

    def on_acked(self, tup_id):
        os.write(self.acks, b"%d\n" % tup_id)
        self.done_ids.add(tup_id)
        if len(self.done_ids) == self.count:
            with open(os.path.join(self.out, "done.tmp"), "w") as f:
                json.dump({"acked": len(self.done_ids), "pending": len(self.pending)}, f)
            os.replace(os.path.join(self.out, "done.tmp"), os.path.join(self.out, "done"))


class CountBolt(Bolt):
    outputs = ["n"]

    def initialize(self, config, context):
        tasks = len(context.get_component_tasks(context.component))
        limit = int(config.get("test.fail.above", 0))
        if limit and tasks > limit:
            raise RuntimeError(f"count cannot run with {tasks} tasks (test.fail.above={limit})")
        self.counts = {}

    def process(self, tup):
        n, key = tup.values
        self.counts[key] = self.counts.get(key, 0) + 1
        self.emit([n])


class RebalanceSeq(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "ATLEAST_ONCE",
              "topology.message.timeout.secs": 5, "topology.max.spout.pending": 300}
    spout = ResumingSpout.spec(par=1)
    count = CountBolt.spec(par=2, inputs={spout: Grouping.fields("key")})
    sink = LineSinkBolt.spec(par=1, inputs={count: Grouping.SHUFFLE})
