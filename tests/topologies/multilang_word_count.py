"""Storm's word count with its split-sentence bolt as a multilang component
(multilang/splitsentence.py, a storm.py BasicBolt), run to completion."""
import json
import os
import sys
from collections import Counter

from bittern import EXHAUSTED, Bolt, Grouping, ReliableSpout, ShellBolt, Topology

WORDS = ["the", "cow", "jumped", "over", "moon", "an", "apple", "a", "day", "keeps", "doctor", "away"]


def sentence(i):
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(1 + i % 5))


def expected_counts(n):
    return dict(Counter(w for i in range(n) for w in sentence(i).split(" ")))


class Sentences(ReliableSpout):
    outputs = ["sentence"]

    def initialize(self, config, context):
        self.i, self.count = 0, int(config["wordcount.sentences"])

    def next_item(self):
        if self.i >= self.count:
            return EXHAUSTED
        self.i += 1
        return self.i - 1, [sentence(self.i - 1)]


class Count(Bolt):
    outputs = []

    def initialize(self, config, context):
        self.counts = Counter()
        self.path = os.path.join(config["wordcount.out"], f"counts-{context.task_id}.json")

    def process(self, tup):
        self.counts[tup.values[0]] += 1

    def close(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "w") as f:
            json.dump(self.counts, f)


class MultilangWordCount(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE"}
    sentences = Sentences.spec()
    split = ShellBolt.spec(command=[sys.executable], script="multilang/splitsentence.py", outputs=["word"],
                           inputs=[sentences], par=2)
    count = Count.spec(par=2, inputs={split: Grouping.fields("word")})
