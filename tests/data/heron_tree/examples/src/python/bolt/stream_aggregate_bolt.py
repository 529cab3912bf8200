"""StreamAggregateBolt: how many tuples came on each stream."""
from collections import Counter

from heronpy.api.bolt.bolt import Bolt

from ..misc import write_json


class StreamAggregateBolt(Bolt):
    def initialize(self, config, context):
        self.config = config
        self.task = context.get_task_id()
        self.streams = Counter()

    def process(self, tup):
        self.streams[tup.stream] += 1

    def cleanup(self):
        write_json(self.config, f"stream_aggregator-{self.task}.json", {"streams": self.streams})
