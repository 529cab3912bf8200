"""Heron's word count made by a factory, as Heron's integration tests make theirs: the
topology class comes from heronpy's ``TopologyType(name, (Topology,), {...})`` (which
records it as a class of ``heronpy.api.topology``), named by the factory's caller."""
from heronpy.api.stream import Grouping
from heronpy.api.topology import Topology, TopologyType

from heron_components import CountBolt, WordSpout


def word_count_topology(name, par):
    words = WordSpout.spec(par=par)
    count = CountBolt.spec(par=par, inputs={words: Grouping.fields('word')})
    return TopologyType(name, (Topology,), {"word_spout": words, "count_bolt": count,
                                            "config": {"topology.reliability.mode": "ATMOST_ONCE"}})


WordCount = word_count_topology("factory_word_count", 2)
