"""The windowed word-count workload as a Bittern topology, for ``scripts/bench.py``.

    sentence (spout, EventTime("ts", lag=0.5)) -> split (bolt, shuffle) -> [ts, word]
        -> count (CountWindowBolt, fields grouping on "word", timestamp_field "ts")

Sentence *i* is ``SENTENCES[i % 20]`` (imported from ``word_count.py``, the shared
benchmark's ``wc_common.py`` list, which ``scripts/bench.py`` checks) with
event time ``event_time(i)``: ``EPOCH + i / EVENTS_PER_SEC`` seconds, every 7th sentence
(``i % 7 == 3``) 0.25 s out of order — a copy of ``wc_common.event_time`` (a topology must not depend on ``../shared``;
``scripts/bench.py`` checks the results against ``wc_common.expected_window_counts``,
so a copy that drifted would fail the run). The spout's lag (0.5 s) covers the
disorder: no tuple is late and the per-(window, word) counts are exact.

Read at import, from the environment:

* ``BENCH_PAR``  = "spout,split,count" parallelism, default "1,1,1"
* ``BENCH_MODE`` = ``throughput`` (N sentences as fast as possible) or ``latency``
  (N sentences at ``bench.rate`` sentences/s)
* ``BENCH_WINDOW`` = ``tumbling`` (1 s, default) or ``sliding`` (10 s every 1 s)
* ``BENCH_KEYS`` = 0 (default): the word count above. K > 0: *key mode*, the row of
  many keys: "sentence" *i* is the single word ``k<i % K>`` (K distinct keys, same
  event times), and the count bolt keeps a digest of its results instead of the
  results themselves (so that its RSS is the windows', not a results table's):
  ``fires`` (windows fired), ``words`` (the sum of the counts) and ``checksum``
  (sum of count x ``weight(key index, window start)``); ``scripts/bench.py`` computes
  the same three from the workload.

Read from the component config: ``bench.sentences`` (N, default 100000),
``bench.rate`` (latency mode, sentences/s).

Watermark latency (how long after a window's input ended its result came out): the
times compared are wall-clock times (``time.time()``) of processes on one machine.

* The spout knows, from the deterministic event times, which sentence is the *last*
  of each window in emission order (the largest *i* whose event time falls in it:
  for window [s, s+1) an out-of-order sentence stamped ~s+0.999, emitted when the
  input is already at ~s+1.25), and which sentence is the first to push its
  watermark (largest timestamp emitted - lag) to the window's end or past. Right
  after emitting either it records the wall time, per window start (``last_at``,
  ``wm_at``; a window whose end the watermark only passes at the end of the input
  gets the time of ``done()``, which sends +inf). One integer compare per sentence
  (the marks are computed in ``initialize``, before the first sentence).
* The count bolt records, per window start, the wall time of the first and the last
  ``emit_window`` of that window (one per word), and at the first one how many
  windows (key x window) the task holds open (``open_windows``: the operator's
  count, read through the bolt's timer handle; about the peak, as windows of that
  start are only then leaving).
* The harness correlates them: *window latency* = last result of the window emitted
  - its last tuple emitted by the spout (what a user waits for: it includes the
  input's run from ~s+1.25 to s+1.5, where the watermark (max ts - 0.5) reaches the
  end, the watermark interval and the trip through the topology); *watermark delay* = last result emitted - the spout's
  watermark passing the window's end (the engine's part: the watermark interval, the
  flush and the transport).

At ``close()`` each spout and count task prints one line ``BENCH {json}``.
"""
import json
import math
import os
import time

from bittern import CountWindowBolt, EventTime, Grouping, Spout, Bolt, TopologyBuilder, Window

from word_count import SENTENCES  # (this directory's: one list, which scripts/bench.py checks against wc_common)

EVENTS_PER_SEC = 10000
EPOCH = 1_700_000_000.0
LAG = 0.5


def event_time(i):
    """Event time (epoch seconds, float) of sentence i (wc_common.event_time)."""
    t = EPOCH + i / EVENTS_PER_SEC
    return t - 0.25 if i % 7 == 3 else t


def weight(kidx, start):
    """The key mode's checksum weight of (key index, window start)."""
    return ((kidx * 2654435761) ^ (int(start) * 40503)) % 1000003 + 1


MODE = os.environ.get("BENCH_MODE", "throughput")
if MODE not in ("throughput", "latency"):
    raise ValueError(f"BENCH_MODE must be throughput or latency, not {MODE!r}")
PAR = [int(x) for x in os.environ.get("BENCH_PAR", "1,1,1").split(",")]
if len(PAR) != 3:
    raise ValueError(f"BENCH_PAR must be 'spout,split,count', not {os.environ.get('BENCH_PAR')!r}")
WINDOW = os.environ.get("BENCH_WINDOW", "tumbling")
if WINDOW not in ("tumbling", "sliding"):
    raise ValueError(f"BENCH_WINDOW must be tumbling or sliding, not {WINDOW!r}")
KEYS = int(os.environ.get("BENCH_KEYS", "0"))
if PAR[0] != 1:
    raise ValueError("the windowed bench topology has one spout task (its event times are one sequence)")


def report(kind, **fields):
    print("BENCH " + json.dumps(dict(fields, bench=kind)), flush=True)


def marks(n, size, slide):
    """``(last, wm)``: ``[(i, window start)]`` of the sentence that is the last of each
    window in emission order, and of the one whose emit first moves the spout's
    watermark (largest timestamp emitted - lag) to the window's end or past (windows
    of length ``size`` every ``slide``, assigned as the window operator does)."""
    last = {}
    for i in range(n):
        ts = event_time(i)
        k = math.floor(ts / slide)
        while True:
            start = k * slide
            if start + size <= ts:
                break
            last[start] = i
            k -= 1
    ends = sorted((s + size, s) for s in last)
    wm, j, top = [], 0, -math.inf
    for i in range(n):
        ts = event_time(i)
        if ts > top:
            top = ts
            w = top - LAG
            while j < len(ends) and ends[j][0] <= w:
                wm.append((i, ends[j][1]))
                j += 1
    return sorted((i, s) for s, i in last.items()), wm


# --- spouts ------------------------------------------------------------------------------

class TimedSentenceSpout(Spout):
    """Throughput: N sentences with their event times, as fast as the engine takes them."""
    outputs = ["ts", "sentence"]
    event_time = EventTime("ts", lag=LAG)

    def initialize(self, config, context):
        self.n = int(config.get("bench.sentences", 100000))
        self.task = context.task_id
        self.i = 0
        self.t_first = None
        self.t_done = None
        self.sentences = [f"k{j}" for j in range(KEYS)] if KEYS else SENTENCES
        self.ns = len(self.sentences)
        size, slide = (10.0, 1.0) if WINDOW == "sliding" else (1.0, 1.0)
        last, wm = marks(self.n, size, slide)
        # one list of (i, what, window start), in i order; next_tuple compares i with the next one
        self.marks = sorted([(i, 0, s) for i, s in last] + [(i, 1, s) for i, s in wm])
        self.mark_i = self.marks[0][0] if self.marks else -1
        self.mark_k = 0
        self.last_at, self.wm_at = {}, {}

    def stamp(self, i, now):
        ms, k = self.marks, self.mark_k
        while k < len(ms) and ms[k][0] == i:
            (self.wm_at if ms[k][1] else self.last_at)[ms[k][2]] = now
            k += 1
        self.mark_k = k
        self.mark_i = ms[k][0] if k < len(ms) else -1

    def finish(self):
        if self.t_done is None:
            self.t_done = time.time()
        self.done()

    def next_tuple(self):
        i = self.i
        if i >= self.n:
            self.finish()
            return
        if i == 0:
            self.t_first = time.time()
        t = EPOCH + i / EVENTS_PER_SEC
        self.emit([t - 0.25 if i % 7 == 3 else t, self.sentences[i % self.ns]], tup_id=i)
        if i == self.mark_i:
            self.stamp(i, time.time())
        self.i = i + 1

    def close(self):
        # windows the watermark passes only at the end of the input: +inf at done()
        last = {s: t for s, t in self.last_at.items()}
        wm = dict(self.wm_at)
        for s in last:
            if s not in wm and self.t_done is not None:
                wm[s] = self.t_done
        report("spout", task=self.task, sentences=self.i, t_first=self.t_first, t_done=self.t_done,
               last_at=sorted(last.items()), wm_at=sorted(wm.items()))


class PacedTimedSentenceSpout(TimedSentenceSpout):
    """Latency: the same sentences at ``bench.rate`` per second."""

    def initialize(self, config, context):
        super().initialize(config, context)
        self.rate = float(config.get("bench.rate", 1000))
        self.t0 = None

    def next_tuple(self):
        i = self.i
        if i >= self.n:
            self.finish()
            return
        now = time.time()
        if self.t0 is None:
            self.t0 = self.t_first = now
        elif i >= (now - self.t0) * self.rate:
            return  # not due yet
        t = EPOCH + i / EVENTS_PER_SEC
        self.emit([t - 0.25 if i % 7 == 3 else t, self.sentences[i % self.ns]], tup_id=i)
        if i == self.mark_i:
            self.stamp(i, time.time())
        self.i = i + 1


# --- bolts -------------------------------------------------------------------------------

class TimedSplitBolt(Bolt):
    outputs = ["ts", "word"]

    def process(self, tup):
        emit = self.emit
        ts, sentence = tup.values
        for word in sentence.split():
            emit([ts, word])


class _WindowCount(CountWindowBolt):
    """Counts per (window, word); records when each window's results came out."""
    outputs = ["word", "start", "end", "count"]
    timestamp_field = "ts"

    def initialize(self, config, context):
        self.task = context.task_id
        self.results = {}
        self.n_fires = 0
        self.fired = {}  # window start -> [first emit, last emit] (wall clock)
        self.open_peak = 0
        self.t_last = None

    def first_of(self, start, now):
        """The first result of window ``start``: note the time and the windows open."""
        self.fired[start] = [now, now]
        windows = getattr(getattr(self.timers, "_clock", None), "windows", None)  # (engine internals)
        if windows is not None:
            self.open_peak = max(self.open_peak, windows.op.open_windows())

    def noted(self, window):
        """Note the wall time of this result of ``window`` (its first and last); its start."""
        now = self.t_last = time.time()
        start = window.start
        f = self.fired.get(start)
        if f is None:
            self.first_of(start, now)
        else:
            f[1] = now
        return start

    def emit_window(self, key, window, result):
        start = self.noted(window)
        self.n_fires += 1
        self.results[(start, key)] = result
        self.emit([key, start, window.end, result])

    def close(self):
        report("count", task=self.task, t_last=self.t_last, words=sum(self.results.values()),
               fires=self.n_fires, open_peak=self.open_peak,
               results=[[s, w, c] for (s, w), c in self.results.items()],
               fired=sorted((s, f) for s, f in self.fired.items()))


class _KeyWindowCount(_WindowCount):
    """Key mode: a digest of the results, not the results (see the module's docstring)."""

    def initialize(self, config, context):
        super().initialize(config, context)
        self.n_results = self.total = self.checksum = 0

    def emit_window(self, key, window, result):
        start = self.noted(window)
        self.n_results += 1
        self.total += result
        self.checksum += result * weight(int(key[1:]), start)
        self.emit([key, start, window.end, result])

    def close(self):
        report("count", task=self.task, t_last=self.t_last, words=self.total, fires=self.n_results,
               checksum=self.checksum, open_peak=self.open_peak,
               fired=sorted((s, f) for s, f in self.fired.items()))


class TumblingCount(_WindowCount):
    window = Window.tumbling(1.0)


class SlidingCount(_WindowCount):
    window = Window.sliding(10.0, 1.0)


class TumblingKeyCount(_KeyWindowCount):
    window = Window.tumbling(1.0)


class SlidingKeyCount(_KeyWindowCount):
    window = Window.sliding(10.0, 1.0)


SPOUT = PacedTimedSentenceSpout if MODE == "latency" else TimedSentenceSpout
if KEYS:
    COUNT = SlidingKeyCount if WINDOW == "sliding" else TumblingKeyCount
else:
    COUNT = SlidingCount if WINDOW == "sliding" else TumblingCount

builder = TopologyBuilder("bench_wwc")
sentence = builder.add_spout("sentence", SPOUT, par=PAR[0])
split = builder.add_bolt("split", TimedSplitBolt, par=PAR[1], inputs=[sentence])
builder.add_bolt("count", COUNT, par=PAR[2], inputs={split: Grouping.fields("word")})
