"""A keyed count over many distinct keys, for the ``disk-10m`` rows of ``scripts/bench.py``.

    keys (spout) -> count (bolt, fields grouping on "key")

Run exactly once (``topology.reliability.mode=EFFECTIVELY_ONCE``, given by the bench
on the command line with the state backend: ``bittern.state.backend=disk``), bounded:

* the spout emits the integers ``0 .. N-1`` once each (``[key]``, up to 100 per
  ``next_tuple``), keeps its position in checkpointed state (a restore rewinds it),
  then calls ``done()``; ``bittern run --until-done`` stops once the checkpoint after
  its last emit is complete;
* the count bolt keeps ``count[key]`` in ``state.keyed`` only, a ``get`` and a
  ``put`` per tuple (what a bolt whose state does not fit in memory must do), and
  counts in its plain state the tuples it saw and the keys it inserted (a ``get``
  that found nothing), so both survive a restore. At ``close()`` it reads back a
  sample of 1,000 evenly spaced keys, which must each have count 1.

Read from the component config (``--config k=v``): ``bench.keys`` (N, default
1,000,000). At ``close()`` the spout and the count task each print one line
``BENCH {json}`` (``bench``: ``keyspout`` / ``keycount``; ``t_first``: the first
emit, ``t_last``: the last tuple counted, wall-clock seconds).
"""
import json
import time

from bittern import Bolt, Grouping, Spout, TopologyBuilder

SAMPLE = 1000  # keys read back at close


def report(kind, **fields):
    print("BENCH " + json.dumps(dict(fields, bench=kind)), flush=True)


class KeySpout(Spout):
    outputs = ["key"]

    def initialize(self, config, context):
        self.n = int(config.get("bench.keys", 1_000_000))
        self.task = context.task_id
        self.t_first = None
        if not hasattr(self, "i"):  # (init_state may come first)
            self.i = 0

    def init_state(self, state):
        self.state = state
        self.i = state.get("i", 0)

    def pre_save(self, checkpoint_id):
        self.state.put("i", self.i)

    def next_tuple(self):
        i, n = self.i, self.n
        if i >= n:
            self.done()
            return
        if self.t_first is None:
            self.t_first = time.time()
        emit = self.emit
        stop = min(n, i + 100)
        for k in range(i, stop):
            emit([k])
        self.i = stop

    def close(self):
        report("keyspout", task=self.task, emitted=self.i, t_first=self.t_first)


class KeyCount(Bolt):
    def initialize(self, config, context):
        self.n = int(config.get("bench.keys", 1_000_000))
        self.task = context.task_id
        self.t_last = None
        if not hasattr(self, "keyed"):  # (init_state may come first)
            self.keyed = self.state = None
            self.tuples = self.inserted = 0

    def init_state(self, state):
        self.state, self.keyed = state, state.keyed
        self.tuples = state.get("tuples", 0)
        self.inserted = state.get("inserted", 0)

    def pre_save(self, checkpoint_id):
        self.state.put("tuples", self.tuples)
        self.state.put("inserted", self.inserted)

    def process(self, tup):
        key = tup.values[0]
        keyed = self.keyed
        c = keyed.get(key)
        if c is None:
            c = 0
            self.inserted += 1
        keyed.put(key, c + 1)
        self.tuples += 1
        self.t_last = time.time()

    def close(self):
        checked = bad = 0
        if self.keyed is not None and self.n > 0:
            get = self.keyed.get
            for k in range(0, self.n, max(1, self.n // SAMPLE)):
                checked += 1
                if get(k) != 1:
                    bad += 1
        report("keycount", task=self.task, tuples=self.tuples, inserted=self.inserted, sample_checked=checked,
               sample_bad=bad, t_last=self.t_last)


builder = TopologyBuilder("bench_keyed_count")
keys = builder.add_spout("keys", KeySpout, par=1)
builder.add_bolt("count", KeyCount, par=1, inputs={keys: Grouping.fields("key")})
