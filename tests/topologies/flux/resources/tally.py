"""The last bolt: gets every [word, count] on one task (GLOBAL grouping) and writes it
to <wordcount.out>/tally-<task>.txt."""
import os

import words

words.use_storm()
import storm  # noqa: E402


class TallyBolt(storm.BasicBolt):
    def initialize(self, conf, context):
        os.makedirs(conf["wordcount.out"], exist_ok=True)
        self.out = open(os.path.join(conf["wordcount.out"], f"tally-{context['taskid']}.txt"), "a", buffering=1)

    def process(self, tup):
        self.out.write(f"{tup.values[0]} {tup.values[1]}\n")


TallyBolt().run()
