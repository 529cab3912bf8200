"""Several streams, all grouping and direct grouping.

The spout emits numbers. The router bolt splits them into an "even" and an "odd"
stream, and sends every multiple of 10 on the direct stream "pick" to the
checker task chosen by the number (n // 10 % tasks). An audit bolt receives
every odd number on *each* of its tasks (all grouping); a stats bolt counts the
evens (global grouping: one task sees them all). Each task prints what it saw
on shutdown.

    bittern run topologies/multi_stream.py --duration 10
"""
import json

from bittern import Bolt, Grouping, Spout, Stream, Topology


class NumberSpout(Spout):
    outputs = ["n"]

    def initialize(self, config, context):
        self.i = 0
        self.limit = int(config.get("multi.numbers", 0))

    def next_tuple(self):
        if self.limit and self.i >= self.limit:
            return
        self.emit([self.i], tup_id=self.i)
        self.i += 1


class RouterBolt(Bolt):
    outputs = [Stream(["n"], name="even"), Stream(["n"], name="odd"),
               Stream(["n"], name="pick", direct=True)]

    def initialize(self, config, context):
        self.checkers = context.get_component_tasks("checker")

    def process(self, tup):
        n = tup.values[0]
        self.emit([n], stream="even" if n % 2 == 0 else "odd")
        if n % 10 == 0:
            self.emit([n], stream="pick", direct_task=self.checkers[n // 10 % len(self.checkers)])


class TallyBolt(Bolt):
    """Counts what it receives, per stream; prints the tally on shutdown."""

    def initialize(self, config, context):
        self.context = context
        self.seen = {}

    def process(self, tup):
        self.seen[tup.stream] = self.seen.get(tup.stream, 0) + 1

    def close(self):
        print(json.dumps({"component": self.context.component, "task": self.context.task_id,
                          "seen": self.seen}))


class CheckerBolt(TallyBolt):
    """Receives multiples of 10 on the direct stream; checks they were meant for it."""

    def initialize(self, config, context):
        super().initialize(config, context)
        self.mine = context.get_component_tasks("checker").index(context.task_id)
        self.misrouted = 0

    def process(self, tup):
        super().process(tup)
        tasks = len(self.context.get_component_tasks("checker"))
        if tup.values[0] // 10 % tasks != self.mine:
            self.misrouted += 1

    def close(self):
        self.seen["misrouted"] = self.misrouted
        super().close()


class MultiStream(Topology):
    config = {"topology.stmgrs": 2}
    numbers = NumberSpout.spec(par=1)
    router = RouterBolt.spec(par=2, inputs=[numbers])
    audit = TallyBolt.spec(par=2, inputs={router["odd"]: Grouping.ALL})
    stats = TallyBolt.spec(par=2, inputs={router["even"]: Grouping.GLOBAL})
    checker = CheckerBolt.spec(par=3, inputs={router["pick"]: Grouping.DIRECT})
