"""Bad input: a direct grouping, which heronpy itself cannot declare a stream for."""
from heronpy.api.stream import Grouping
from heronpy.api.topology import TopologyBuilder

from heron_components import CountBolt, WordSpout

if __name__ == '__main__':
    builder = TopologyBuilder("bad_direct")
    words = builder.add_spout("words", WordSpout, par=1)
    builder.add_bolt("direct_count", CountBolt, par=2, inputs={words: Grouping.DIRECT})
    builder.build_and_submit()
