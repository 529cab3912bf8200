"""Heron's word count in the builder style: the topology is built under
``if __name__ == '__main__':`` and named by ``sys.argv[1]``, as ``heron submit`` runs it.
The spout class is defined here, at module level; a heronpy TumblingWindowBolt
counts the words per one-second window beside the count bolt."""
import sys

import heronpy.api.api_constants as constants
from heronpy.api.bolt.window_bolt import TumblingWindowBolt
from heronpy.api.stream import Grouping
from heronpy.api.topology import TopologyBuilder

from heron_components import CountBolt, WindowBolt, WordSpout


class LoudWordSpout(WordSpout):
    """Defined in the topology file itself."""


if __name__ == '__main__':
    if len(sys.argv) != 2:
        print("Topology's name is not specified")
        sys.exit(1)

    builder = TopologyBuilder(name=sys.argv[1])
    word_spout = builder.add_spout("word_spout", LoudWordSpout, par=2)
    count_bolt = builder.add_bolt("count_bolt", CountBolt, par=2,
                                  inputs={word_spout: Grouping.fields('word')},
                                  config={constants.TOPOLOGY_TICK_TUPLE_FREQ_SECS: 0.5,
                                          "wordcount.custom": "for the count bolt"})
    builder.add_bolt("window", WindowBolt, par=1, inputs={word_spout: Grouping.SHUFFLE},
                     config={TumblingWindowBolt.WINDOW_DURATION_SECS: 1})
    builder.set_config({constants.TOPOLOGY_RELIABILITY_MODE: constants.TopologyReliabilityMode.ATMOST_ONCE,
                        constants.TOPOLOGY_MESSAGE_TIMEOUT_SECS: "45",
                        constants.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS: False})
    builder.build_and_submit()
