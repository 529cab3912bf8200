"""Counts words (storm.py BasicBolt), writes one line per word it counts to
<wordcount.out>/count-<task>.txt and emits [word, count]."""
import collections
import os

import words

words.use_storm()
import storm  # noqa: E402


class CountBolt(storm.BasicBolt):
    def initialize(self, conf, context):
        self.counts = collections.Counter()
        os.makedirs(conf["wordcount.out"], exist_ok=True)
        self.out = open(os.path.join(conf["wordcount.out"], f"count-{context['taskid']}.txt"), "a", buffering=1)
        self.out.write(f"# {conf.get('wordcount.label')}\n")

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] += 1
        self.out.write(word + "\n")
        storm.emit([word, self.counts[word]])


CountBolt().run()
