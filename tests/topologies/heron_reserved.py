"""A heronpy topology that names a bolt ``__system``, the component Bittern's tick
tuples come from: refused in one line naming the file and the component."""
import sys

from heronpy.api.stream import Grouping
from heronpy.api.topology import TopologyBuilder

from heron_components import CountBolt, WordSpout

if __name__ == '__main__':
    builder = TopologyBuilder(name=sys.argv[1])
    words = builder.add_spout("__integration_test_words", WordSpout, par=1)
    builder.add_bolt("__system", CountBolt, par=1, inputs={words: Grouping.fields('word')})
    builder.build_and_submit()
