"""HalfAckBolt: fails every other tuple it gets and acks the rest."""
from heronpy.api.bolt.bolt import Bolt

from ..misc import CountingHook, write_json


class HalfAckBolt(Bolt):
    def initialize(self, config, context):
        self.config = config
        self.task = context.get_task_id()
        self.total = self.acked = self.failed = 0
        context.add_task_hook(CountingHook())

    def process(self, tup):
        self.total += 1
        if self.total % 2 == 0:
            self.failed += 1
            self.fail(tup)
        else:
            self.acked += 1
            self.ack(tup)

    def cleanup(self):
        write_json(self.config, f"half_ack_bolt-{self.task}.json",
                   {"total": self.total, "acked": self.acked, "failed": self.failed})
