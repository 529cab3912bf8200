"""MultiStreamSpout: words on the default stream and, every 10th word, a message on the
'error' stream (nothing tracked)."""
from heronpy.api.spout.spout import Spout
from heronpy.api.stream import Stream

from .words import WORDS, how_many


class MultiStreamSpout(Spout):
    outputs = ['word', Stream(fields=['error_msg'], name='error')]

    def initialize(self, config, context):
        self.left = how_many(config)
        self.sent = 0

    def next_tuple(self):
        if self.left > 0:
            self.left -= 1
            self.emit([WORDS[self.sent % len(WORDS)]])
            self.sent += 1
            if self.sent % 10 == 0:
                self.emit([f"after {self.sent} words"], stream='error')
