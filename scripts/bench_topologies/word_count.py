"""The standard word-count workload as a Bittern topology, for ``scripts/bench.py``.

    sentence (spout) -> split (bolt, shuffle) -> count (bolt, fields grouping on "word")

Sentence *i* is ``SENTENCES[i % 20]``, the list of the shared benchmark's
``wc_common.py`` (copied, not imported: a topology must not depend on
``../shared``; ``scripts/bench.py`` checks that the two lists are identical).

Read at import, from the environment (every instance re-imports this file, and
the supervisor inherits the environment of ``bittern run``, so all processes see
the same values):

* ``BENCH_PAR``  = "spout,split,count" parallelism, default "1,1,1"
* ``BENCH_MODE`` = ``throughput`` (emit N sentences as fast as possible),
  ``latency`` (emit N sentences at ``bench.rate`` sentences/s, each stamped with its
  emit time; the count bolt records the end-to-end latency of sampled words) or
  ``idle`` (the spout emits nothing).
* ``BENCH_SPLIT`` = ``native`` (default), or ``json`` / ``msgpack``: the split bolt is
  a multilang component, ``pystorm_split.py`` beside this file, run by
  ``BENCH_PYSTORM_PYTHON`` (a python with pystorm) with that serializer.
* ``BENCH_STATEFUL`` = ``1`` for the exactly-once rows: the spout keeps its position
  and the count bolt its counts (keyed) in checkpointed state (``init_state`` /
  ``pre_save``); otherwise the components have no state API at all, as before.
* ``BENCH_KEYED_DIRECT`` = ``1`` (with ``BENCH_STATEFUL=1``, throughput mode; the
  ``disk-wc`` rows): the count bolt keeps its counts in ``state.keyed`` only, a ``get``
  and a ``put`` per word, as a bolt whose state may not fit in memory must (the
  default stateful count bolt keeps a dict of every count and puts only the changed
  ones at ``pre_save``, which would defeat a disk backend); so the rows compare the
  state backends (``bittern.state.backend``) on the per-word path.
* ``BENCH_SINK_DIR`` (with ``BENCH_STATEFUL=1``): the counts also go out through a
  transactional ``FileSink`` in that directory. At every checkpoint (``pre_save``) the
  count bolt emits ``[word, count]`` for each word whose count changed since the last
  one, before the barrier, and a fourth component, ``sink`` (a ``SinkBolt``, fields
  grouping on "word", the count's parallelism), stages them under that checkpoint and
  commits them when it is complete: ``counts-<checkpoint>-<task>.jsonl``, one
  ``["word", count]`` per line, the running total. A word's final count is its
  largest committed count; ``scripts/benchkit/runner.py`` checks those against the
  expected counts after the run.

Read from the component config (``--config k=v``):

* ``bench.sentences`` (N, default 100000), ``bench.rate`` (latency mode, sentences/s),
  ``bench.lat.samples`` (latency samples kept per count task, default 20000).

Every spout emits exactly N sentences with ``tup_id`` set (so at-least-once
tracks them), then calls ``done()``; ``bittern run --until-done`` then stops (under
exactly once: once the checkpoint after the last emit is committed at every sink).
At ``close()`` each spout, count and sink task prints one line ``BENCH {json}``.
"""
import json
import os
import time

from bittern import Bolt, Grouping, ShellBolt, Spout, TopologyBuilder
from bittern.sinks import FileSink, SinkBolt

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "an apple a day keeps the doctor away",
    "all that glitters is not gold",
    "a journey of a thousand miles begins with a single step",
    "actions speak louder than words",
    "the early bird catches the worm every single morning",
    "it is better late than never",
    "practice makes perfect but nobody is perfect",
    "when in rome do as the romans do",
    "you can not judge a book by its cover",
    "the pen is mightier than the sword",
    "fortune favors the bold and the brave",
    "where there is smoke there is fire",
    "birds of a feather flock together",
    "every cloud has a silver lining",
    "knowledge is power and power corrupts",
    "time and tide wait for no man",
    "do not count your chickens before they hatch",
    "the stream processor counts every word it sees",
    "keep calm and carry on with the work",
]

MODE = os.environ.get("BENCH_MODE", "throughput")
if MODE not in ("throughput", "latency", "idle"):
    raise ValueError(f"BENCH_MODE must be throughput, latency or idle, not {MODE!r}")
PAR = [int(x) for x in os.environ.get("BENCH_PAR", "1,1,1").split(",")]
if len(PAR) != 3:
    raise ValueError(f"BENCH_PAR must be 'spout,split,count', not {os.environ.get('BENCH_PAR')!r}")


def report(kind, **fields):
    print("BENCH " + json.dumps(dict(fields, bench=kind)), flush=True)


# --- spouts ------------------------------------------------------------------------------

class _BaseSpout(Spout):
    def initialize(self, config, context):
        self.n = int(config.get("bench.sentences", 100000))
        self.task = context.task_id
        self.i = 0
        self.t_first = None
        self.acked = 0
        self.failed = 0
        self.t_last_ack = None

    def ack(self, tup_id):
        self.acked += 1
        self.t_last_ack = time.time()

    def fail(self, tup_id):
        self.failed += 1

    def close(self):
        report("spout", task=self.task, sentences=self.i, t_first=self.t_first,
               acked=self.acked, failed=self.failed, t_last_ack=self.t_last_ack)


class SentenceSpout(_BaseSpout):
    """Throughput: N sentences as fast as the engine takes them, one per next_tuple."""
    outputs = ["sentence"]

    def next_tuple(self):
        i = self.i
        if i >= self.n:
            self.done()
            return
        if i == 0:
            self.t_first = time.time()
        self.emit([SENTENCES[i % 20]], tup_id=i)
        self.i = i + 1


class PacedSentenceSpout(_BaseSpout):
    """Latency: N sentences at a fixed rate, each carrying its emit time."""
    outputs = ["sentence", "ts"]

    def initialize(self, config, context):
        super().initialize(config, context)
        self.rate = float(config.get("bench.rate", 1000))
        self.t0 = None

    def next_tuple(self):
        i = self.i
        if i >= self.n:
            self.done()
            return
        now = time.time()
        if self.t0 is None:
            self.t0 = self.t_first = now
        elif i >= (now - self.t0) * self.rate:
            return  # not due yet
        self.emit([SENTENCES[i % 20], now], tup_id=i)
        self.i = i + 1


class IdleSpout(_BaseSpout):
    """Idle: a topology that is running but has nothing to do."""
    outputs = ["sentence"]

    def next_tuple(self):
        pass


# --- bolts -------------------------------------------------------------------------------

class SplitBolt(Bolt):
    outputs = ["word"]

    def process(self, tup):
        emit = self.emit
        for word in tup.values[0].split():
            emit([word])


class StampedSplitBolt(Bolt):
    outputs = ["word", "ts"]

    def process(self, tup):
        emit = self.emit
        sentence, ts = tup.values
        for word in sentence.split():
            emit([word, ts])


class CountBolt(Bolt):
    outputs = ["word", "count"]

    def initialize(self, config, context):
        self.counts = {}
        self.task = context.task_id
        self.words = 0
        self.t_first = None
        self.t_last = None

    def process(self, tup):
        word = tup.values[0]
        counts = self.counts
        counts[word] = counts.get(word, 0) + 1
        self.t_last = time.time()

    def close(self):
        report("count", task=self.task, words=sum(self.counts.values()), t_last=self.t_last,
               counts=self.counts)


class LatencyCountBolt(CountBolt):
    def initialize(self, config, context):
        super().initialize(config, context)
        n = int(config.get("bench.sentences", 100000)) * PAR[0]
        keep = int(config.get("bench.lat.samples", 20000))
        words = n * 74 // 10  # ~7.4 words per sentence
        self.every = max(1, words // max(1, keep))
        self.k = 0
        self.lat = []

    def process(self, tup):
        word, ts = tup.values
        counts = self.counts
        counts[word] = counts.get(word, 0) + 1
        now = self.t_last = time.time()
        self.k += 1
        if self.k >= self.every:
            self.k = 0
            self.lat.append(now - ts)

    def close(self):
        report("count", task=self.task, words=sum(self.counts.values()), t_last=self.t_last,
               counts=self.counts, lat_ms=[round(x * 1000, 3) for x in self.lat])


# --- exactly once (BENCH_STATEFUL=1) -------------------------------------------------------

class StatefulSpout:
    """The spout's position (sentences emitted) in its checkpointed state, so a restore
    rewinds it; the other rows use the plain spouts, untouched."""

    def initialize(self, config, context):
        super().initialize(config, context)
        state = getattr(self, "bench_state", None)
        if state is not None:  # init_state came first
            self.i = state.get("i", 0)

    def init_state(self, state):
        self.bench_state = state
        self.i = state.get("i", 0)

    def pre_save(self, checkpoint_id):
        self.bench_state.put("i", self.i)


class StatefulCount:
    """Counts in keyed state. The hot path stays a dict update; ``pre_save`` moves the
    counts that changed since the last checkpoint into ``state.keyed`` (a put checks and
    hashes its key: too dear per word) and, with a sink (``BENCH_SINK_DIR``), emits them
    as ``[word, count]`` before the barrier; ``init_state`` reads them back."""

    def initialize(self, config, context):
        restored = getattr(self, "counts", None)
        super().initialize(config, context)
        if restored is not None:  # init_state came first
            self.counts = restored

    def init_state(self, state):
        self.keyed = state.keyed
        self.counts = dict(state.keyed.items())
        self.saved = dict(self.counts)  # what the last complete checkpoint holds

    def pre_save(self, checkpoint_id):
        put, saved = self.keyed.put, self.saved
        emit = self.emit if SINK_DIR else None
        for word, n in self.counts.items():
            if saved.get(word) != n:
                put(word, n)
                saved[word] = n
                if emit is not None:
                    emit([word, n])


class KeyedDirectCount:
    """``BENCH_KEYED_DIRECT=1``: the counts in ``state.keyed`` only, a get and a put per
    word (``init_state`` comes before any tuple); with a sink, the words changed since
    the last checkpoint are noted and ``pre_save`` emits their counts, as
    :class:`StatefulCount` does. ``close`` reports the counts read back from the state."""

    def init_state(self, state):
        self.keyed = state.keyed
        self.changed = set()

    def process(self, tup):
        word = tup.values[0]
        keyed = self.keyed
        keyed.put(word, keyed.get(word, 0) + 1)
        if SINK_DIR:
            self.changed.add(word)
        self.t_last = time.time()

    def pre_save(self, checkpoint_id):
        if SINK_DIR:
            get, emit = self.keyed.get, self.emit
            for word in self.changed:
                emit([word, get(word)])
            self.changed.clear()

    def close(self):
        keyed = getattr(self, "keyed", None)
        counts = dict(keyed.items()) if keyed is not None else {}
        report("count", task=self.task, words=sum(counts.values()), t_last=self.t_last, counts=counts)


class StatefulSentenceSpout(StatefulSpout, SentenceSpout):
    pass


class StatefulPacedSentenceSpout(StatefulSpout, PacedSentenceSpout):
    pass


class StatefulCountBolt(StatefulCount, CountBolt):
    pass


class StatefulLatencyCountBolt(StatefulCount, LatencyCountBolt):
    pass


class KeyedDirectCountBolt(KeyedDirectCount, CountBolt):
    pass


class TimedFileSink(FileSink):
    """A FileSink that notes when it last made a checkpoint's output visible."""

    t_commit = None

    def _commit(self, n):
        super()._commit(n)
        self.t_commit = time.time()


class CountsSink(SinkBolt):
    """The exactly-once rows' output: ``[word, count]`` through a transactional FileSink."""

    def make_sink(self, config, context):
        self.task = context.task_id
        self.rows = 0
        return TimedFileSink(SINK_DIR, "counts")

    def process(self, tup):
        self.rows += 1
        super().process(tup)

    def close(self):
        if self.sink is not None:
            report("sink", task=self.task, rows=self.rows, committed=len(self.sink.committed),
                   t_commit=self.sink.t_commit)
        super().close()


STATEFUL = os.environ.get("BENCH_STATEFUL", "0") == "1"
SINK_DIR = os.environ.get("BENCH_SINK_DIR") if STATEFUL else None
KEYED_DIRECT = os.environ.get("BENCH_KEYED_DIRECT", "0") == "1"
if KEYED_DIRECT and (not STATEFUL or MODE != "throughput"):
    raise ValueError(f"BENCH_KEYED_DIRECT=1 needs BENCH_STATEFUL=1 and BENCH_MODE=throughput, not "
                     f"BENCH_STATEFUL={os.environ.get('BENCH_STATEFUL', '0')!r} and BENCH_MODE={MODE!r}")
if STATEFUL:
    SPOUT = {"throughput": StatefulSentenceSpout, "latency": StatefulPacedSentenceSpout, "idle": IdleSpout}[MODE]
    COUNT = StatefulLatencyCountBolt if MODE == "latency" else StatefulCountBolt
    if KEYED_DIRECT:
        COUNT = KeyedDirectCountBolt
else:
    SPOUT = {"throughput": SentenceSpout, "latency": PacedSentenceSpout, "idle": IdleSpout}[MODE]
    COUNT = LatencyCountBolt if MODE == "latency" else CountBolt
SPLIT = StampedSplitBolt if MODE == "latency" else SplitBolt
SPLIT_KIND = os.environ.get("BENCH_SPLIT", "native")
if SPLIT_KIND in ("json", "msgpack"):
    SPLIT = ShellBolt.spec(command=[os.environ["BENCH_PYSTORM_PYTHON"]], script="pystorm_split.py",
                           outputs=["word", "ts"] if MODE == "latency" else ["word"], serializer=SPLIT_KIND)
elif SPLIT_KIND != "native":
    raise ValueError(f"BENCH_SPLIT must be native, json or msgpack, not {SPLIT_KIND!r}")

builder = TopologyBuilder("bench_wc")
sentence = builder.add_spout("sentence", SPOUT, par=PAR[0])
split = builder.add_bolt("split", SPLIT, par=PAR[1], inputs=[sentence])
count = builder.add_bolt("count", COUNT, par=PAR[2], inputs={split: Grouping.fields("word")})
if SINK_DIR:
    builder.add_bolt("sink", CountsSink, par=PAR[2], inputs={count: Grouping.fields("word")})
