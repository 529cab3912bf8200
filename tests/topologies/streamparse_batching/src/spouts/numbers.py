"""A reliable pystorm spout: emits [n, key] for its share of n < numbers.count, each
with the id n, replays what fails, and records what was acked."""
import json
import os

from streamparse import Spout

KEYS = 7


class NumberSpout(Spout):
    outputs = ["n", "key"]

    def initialize(self, conf, context):
        mine = sorted(int(t) for t, c in context["task->component"].items() if c == self.component_name)
        index = mine.index(int(context["taskid"]))
        self.todo = list(range(index, int(conf["numbers.count"]), len(mine)))
        self.todo.reverse()
        self.out = open(os.path.join(conf["numbers.out"], f"acked-{self.task_id}.jsonl"), "a")

    def next_tuple(self):
        if self.todo:
            n = self.todo.pop()
            self.emit([n, n % KEYS], tup_id=n)

    def ack(self, tup_id):
        self.out.write(json.dumps(tup_id) + "\n")
        self.out.flush()

    def fail(self, tup_id):
        self.todo.append(tup_id)
