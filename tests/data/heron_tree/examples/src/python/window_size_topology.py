'''Window size: heronpy's SlidingWindowBolt over 2 s windows sliding by 1 s, at least
once (a tuple is acked when it leaves its last window). The spout is imported by the
name Heron's pex files gave the tree, as Heron's window_size_topology.py does.'''
import sys

import heronpy.api.api_constants as constants
from heronpy.api.bolt.window_bolt import SlidingWindowBolt
from heronpy.api.stream import Grouping
from heronpy.api.topology import TopologyBuilder

from heron.examples.src.python.spout import WordSpout

from examples.src.python.bolt import WindowSizeBolt

if __name__ == '__main__':
    if len(sys.argv) != 2:
        print("Topology's name is not specified")
        sys.exit(1)

    builder = TopologyBuilder(name=sys.argv[1])
    word_spout = builder.add_spout("word_spout", WordSpout, par=2)
    builder.add_bolt("window_bolt", WindowSizeBolt, par=2, inputs={word_spout: Grouping.fields('word')},
                     config={SlidingWindowBolt.WINDOW_DURATION_SECS: 2,
                             SlidingWindowBolt.WINDOW_SLIDEINTERVAL_SECS: 1})
    builder.set_config({constants.TOPOLOGY_RELIABILITY_MODE: constants.TopologyReliabilityMode.ATLEAST_ONCE})
    builder.build_and_submit()
