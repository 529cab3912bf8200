'''Word count, built as Heron's examples build theirs: WordSpout -> CountBolt on a
fields grouping, at least once, both watched by a task hook.'''
import sys

import heronpy.api.api_constants as constants
from heronpy.api.stream import Grouping
from heronpy.api.topology import TopologyBuilder

from examples.src.python.bolt import CountBolt
from examples.src.python.spout import WordSpout

if __name__ == '__main__':
    if len(sys.argv) != 2:
        print("Topology's name is not specified")
        sys.exit(1)

    builder = TopologyBuilder(name=sys.argv[1])
    word_spout = builder.add_spout("word_spout", WordSpout, par=2)
    count_bolt = builder.add_bolt("count_bolt", CountBolt, par=2,
                                  inputs={word_spout: Grouping.fields('word')},
                                  config={constants.TOPOLOGY_TICK_TUPLE_FREQ_SECS: 1})
    builder.set_config({constants.TOPOLOGY_RELIABILITY_MODE: constants.TopologyReliabilityMode.ATLEAST_ONCE})
    builder.build_and_submit()
