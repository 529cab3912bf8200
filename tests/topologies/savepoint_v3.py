"""savepoint_v1.py without its stateful count bolt: a savepoint of v1 restores into it
only with --allow-non-restored-state."""
from bittern import Grouping, Topology
from exactly_once_seq import SeqSink, SeqSpout


class Shrunk(Topology):
    config = {"topology.stmgrs": 1, "topology.reliability.mode": "EFFECTIVELY_ONCE",
              "topology.stateful.checkpoint.interval.seconds": 0.5}
    spout = SeqSpout.spec(par=1)
    sink = SeqSink.spec(par=1, inputs={spout: Grouping.SHUFFLE})
