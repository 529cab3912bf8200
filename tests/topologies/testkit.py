"""Components shared by the test topologies (importable because a topology file's
directory is on the instances' sys.path).

* ``NumberSpout`` emits ``[i, key]`` for i in 0..N-1 (``test.count``), key = i % ``test.keys``.
* ``LineSinkBolt`` appends each tuple's first value to ``<test.out>/sink-<task>.txt``
  with an unbuffered write before the tuple is acked (it survives kill -9 of the sink).
* ``RecordBolt`` appends every tuple it receives to ``<test.out>/<component>-<task>.jsonl``
  (flushed on close), then re-emits it unchanged on its default stream if it declares one.
* ``KeyedCountBolt`` counts ``[n, key]`` per key in its keyed (checkpointed) state and
  emits ``[n, key, count]``: the stateful bolt of the exactly-once tests.
* ``write_pid`` records an instance's pid in ``<test.out>/pids/<component>-<task>``, for
  tests that kill it.
* ``Gate``: ``test.gate`` names a file holding a number G; while it exists, a spout that
  asks its gate emits only the numbers below G. A test that must act while numbers remain
  (a rebalance, a savepoint) holds the rest back this way rather than by racing the rate,
  which a loaded machine loses; raising G or removing the file lets them go
  (tests/eokit.py ``set_gate``).
"""
import json
import os
import time

from bittern import Bolt, Spout


class NumberSpout(Spout):
    outputs = ["n", "key"]

    def initialize(self, config, context):
        self.i = 0
        self.count = int(config.get("test.count", 1000))
        self.keys = int(config.get("test.keys", 10))
        # With par > 1, task k emits the numbers congruent to k modulo par.
        self.index = context.task_index
        self.par = len(context.get_component_tasks(context.component))
        self.i = self.index

    def next_tuple(self):
        if self.i >= self.count:
            return
        self.emit([self.i, f"k{self.i % self.keys}"], tup_id=self.i)
        self.i += self.par


class RecordBolt(Bolt):
    outputs = []

    def initialize(self, config, context):
        out = config["test.out"]
        os.makedirs(out, exist_ok=True)
        self.path = os.path.join(out, f"{context.component}-{context.task_id}.jsonl")
        self.f = open(self.path, "a")
        self.task = context.task_id

    def process(self, tup):
        self.f.write(json.dumps({"task": self.task, "src": tup.component, "src_task": tup.task,
                                 "stream": tup.stream, "values": tup.values}) + "\n")

    def close(self):
        self.f.close()


class LineSinkBolt(Bolt):
    outputs = []

    def initialize(self, config, context):
        os.makedirs(config["test.out"], exist_ok=True)
        path = os.path.join(config["test.out"], f"sink-{context.task_id}.txt")
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def process(self, tup):
        os.write(self.fd, b"%d\n" % tup.values[0])


class KeyedCountBolt(Bolt):
    outputs = ["n", "key", "count"]

    def init_state(self, state):
        self.counts = state.keyed

    def process(self, tup):
        n, key = tup.values
        c = self.counts.get(key, 0) + 1
        self.counts.put(key, c)
        self.emit([n, key, c])


class Gate:
    EVERY_SECS = 0.1  # how often the file is read again

    def __init__(self, config, count):
        self.path = config.get("test.gate") or None
        self.count = count
        self.value, self.read_at = count, float("-inf")

    def limit(self):
        """The number below which the spout may emit now."""
        if self.path is None:
            return self.count
        now = time.monotonic()
        if now >= self.read_at + self.EVERY_SECS:
            self.read_at = now
            try:
                with open(self.path) as f:
                    self.value = min(self.count, int(f.read().strip() or 0))
            except FileNotFoundError:
                self.value = self.count
            except ValueError:
                pass  # (written whole by a rename: not expected; the last value holds)
        return self.value


def write_pid(config, context):
    d = os.path.join(config["test.out"], "pids")
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".{context.component}-{context.task_id}.tmp")
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, os.path.join(d, f"{context.component}-{context.task_id}"))
