'''Half acking: HalfAckBolt fails every other word, the spout hears of each; at least once.'''
import sys

import heronpy.api.api_constants as constants
from heronpy.api.stream import Grouping
from heronpy.api.topology import TopologyBuilder

from examples.src.python.bolt import HalfAckBolt
from examples.src.python.spout import WordSpout

if __name__ == '__main__':
    if len(sys.argv) != 2:
        print("Topology's name is not specified")
        sys.exit(1)

    builder = TopologyBuilder(name=sys.argv[1])
    word_spout = builder.add_spout("word_spout", WordSpout, par=2)
    builder.add_bolt("half_ack_bolt", HalfAckBolt, par=2, inputs={word_spout: Grouping.fields('word')})
    builder.set_config({constants.TOPOLOGY_RELIABILITY_MODE: constants.TopologyReliabilityMode.ATLEAST_ONCE,
                        constants.TOPOLOGY_MAX_SPOUT_PENDING: 100000000,
                        constants.TOPOLOGY_MESSAGE_TIMEOUT_SECS: 300})
    builder.build_and_submit()
