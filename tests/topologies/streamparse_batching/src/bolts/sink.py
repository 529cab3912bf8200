"""Writes every tuple it gets as a JSON line [source, stream, task, values]."""
import json
import os

from streamparse import Bolt


class Sink(Bolt):
    outputs = []

    def initialize(self, conf, context):
        self.out = open(os.path.join(conf["numbers.out"], f"sink-{self.task_id}.jsonl"), "a")

    def process(self, tup):
        self.out.write(json.dumps([tup.component, tup.stream, self.task_id, list(tup.values)]) + "\n")
        self.out.flush()
