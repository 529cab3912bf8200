"""An exactly-once topology before an upgrade (tests/test_savepoint.py): the replayable
sequence spout, keyed counts (par 2), a transactional sink; see exactly_once_seq.py."""
from bittern import Grouping, Topology
from exactly_once_seq import CountBolt, SeqSink, SeqSpout


class Upgradable(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "EFFECTIVELY_ONCE",
              "topology.stateful.checkpoint.interval.seconds": 0.5}
    spout = SeqSpout.spec(par=1)
    count = CountBolt.spec(par=2, inputs={spout: Grouping.fields("key")})
    sink = SeqSink.spec(par=2, inputs={count: Grouping.SHUFFLE})
