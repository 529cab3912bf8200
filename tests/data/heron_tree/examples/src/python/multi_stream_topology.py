'''Multiple streams (class style): words to CountBolt on a fields grouping, words and
error messages to StreamAggregateBolt on ALL; every task watched by the hook that
topology.auto.task.hooks names.'''
import heronpy.api.api_constants as constants
from heronpy.api.stream import Grouping
from heronpy.api.topology import Topology

from examples.src.python.bolt import CountBolt, StreamAggregateBolt
from examples.src.python.spout import MultiStreamSpout


class MultiStream(Topology):
    config = {constants.TOPOLOGY_AUTO_TASK_HOOKS: ["examples.src.python.misc.AutoHook"]}
    spout = MultiStreamSpout.spec(par=2)
    count_bolt = CountBolt.spec(par=2, inputs={spout: Grouping.fields('word')},
                                config={constants.TOPOLOGY_TICK_TUPLE_FREQ_SECS: 1})
    stream_aggregator = StreamAggregateBolt.spec(par=1, inputs={spout: Grouping.ALL,
                                                                spout['error']: Grouping.ALL})
