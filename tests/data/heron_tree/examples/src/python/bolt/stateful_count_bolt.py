"""StatefulCountBolt: counts words in heronpy's stateful API (put at every checkpoint)."""
from collections import Counter

from heronpy.api.bolt.bolt import Bolt
from heronpy.api.state.stateful_component import StatefulComponent

from ..misc import write_json


class StatefulCountBolt(Bolt, StatefulComponent):
    def init_state(self, stateful_state):
        self.recovered_state = stateful_state

    def pre_save(self, checkpoint_id):
        for word, n in self.counter.items():
            self.recovered_state.put(word, n)
        write_json(self.config, f"stateful_count-{self.task}.json",
                   {"checkpoint": checkpoint_id, "state": {w: self.recovered_state.get(w) for w in self.counter}})

    def initialize(self, config, context):
        self.config = config
        self.task = context.get_task_id()
        self.counter = Counter()

    def process(self, tup):
        self.counter[tup.values[0]] += 1
        self.ack(tup)
