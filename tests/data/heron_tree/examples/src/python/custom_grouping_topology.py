'''Custom grouping (class style): every word goes to the first of ConsumeBolt's three tasks.'''
import logging

import heronpy.api.api_constants as constants
from heronpy.api.custom_grouping import ICustomGrouping
from heronpy.api.stream import Grouping
from heronpy.api.topology import Topology

from examples.src.python.bolt import ConsumeBolt
from examples.src.python.spout import WordSpout


class FirstTaskGrouping(ICustomGrouping):
    def prepare(self, context, component, stream, target_tasks):
        logging.getLogger().info("FirstTaskGrouping for %s/%s: targets %s", component, stream, target_tasks)
        self.target_tasks = target_tasks

    def choose_tasks(self, values):
        return [self.target_tasks[0]]


class CustomGrouping(Topology):
    word_spout = WordSpout.spec(par=1)
    consume_bolt = ConsumeBolt.spec(par=3, inputs={word_spout: Grouping.custom(FirstTaskGrouping())},
                                    config={constants.TOPOLOGY_TICK_TUPLE_FREQ_SECS: 1})
