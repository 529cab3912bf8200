"""A heronpy component config holding a live generator, which neither cloudpickle nor
Heron can carry: refused in one line naming the component and the key."""
import sys

from heronpy.api.stream import Grouping
from heronpy.api.topology import TopologyBuilder

from heron_components import CountBolt, WordSpout

if __name__ == '__main__':
    builder = TopologyBuilder(name=sys.argv[1])
    words = builder.add_spout("words", WordSpout, par=1)
    builder.add_bolt("count", CountBolt, par=1, inputs={words: Grouping.fields('word')},
                     config={"count.numbers": (n for n in range(3))})
    builder.build_and_submit()
