"""Multilang conformance: a Python spout feeds scripted multilang bolts (fake.py),
one per scenario; recording sinks (testkit.RecordBolt) write what reaches them."""
import sys

from bittern import EXHAUSTED, Grouping, ReliableSpout, ShellBolt, Stream, Topology
from testkit import RecordBolt


class Numbers(ReliableSpout):
    outputs = ["n"]

    def initialize(self, config, context):
        self.i = 0
        self.count = int(config["test.count"])

    def next_item(self):
        if self.i >= self.count:
            return EXHAUSTED
        self.i += 1
        return self.i - 1, [self.i - 1]


def fake(scenario, inputs, outputs=("n",), **config):
    return ShellBolt.spec(command=[sys.executable], script="multilang/fake.py", outputs=list(outputs), inputs=inputs,
                          config={"fake.scenario": scenario, **config})


class Conformance(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE", "topology.message.timeout.secs": 4,
              "bittern.restart.backoff.initial.secs": 0.2}
    numbers = Numbers.spec()
    interleave = fake("interleave", [numbers], outputs=[Stream(["n"]), Stream(["n", "tasks"], name="check")],
                      **{"topology.tick.tuple.freq.secs": 0.5})
    interleave_sink = RecordBolt.spec(par=2, inputs={interleave: Grouping.fields("n"),
                                                     interleave["check"]: Grouping.SHUFFLE})
    unknown_anchor = fake("unknown_anchor", [numbers])
    garbage = fake("garbage", [numbers])
    exit = fake("exit", [numbers])
    hang = fake("hang", [numbers], **{"topology.subprocess.timeout.secs": 2})
    sink = RecordBolt.spec(inputs=[unknown_anchor, garbage, exit, hang])
