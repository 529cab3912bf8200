"""CountBolt: counts words, emits [word, count] anchored to the word, acks it; heronpy's
global counter counts every word."""
from collections import Counter

from heronpy.api import global_metrics
from heronpy.api.bolt.bolt import Bolt

from ..misc import CountingHook, write_json


class CountBolt(Bolt):
    outputs = ['word', 'count']

    def initialize(self, config, context):
        self.config = config
        self.task = context.get_task_id()
        self.counter = Counter()
        self.ticks = 0
        context.add_task_hook(CountingHook())

    def process(self, tup):
        word = tup.values[0]
        self.counter[word] += 1
        global_metrics.safe_incr('count')
        self.emit([word, self.counter[word]], anchors=[tup])
        self.ack(tup)

    def process_tick(self, tup):
        self.ticks += 1

    def cleanup(self):
        write_json(self.config, f"count_bolt-{self.task}.json", {"counts": self.counter})
