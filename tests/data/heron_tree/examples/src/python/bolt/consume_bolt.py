"""ConsumeBolt: counts what it gets."""
from heronpy.api.bolt.bolt import Bolt

from ..misc import write_json


class ConsumeBolt(Bolt):
    def initialize(self, config, context):
        self.config = config
        self.task = context.get_task_id()
        self.total = 0

    def process(self, tup):
        self.total += 1

    def process_tick(self, tup):
        self.log(f"received {self.total} tuples")

    def cleanup(self):
        write_json(self.config, f"consume_bolt-{self.task}.json", {"total": self.total})
