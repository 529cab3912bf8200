"""Windowed word count: words per second of event time, with out-of-order and late
sentences, a late stream, and the results written out.

    bittern run topologies/windowed_word_count.py --until-done
    python topologies/windowed_word_count.py [OUTPUT_DIR]     # compare with the expected counts

    sentences (ReliableSpout, EventTime("ts", lag=1.0)) -shuffle-> split (par 2)
        -fields(word)-> count (CountWindowBolt, tumbling 1 s, allowed lateness 2 s, par 2)
        -global-> results (writes the last result of every (window, word))
        count["late"] -global-> late (writes the tuples too late for any window)

Sentence *i* (``SENTENCES[i % 20]``) is stamped ``EPOCH + i / RATE`` seconds; every 10th
arrives 0.5 s out of order (within the spout's lag, so on time), every 50th 2.5 s late
(its window has fired: it fires again with the late words, within the allowed lateness)
and every 97th 8 s late (too late: it goes to the late stream). The spout is paced at
``wordcount.rate`` sentences per second of wall time, so that event time and the wall
clock go at the same speed, as in a live source. At the end of the input the spout's
watermark goes to +inf and every open window fires.

At least once: a sentence is acked once every window holding its words fired; the
results bolt keeps the last count per (window, word). Running this file with Python
reads what the run wrote and checks it against the counts computed directly.
"""
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter

from bittern import EXHAUSTED, Bolt, CountWindowBolt, EventTime, Grouping, ReliableSpout, Topology, Window

from word_count import SENTENCES

EPOCH = 1_700_000_000.0
RATE = 100.0  # sentences per event second
OUT = os.path.join(tempfile.gettempdir(), "bittern-windowed-wordcount")


def event_time(i):
    t = EPOCH + i / RATE
    if i % 97 == 96:
        return t - 8.0
    if i % 50 == 49:
        return t - 2.5
    if i % 10 == 9:
        return t - 0.5
    return t


class Sentences(ReliableSpout):
    outputs = ["ts", "sentence"]
    event_time = EventTime("ts", lag=1.0)

    def initialize(self, config, context):
        self.n = int(config.get("wordcount.sentences", 3000))
        self.rate = float(config.get("wordcount.rate", 500))
        self.i = 0
        self.t0 = time.monotonic()

    def next_item(self):
        if self.i >= self.n:
            return EXHAUSTED
        if self.rate and self.i > (time.monotonic() - self.t0) * self.rate:
            return None  # paced: event time goes at the wall clock's speed
        i, self.i = self.i, self.i + 1
        return i, [event_time(i), SENTENCES[i % len(SENTENCES)]]


class Split(Bolt):
    outputs = ["ts", "word"]

    def process(self, tup):
        ts = tup["ts"]
        for w in tup["sentence"].split():
            self.emit([ts, w])


class Count(CountWindowBolt):
    """Counts per (word, window): CountWindowBolt is an AggregatingWindowBolt whose
    create/add/merge are 0, acc + 1 and a + b (one accumulator per word and window)."""
    outputs = ["word", "start", "end", "count"]
    window = Window.tumbling(1.0)
    timestamp_field = "ts"
    allowed_lateness = 2.0
    late_stream = "late"


class Results(Bolt):
    """Keeps the last count of every (window, word) and writes them at the end."""

    def initialize(self, config, context):
        self.out = config.get("wordcount.output.dir") or OUT
        self.counts = {}
        self.fires = 0

    def process(self, tup):
        self.counts[(tup["start"], tup["word"])] = tup["count"]
        self.fires += 1

    def close(self):
        os.makedirs(self.out, exist_ok=True)
        with open(os.path.join(self.out, "windows.json"), "w") as f:
            json.dump(sorted([s, w, c] for (s, w), c in self.counts.items()), f)
        print(json.dumps({"windows": len({s for s, _ in self.counts}), "results": len(self.counts),
                          "fires": self.fires}))


class Late(Bolt):
    def initialize(self, config, context):
        self.out = config.get("wordcount.output.dir") or OUT
        self.late = []

    def process(self, tup):
        self.late.append([tup["late_tuple"], tup["reason"]])

    def close(self):
        os.makedirs(self.out, exist_ok=True)
        with open(os.path.join(self.out, "late.json"), "w") as f:
            json.dump(self.late, f)
        print(json.dumps({"too_late_words": len(self.late)}))


class WindowedWordCount(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE", "topology.stmgrs": 2}
    sentences = Sentences.spec()
    split = Split.spec(par=2, inputs=[sentences])
    count = Count.spec(par=2, inputs={split: Grouping.fields("word")})
    results = Results.spec(inputs={count: Grouping.GLOBAL})
    late = Late.spec(inputs={count["late"]: Grouping.GLOBAL})


def expected(n):
    """{(window start, word): count} of every word of the first n sentences."""
    counts = Counter()
    for i in range(n):
        start = float(math.floor(event_time(i)))
        for w in SENTENCES[i % len(SENTENCES)].split():
            counts[(start, w)] += 1
    return counts


if __name__ == "__main__":
    # Whether a sentence 2.5 s or 8 s behind is late depends on the watermark when it
    # arrives (sent every topology.watermark.interval.ms), so the check is the exact
    # account: every word is in the last result of its window, or on the late stream.
    out = sys.argv[1] if len(sys.argv) > 1 else OUT
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    with open(os.path.join(out, "windows.json")) as f:
        got = Counter({(s, w): c for s, w, c in json.load(f)})
    with open(os.path.join(out, "late.json")) as f:
        late = json.load(f)
    for (ts, word), _reason in late:
        got[(float(math.floor(ts)), word)] += 1
    want = expected(n)
    print(f"windows: {len({s for s, _ in got})}, too late words: {len(late)}")
    print("exact: every word counted once, in its window or as too late" if got == want else
          f"NOT exact: {sum(1 for k in set(want) | set(got) if got[k] != want[k])} (window, word) pairs differ")
    sys.exit(0 if got == want else 1)
