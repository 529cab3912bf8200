"""A bolt that keeps every tuple's 1 MB payload: it grows until its supervisor's
memory limit (``bittern.instance.memory.limit.mb`` on the component) stops it."""
import os

from bittern import Bolt, Spout, Topology


class Ticks(Spout):
    outputs = ["n"]

    def initialize(self, config, context):
        self.i = 0

    def next_tuple(self):
        self.i += 1
        self.emit([self.i])


class Hog(Bolt):
    outputs = []

    def initialize(self, config, context):
        self.kept = []
        out = config["test.out"]
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"hog-{os.getpid()}"), "w"):
            pass  # one file per process start

    def process(self, tup):
        if len(self.kept) < 400:  # stops at 400 MB (above the test's limit) in any case
            self.kept.append(bytearray(1 << 20))


class MemoryHog(Topology):
    ticks = Ticks.spec()
    hog = Hog.spec(inputs=[ticks], config={"bittern.instance.memory.limit.mb": 120})
