"""At-least-once under fire: sequence numbers through three bolts.

spout (ReliableSpout, 0..N-1) -shuffle-> relay -fields(key)-> keyed -shuffle-> sink

The sink appends each number to ``<test.out>/sink-<task>.txt`` with an unbuffered
write before the tuple is acked. The spout appends each acked id to
``<test.out>/acks.txt``; when all N are acked it writes ``<test.out>/done``.
``test.fail.every``: the keyed bolt fails every k-th tuple it sees (Heron's
half-acking example with k=2). ``test.raise.every``: it raises (once) on every
number divisible by k.
"""
import json
import os
import time

from bittern import Bolt, Grouping, ReliableSpout, Topology

from testkit import LineSinkBolt


class SeqSpout(ReliableSpout):
    outputs = ["n"]

    def initialize(self, config, context):
        self.out = config["test.out"]
        os.makedirs(self.out, exist_ok=True)
        self.count = int(config["test.count"])
        self.every = 1.0 / float(config.get("test.rate", 0) or 1e9)
        self.next_at = time.monotonic()
        self.i = 0
        self.acked = 0
        self.failures = 0
        self.acks = os.open(os.path.join(self.out, "acks.txt"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def next_item(self):
        if self.i >= self.count:
            return None
        now = time.monotonic()
        if now < self.next_at:
            return None
        self.next_at += self.every
        self.i += 1
        return self.i - 1, [self.i - 1]

    def fail(self, tup_id):
        self.failures += 1
        super().fail(tup_id)

    def on_acked(self, tup_id):
        os.write(self.acks, b"%d\n" % tup_id)
        self.acked += 1
        if self.acked == self.count:
            with open(os.path.join(self.out, "done.tmp"), "w") as f:
                json.dump({"acked": self.acked, "pending": len(self.pending), "failures": self.failures,
                           "emitted": self.i}, f)
            os.replace(os.path.join(self.out, "done.tmp"), os.path.join(self.out, "done"))


class RelayBolt(Bolt):
    outputs = ["n", "key"]

    def process(self, tup):
        n = tup.values[0]
        self.emit([n, n % 97])


class KeyedBolt(Bolt):
    outputs = ["n"]

    def initialize(self, config, context):
        self.fail_every = int(config.get("test.fail.every", 0))
        self.raise_every = int(config.get("test.raise.every", 0))
        self.out = config["test.out"]
        self.seen = 0

    def process(self, tup):
        self.seen += 1
        if self.fail_every and self.seen % self.fail_every == 0:
            self.fail(tup)
            return
        n = tup.values[0]
        if self.raise_every and n % self.raise_every == 0:
            marker = os.path.join(self.out, f"raised-{n}")
            if not os.path.exists(marker):  # raise once per number, even across restarts
                open(marker, "w").close()
                raise RuntimeError(f"bad luck with {n}")
        self.emit([tup.values[0]])


class ReliableSeq(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "ATLEAST_ONCE",
              "topology.message.timeout.secs": 3, "topology.max.spout.pending": 500}
    spout = SeqSpout.spec(par=1)
    relay = RelayBolt.spec(par=2, inputs=[spout])
    keyed = KeyedBolt.spec(par=2, inputs={relay: Grouping.fields("key")})
    sink = LineSinkBolt.spec(par=2, inputs={keyed: Grouping.SHUFFLE})
