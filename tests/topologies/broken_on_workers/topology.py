"""A topology that imports on the submitting machine but not on the workers: it
needs a module that only the client has (as a dependency installed on one host
and missing on the others). Instances run as ``python -m instance``."""
import os
import sys

from bittern import Bolt, Spout, Topology

if os.path.basename(os.path.dirname(os.path.abspath(sys.argv[0]))) == "instance":
    import bittern_missing_dependency  # noqa: F401 - fails on purpose on the workers


class S(Spout):
    outputs = ["n"]

    def next_tuple(self):
        pass


class B(Bolt):
    outputs = []

    def process(self, tup):
        pass


class BrokenOnWorkers(Topology):
    spout = S.spec()
    sink = B.spec(inputs=[spout])
