"""A spout whose next_tuple sleeps after each tuple (as heronpy's ArrayLooper(sleep=...)
does), into a sink: its tuples must flow and it must stop on time, though a turn of the
spout's loop would call next_tuple 64 times."""
import time

from bittern import Bolt, Spout, Topology


class Sleepy(Spout):
    outputs = ["n"]

    def initialize(self, config, context):
        self.n = 0
        self.pause = float(config.get("test.sleep", 0.5))

    def next_tuple(self):
        self.emit([self.n])
        self.n += 1
        time.sleep(self.pause)


class Sink(Bolt):
    def process(self, tup):
        pass


class SleepySpout(Topology):
    spout = Sleepy.spec()
    sink = Sink.spec(inputs=[spout])
