"""The same topology after an upgrade: the count bolt has 3 tasks instead of 2, and a new
component (a stateful bolt counting what it sees, in keyed state) is added; it starts
empty. Its state must come from the savepoint of savepoint_v1.py."""
from bittern import Bolt, Grouping, Topology
from exactly_once_seq import CountBolt, SeqSink, SeqSpout


class Audit(Bolt):
    outputs = []

    def init_state(self, state):
        self.state = state

    def process(self, tup):
        self.state.put("seen", self.state.get("seen", 0) + 1)


class Upgraded(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "EFFECTIVELY_ONCE",
              "topology.stateful.checkpoint.interval.seconds": 0.5}
    spout = SeqSpout.spec(par=1)
    count = CountBolt.spec(par=3, inputs={spout: Grouping.fields("key")})
    sink = SeqSink.spec(par=2, inputs={count: Grouping.SHUFFLE})
    audit = Audit.spec(par=1, inputs={count: Grouping.SHUFFLE})
