"""A class-style heronpy topology: one spout with two named streams; every odd number
goes to each task of ``audit`` (ALL grouping), every even one to the ``pick`` task the
custom grouping chooses."""
from heronpy.api.stream import Grouping
from heronpy.api.topology import Topology

from heron_components import ModGrouping, NumberSpout, SeenBolt


class MultiStream(Topology):
    config = {"topology.reliability.mode": "ATMOST_ONCE"}
    numbers = NumberSpout.spec(par=1)
    audit = SeenBolt.spec(par=2, inputs={numbers['odd']: Grouping.ALL})
    pick = SeenBolt.spec(par=3, inputs={numbers['even']: Grouping.custom(ModGrouping())})
