"""A multilang spout (storm.py): emits wordcount.sentences sentences, each with its
number as the tuple id, replays what fails, and records every acked id."""
import os

import words

words.use_storm()
import storm  # noqa: E402


class SentenceSpout(storm.Spout):
    def initialize(self, conf, context):
        self.count = int(conf["wordcount.sentences"])
        self.next_id, self.replay = 0, []
        os.makedirs(conf["wordcount.out"], exist_ok=True)
        self.acked = open(os.path.join(conf["wordcount.out"], f"acked-{context['taskid']}.txt"), "a",
                          buffering=1)

    def next_tuple(self):
        if self.replay:
            i = self.replay.pop(0)
        elif self.next_id < self.count:
            i, self.next_id = self.next_id, self.next_id + 1
        else:
            return
        storm.emit_spout([words.sentence(i)], id=i)

    def ack(self, id):
        self.acked.write(f"{id}\n")

    def fail(self, id):
        self.replay.append(id)


SentenceSpout().run()
