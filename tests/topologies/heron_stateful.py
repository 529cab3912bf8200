"""Effectively once with heronpy stateful components (StatefulComponent's init_state /
pre_save), class style: the spout keeps its offset in its state, the bolts their
running count and sum; every checkpoint's state is logged, with the bolt's pid."""
import json
import os
import time

from heronpy.api.bolt.bolt import Bolt
from heronpy.api.spout.spout import Spout
from heronpy.api.state.stateful_component import StatefulComponent
from heronpy.api.stream import Grouping
from heronpy.api.topology import Topology


class StatefulNumbers(Spout, StatefulComponent):
    """0..heron.numbers-1 at heron.rate per second, resuming from its saved offset."""
    outputs = ['n']

    def init_state(self, stateful_state):
        self.recovered_state = stateful_state
        self.next = stateful_state.get('next') or 0

    def pre_save(self, checkpoint_id):
        self.recovered_state.put('next', self.next)

    def initialize(self, config, context):
        self.end = int(config["heron.numbers"])
        self.every = 1.0 / float(config["heron.rate"])
        self.next_at = time.monotonic()

    def next_tuple(self):
        now = time.monotonic()
        if self.next < self.end and now >= self.next_at:
            self.next_at = max(self.next_at + self.every, now - 0.1)
            self.emit([self.next])
            self.next += 1


class StatefulSum(Bolt, StatefulComponent):
    outputs = []

    def init_state(self, stateful_state):
        self.recovered_state = stateful_state

    def pre_save(self, checkpoint_id):
        self.log_file.write(json.dumps({"checkpoint": checkpoint_id, "pid": os.getpid(),
                                        "count": self.recovered_state.get('count') or 0,
                                        "sum": self.recovered_state.get('sum') or 0}) + "\n")

    def initialize(self, config, context):
        out = config["heron.out"]
        os.makedirs(out, exist_ok=True)
        self.log_file = open(os.path.join(out, f"sum-{context.get_task_id()}.jsonl"), "a", buffering=1)

    def process(self, tup):
        state = self.recovered_state
        state.put('count', (state.get('count') or 0) + 1)
        state.put('sum', (state.get('sum') or 0) + tup.values[0])


class StatefulSumTopology(Topology):
    config = {"topology.reliability.mode": "EFFECTIVELY_ONCE",
              "topology.stateful.checkpoint.interval.seconds": "0.5"}
    numbers = StatefulNumbers.spec(par=1)
    sums = StatefulSum.spec(par=2, inputs={numbers: Grouping.fields('n')})
