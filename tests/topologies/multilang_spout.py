"""A multilang spout (fake.py's "spout" scenario) feeding a recording sink."""
import sys

from bittern import ShellSpout, Topology
from testkit import RecordBolt


class ShellSpoutTopology(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE"}
    numbers = ShellSpout.spec(command=[sys.executable], script="multilang/fake.py", outputs=["n"],
                              config={"fake.scenario": "spout"})
    sink = RecordBolt.spec(inputs=[numbers])
