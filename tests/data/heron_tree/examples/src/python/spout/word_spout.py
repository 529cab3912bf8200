"""WordSpout: a bounded number of words, each with its own message id; counts its acks
and fails and lets a CountingHook watch it."""
from heronpy.api.spout.spout import Spout

from ..misc import CountingHook, write_json
from .words import WORDS, how_many


class WordSpout(Spout):
    outputs = ['word']

    def initialize(self, config, context):
        self.config = config
        self.task = context.get_task_id()
        self.left = how_many(config)
        self.sent = 0
        self.acked, self.failed = [], []
        context.add_task_hook(CountingHook())

    def next_tuple(self):
        if self.left > 0:
            self.left -= 1
            self.emit([WORDS[self.sent % len(WORDS)]], tup_id=f"{self.task}-{self.sent}")
            self.sent += 1

    def ack(self, tup_id):
        self.acked.append(tup_id)

    def fail(self, tup_id):
        self.failed.append(tup_id)

    def close(self):
        write_json(self.config, f"word_spout-{self.task}.json",
                   {"sent": self.sent, "acked": sorted(self.acked), "failed": sorted(self.failed)})
