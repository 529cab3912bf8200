"""StatefulWordSpout: a bounded number of words, what it emitted kept in heronpy's state
at every checkpoint."""
from collections import Counter

from heronpy.api.spout.spout import Spout
from heronpy.api.state.stateful_component import StatefulComponent

from .words import WORDS, how_many


class StatefulWordSpout(Spout, StatefulComponent):
    outputs = ['word']

    def init_state(self, stateful_state):
        self.recovered_state = stateful_state

    def pre_save(self, checkpoint_id):
        for word, n in self.counter.items():
            self.recovered_state.put(word, n)

    def initialize(self, config, context):
        self.left = how_many(config)
        self.counter = Counter()

    def next_tuple(self):
        if self.left > 0:
            self.left -= 1
            word = WORDS[sum(self.counter.values()) % len(WORDS)]
            self.emit([word], tup_id='message id')
            self.counter[word] += 1
