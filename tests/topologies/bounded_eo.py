"""A bounded exactly-once run: a user spout that calls done(), keyed counts, a
transactional file sink; with faults injected at the end (tests/test_bounded_eo.py).

spout (emits [n, n % K] for n < test.count, then done()) -fields(key)-> count (par 2)
    -shuffle-> sink (SinkBolt over a FileSink, par 2), in 2 containers

* ``test.fail.save.after.end = 1``: each count task fails (raises in ``pre_save``) the
  first checkpoint it saves after it saw the last number of its keys, once (a marker file
  per task), so the checkpoint after the last emit is abandoned once.
* ``test.fail.commits = k``: each sink task's first k commits raise (counted in a file per
  task, across restarts); ``-1``: every commit fails.
"""
import os

from bittern import Grouping, Spout, Topology
from bittern.sinks import FileSink, SinkBolt
from testkit import KeyedCountBolt, write_pid


class EndSpout(Spout):
    outputs = ["n", "key"]

    def initialize(self, config, context):
        write_pid(config, context)
        self.count = int(config["test.count"])
        self.keys = int(config.get("test.keys", 7))
        self.i = 0

    def init_state(self, state):
        self.state = state
        self.i = state.get("next", 0)

    def pre_save(self, checkpoint_id):
        self.state.put("next", self.i)

    def next_tuple(self):
        if self.i >= self.count:
            self.done()
            return
        stop = min(self.count, self.i + 50)
        for n in range(self.i, stop):
            self.emit([n, n % self.keys])
        self.i = stop


class EndCount(KeyedCountBolt):
    def initialize(self, config, context):
        write_pid(config, context)
        self.out = config["test.out"]
        self.last = int(config["test.count"]) - 1
        self.inject = bool(int(config.get("test.fail.save.after.end", 0)))
        self.seen_end = False
        self.task = context.task_id

    def process(self, tup):
        super().process(tup)
        if tup.values[0] >= self.last - int(self.config.get("test.keys", 7)):
            self.seen_end = True

    def pre_save(self, checkpoint_id):
        marker = os.path.join(self.out, f"failed-save-{self.task}")
        if self.inject and self.seen_end and not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write(str(checkpoint_id))
            raise RuntimeError(f"injected: the save of checkpoint {checkpoint_id} fails once")


class FlakySink(FileSink):
    def __init__(self, directory, prefix, failures, counter):
        super().__init__(directory, prefix)
        self.failures, self.counter = failures, counter

    def _commit(self, n):
        tries = 0
        if os.path.exists(self.counter):
            with open(self.counter) as f:
                tries = int(f.read() or 0)
        if self.failures < 0 or tries < self.failures:
            with open(self.counter, "w") as f:
                f.write(str(tries + 1))
            raise OSError(f"injected: commit {tries + 1} of checkpoint {n} fails")
        return super()._commit(n)


class EndSink(SinkBolt):
    def initialize(self, config, context):
        write_pid(config, context)
        super().initialize(config, context)

    def make_sink(self, config, context):
        out = config["test.out"]
        return FlakySink(os.path.join(out, "sink"), "seq", int(config.get("test.fail.commits", 0)),
                         os.path.join(out, f"commit-tries-{context.task_id}"))


class BoundedEO(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "EFFECTIVELY_ONCE",
              "topology.stateful.checkpoint.interval.seconds": 0.5}
    spout = EndSpout.spec()
    count = EndCount.spec(par=2, inputs={spout: Grouping.fields("key")})
    sink = EndSink.spec(par=2, inputs={count: Grouping.SHUFFLE})
