"""Backpressure under a slow bolt: sequence numbers as fast as the spouts can go.

spout (ReliableSpout, par 2) -shuffle-> slow (par 2) -shuffle-> sink (par 2)

Task ids (components sorted by name): sink 1-2, slow 3-4, spout 5-6; over two
containers round-robin: container 0 = 1, 3, 5 and container 1 = 2, 4, 6, so each
container has a spout, a slow bolt and a sink, and shuffle sends half the tuples
across containers.

* The spouts have no ``topology.max.spout.pending``: only backpressure holds them.
  The spout task of index k emits ``k, k + par, k + 2 * par, ...`` (the number is
  also the tuple id), appends each acked id to ``<test.out>/acks-<task>.txt`` and
  each failed one to ``fails-<task>.txt``; on ``deactivate`` it writes
  ``emitted-<task>.json`` (how many ids it emitted, replays not counted, with its
  index and the parallelism).
* ``slow`` sleeps ``test.slow.ms`` (default 1) per tuple until the file
  ``test.flag`` exists; it looks for the file at most every 100 ms.
* ``sink`` appends each number to ``<test.out>/sink-<task>.txt`` (unbuffered,
  before the tuple is acked).
"""
import json
import os
import time

from bittern import Bolt, ReliableSpout, Topology

from testkit import LineSinkBolt


class FastSeqSpout(ReliableSpout):
    outputs = ["n"]

    def initialize(self, config, context):
        self.out = config["test.out"]
        os.makedirs(self.out, exist_ok=True)
        self.task = context.task_id
        self.par = len(context.get_component_tasks(context.component))
        self.index = context.task_index
        self.next_id = self.index
        self.emitted = 0
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self.acks = os.open(os.path.join(self.out, f"acks-{self.task}.txt"), flags)
        self.fails = os.open(os.path.join(self.out, f"fails-{self.task}.txt"), flags)

    def next_item(self):
        n = self.next_id
        self.next_id += self.par
        self.emitted += 1
        return n, [n]

    def on_acked(self, tup_id):
        os.write(self.acks, b"%d\n" % tup_id)

    def fail(self, tup_id):
        os.write(self.fails, b"%d\n" % tup_id)
        super().fail(tup_id)

    def deactivate(self):
        path = os.path.join(self.out, f"emitted-{self.task}.json")
        with open(path + ".tmp", "w") as f:
            json.dump({"emitted": self.emitted, "index": self.index, "par": self.par,
                       "pending": len(self.pending)}, f)
        os.replace(path + ".tmp", path)


class SlowBolt(Bolt):
    outputs = ["n"]

    def initialize(self, config, context):
        self.flag = config["test.flag"]
        self.delay = float(config.get("test.slow.ms", 1)) / 1000.0
        self.fast = False
        self.checked = 0.0

    def process(self, tup):
        if not self.fast:
            now = time.monotonic()
            if now - self.checked >= 0.1:
                self.checked = now
                self.fast = os.path.exists(self.flag)
            if not self.fast:
                time.sleep(self.delay)
        self.emit([tup.values[0]])


class BackpressureSeq(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "ATLEAST_ONCE",
              # generous: a tuple may wait a long time in the queues of the slow phase,
              # and must not time out merely because of that
              "topology.message.timeout.secs": 600,
              "topology.metrics.interval.secs": 1}
    spout = FastSeqSpout.spec(par=2)
    slow = SlowBolt.spec(par=2, inputs=[spout])
    sink = LineSinkBolt.spec(par=2, inputs=[slow])
