"""At least once with Heron's half-ack bolt: every other tuple fails and the spout
replays it, until each id has been acked once."""
import heronpy.api.api_constants as constants
from heronpy.api.stream import Grouping
from heronpy.api.topology import TopologyBuilder

from heron_components import HalfAckBolt, RelayBolt, ReplaySpout

if __name__ == '__main__':
    builder = TopologyBuilder("half_ack")
    ids = builder.add_spout("ids", ReplaySpout, par=1)
    relay = builder.add_bolt("relay", RelayBolt, par=2, inputs={ids: Grouping.SHUFFLE})
    builder.add_bolt("halfack", HalfAckBolt, par=2, inputs=[relay])
    builder.set_config({constants.TOPOLOGY_RELIABILITY_MODE: constants.TopologyReliabilityMode.ATLEAST_ONCE,
                        constants.TOPOLOGY_MAX_SPOUT_PENDING: 20})
    builder.build_and_submit()
