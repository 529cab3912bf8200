"""Exactly once under fire: sequence numbers, keyed counts, a transactional file sink.

spout (replayable, 0..N-1, offset in State) -fields(key)-> count (par 2, keyed state)
    -shuffle-> sink (SinkBolt over a FileSink, par 2), in 2 containers

* ``test.count`` (N), ``test.keys`` (K, default 7), ``test.rate`` (numbers/s, 0:
  as fast as possible).
* ``test.gate``: the numbers at or above the gate's wait (testkit.Gate).
* The spout emits ``[n, n % K]``; its only state is the next number (plain key
  ``next``), saved in ``pre_save`` and read back in ``init_state``, so a restore
  rewinds it. It never calls ``done()``: the test watches the committed output.
* The count bolt keeps ``count[key]`` in ``state.keyed`` and emits ``[n, key,
  count-so-far]``; with exactly once, key k's committed counts are exactly
  1..|{n : n % K == k}|, each once.
* The sink stages rows under the current checkpoint and commits them when it is
  complete: ``<test.out>/sink/seq-<checkpoint>-<task>.jsonl``; only those files are
  output.
* Every instance writes its pid to ``<test.out>/pids/<component>-<task>`` (so the
  test kills the right process).
* ``test.crash.saves`` = ``"fsync@A,rename@B"``: the spout process dies (``os._exit``)
  inside its checkpoint save, the first time it saves a checkpoint with id >= A at
  the fsync of the state file being written, and once more at the first id >= B
  (after that crash) at the rename that would publish it. Marker files
  ``<test.out>/crashed-<point>`` record each crash (one per point, across restarts).
"""
import os
import time

from bittern import Grouping, Spout, Topology
from bittern.sinks import FileSink, SinkBolt
from testkit import Gate, KeyedCountBolt, write_pid


class SeqSpout(Spout):
    outputs = ["n", "key"]

    def initialize(self, config, context):
        write_pid(config, context)
        self.out = config["test.out"]
        self.count = int(config["test.count"])
        self.keys = int(config.get("test.keys", 7))
        rate = float(config.get("test.rate", 0) or 0)
        self.every = 1.0 / rate if rate > 0 else 0.0
        self.next_at = time.monotonic()
        self.gate = Gate(config, self.count)
        if not hasattr(self, "i"):
            self.i = 0
        self.crashes = []
        for item in str(config.get("test.crash.saves", "") or "").split(","):
            if item.strip():
                point, _, at = item.strip().partition("@")
                self.crashes.append((point, int(at)))

    def init_state(self, state):
        self.state = state
        self.i = state.get("next", 0)
        self.next_at = time.monotonic()

    def pre_save(self, checkpoint_id):
        self.state.put("next", self.i)
        self._arm_crash(checkpoint_id)

    def next_tuple(self):
        limit = self.gate.limit()
        if self.i >= limit:
            self.next_at = time.monotonic()  # (held: no burst to catch up once let go)
            return
        if self.every:
            now = time.monotonic()
            if now < self.next_at:
                return
            due = min(100, int((now - self.next_at) / self.every) + 1)
            self.next_at += due * self.every
        else:
            due = 100
        emit, keys = self.emit, self.keys
        stop = min(limit, self.i + due)
        for n in range(self.i, stop):
            emit([n, n % keys])
        self.i = stop

    # -- fault injection: die inside the checkpoint store's save of this checkpoint
    def _arm_crash(self, checkpoint_id):
        previous_done = True
        for point, at in self.crashes:
            marker = os.path.join(self.out, f"crashed-{point}")
            if os.path.exists(marker):
                continue
            if not previous_done or checkpoint_id < at:
                return
            self._install(point, marker, checkpoint_id)
            return

    def _install(self, point, marker, checkpoint_id):
        name = {"fsync": "fsync", "rename": "replace"}[point]
        real = getattr(os, name)
        task = self.context.task_id if self.context is not None else "?"

        def die(*args):
            if name == "replace" and not os.fspath(args[1]).endswith(f"task-{task}.bin"):
                return real(*args)
            with open(marker, "w") as f:
                f.write(f"{checkpoint_id}\n")
            os._exit(9)
        setattr(os, name, die)


class CountBolt(KeyedCountBolt):
    def initialize(self, config, context):
        write_pid(config, context)


class SeqSink(SinkBolt):
    def initialize(self, config, context):
        write_pid(config, context)
        super().initialize(config, context)

    def make_sink(self, config, context):
        return FileSink(os.path.join(config["test.out"], "sink"), "seq")


class ExactlyOnceSeq(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "EFFECTIVELY_ONCE",
              "topology.stateful.checkpoint.interval.seconds": 0.5}
    spout = SeqSpout.spec(par=1)
    count = CountBolt.spec(par=2, inputs={spout: Grouping.fields("key")})
    sink = SeqSink.spec(par=2, inputs={count: Grouping.SHUFFLE})
