"""Word count: sentence spout -> split bolt -> count bolt (fields grouping on "word").

    bittern run topologies/word_count.py --duration 20

The spout cycles through the standard benchmark's 20 sentences (sentence i is
SENTENCES[i % 20]), so the expected counts follow from the number of sentences
emitted. On shutdown each count task prints its final counts as JSON, and writes
them to ``wordcount.output.dir`` when that is set.
"""
import json
import os

from bittern import Bolt, Grouping, Spout, Topology

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


class SentenceSpout(Spout):
    outputs = ["sentence"]

    def initialize(self, config, context):
        self.i = 0
        self.limit = int(config.get("wordcount.sentences", 0))  # 0: no limit
        self.task = context.task_id

    def next_tuple(self):
        if self.limit and self.i >= self.limit:
            return
        self.emit([SENTENCES[self.i % len(SENTENCES)]], tup_id=self.i)
        self.i += 1

    def close(self):
        print(json.dumps({"spout_task": self.task, "sentences": self.i}))


class SplitBolt(Bolt):
    outputs = ["word"]

    def process(self, tup):
        emit = self.emit
        for word in tup.values[0].split():
            emit([word])


class CountBolt(Bolt):
    outputs = ["word", "count"]

    def initialize(self, config, context):
        self.counts = {}
        self.task = context.task_id
        self.out_dir = config.get("wordcount.output.dir")

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1

    def close(self):
        print(json.dumps({"count_task": self.task, "counts": self.counts}, sort_keys=True))
        if self.out_dir:
            os.makedirs(self.out_dir, exist_ok=True)
            tmp = os.path.join(self.out_dir, f".counts-{self.task}.json")
            with open(tmp, "w") as f:
                json.dump(self.counts, f)
            os.replace(tmp, os.path.join(self.out_dir, f"counts-{self.task}.json"))


class WordCount(Topology):
    config = {"topology.stmgrs": 2}
    sentence = SentenceSpout.spec(par=1)
    split = SplitBolt.spec(par=2, inputs=[sentence])
    count = CountBolt.spec(par=2, inputs={split: Grouping.fields("word")})
