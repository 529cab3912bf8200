"""The standard workload's split bolt written for pystorm (what streamparse's Python
components are), for the multilang rows of ``scripts/bench.py``: run by the python of
a virtualenv holding pystorm from PyPI; its serializer (json | msgpack) is
``BENCH_SPLIT`` of the environment the topology runs in, which the host's is too. It
splits the first value into words and emits each with the tuple's other values (the
latency runs' timestamp), anchored to its input; pystorm acks the input after
``process`` returns."""
import os

from pystorm import Bolt


class SplitBolt(Bolt):
    def process(self, tup):
        values = tup.values
        rest = values[1:]
        emit = self.emit
        for word in values[0].split():
            emit([word, *rest])


if __name__ == "__main__":
    SplitBolt(serializer=os.environ.get("BENCH_SPLIT", "json")).run()
