"""WindowSizeBolt: heronpy's SlidingWindowBolt; records the size of every window and
every distinct tuple a window held."""
from heronpy.api.bolt.window_bolt import SlidingWindowBolt

from ..misc import write_json


class WindowSizeBolt(SlidingWindowBolt):
    def initialize(self, config, context):
        super().initialize(config, context)
        self.config = config
        self.task = context.get_task_id()
        self.sizes = []
        self.seen = {}  # id(tuple) -> tuple (kept alive, so no id is reused)

    def processWindow(self, window_info, tuples):
        self.sizes.append(len(tuples))
        for t in tuples:
            self.seen[id(t)] = t
        self.logger.info(f"window of {len(tuples)} tuples, average {sum(self.sizes) / len(self.sizes)}")

    def cleanup(self):
        write_json(self.config, f"window_bolt-{self.task}.json",
                   {"sizes": self.sizes, "distinct": len(self.seen)})
