"""Heron's conventions, run unchanged: components named the way Heron's own integration
tests name theirs (``__integration_test_aggregator_bolt``), a stream named ``__results``,
and config values that are Python objects (heronpy pickles them with cloudpickle): a
function, a lambda, a list iterator already advanced once, a generator-backed iterator,
a class instance, a tuple and a set, per component and topology-wide. The aggregator
records what ``initialize`` got and every tuple it receives under ``heron.out``.

Built under ``if __name__ == '__main__':`` as Heron's examples are, so the functions and
classes below are ``__main__``'s there: cloudpickle carries them by value."""
import json
import os
import sys

from heronpy.api.bolt.bolt import Bolt
from heronpy.api.spout.spout import Spout
from heronpy.api.stream import Grouping, Stream
from heronpy.api.topology import TopologyBuilder


def square(n):
    return n * n


def describe(value):
    """What the aggregator writes about a config value: JSON-able and exact."""
    return {"type": type(value).__name__, "repr": repr(value)}


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return type(other).__name__ == "Point" and (other.x, other.y) == (self.x, self.y)

    def __repr__(self):
        return f"Point({self.x}, {self.y})"


class Countdown:
    """An iterator backed by a generator; it pickles its position, not the generator."""

    def __init__(self, start):
        self.start, self.taken, self._gen = start, 0, None

    def __iter__(self):
        return self

    def __next__(self):
        if self._gen is None:
            self._gen = (n for n in range(self.start - self.taken, 0, -1))
        value = next(self._gen)
        self.taken += 1
        return value

    def __getstate__(self):
        return {"start": self.start, "taken": self.taken}

    def __setstate__(self, state):
        self.__dict__.update(state, _gen=None)


class Numbers(Spout):
    outputs = ["n"]

    def initialize(self, config, context):
        self.left = int(config["heron.numbers"])
        self.n = 0

    def next_tuple(self):
        if self.n < self.left:
            self.emit([self.n])
            self.n += 1


class SquareBolt(Bolt):
    outputs = [Stream(fields=["n", "square"], name="__results")]

    def initialize(self, config, context):
        self.fn = config["conventions.square"]

    def process(self, tup):
        self.emit([tup.values[0], self.fn(tup.values[0])], stream="__results")


class AggregatorBolt(Bolt):
    def initialize(self, config, context):
        out = config["heron.out"]
        os.makedirs(out, exist_ok=True)
        self.file = open(os.path.join(out, f"aggregator-{context.get_task_id()}.jsonl"), "a", buffering=1)
        got = {"function": config["conventions.function"](7), "lambda": config["conventions.lambda"](1),
               "iterator": list(config["conventions.iterator"]), "countdown": list(config["conventions.countdown"]),
               "instance_equal": config["conventions.instance"] == Point(3, 4),
               "topology_function": config["conventions.topology.function"](5)}
        got.update({k: describe(config[f"conventions.{k}"]) for k in ("instance", "tuple", "set")})
        self.file.write(json.dumps({"initialize": got, "component": context.get_component_id()}) + "\n")

    def process(self, tup):
        self.file.write(json.dumps({"n": tup.values[0], "square": tup.values[1], "from": tup.component,
                                    "stream": tup.stream}) + "\n")


if __name__ == '__main__':
    builder = TopologyBuilder(name=sys.argv[1])
    numbers = builder.add_spout("__integration_test_spout", Numbers, par=1)
    squares = builder.add_bolt("__integration_test_square_bolt", SquareBolt, par=2,
                               inputs={numbers: Grouping.SHUFFLE}, config={"conventions.square": square})
    offset = 41
    iterator = iter(["skipped", "b", "c"])
    next(iterator)
    countdown = Countdown(4)
    next(countdown)
    builder.add_bolt("__integration_test_aggregator_bolt", AggregatorBolt, par=1,
                     inputs={squares["__results"]: Grouping.SHUFFLE},
                     config={"conventions.function": square, "conventions.lambda": lambda x: x + offset,
                             "conventions.iterator": iterator, "conventions.countdown": countdown,
                             "conventions.instance": Point(3, 4), "conventions.tuple": (1, "two"),
                             "conventions.set": {3}})
    builder.set_config({"conventions.topology.function": lambda x: -x})
    builder.build_and_submit()
