"""Config values JSON cannot hold in a Bittern topology (component and topology config):
a function, a list iterator advanced once, a generator-backed iterator, a class
instance, a tuple and a set. Without cloudpickle the standard pickle carries them (the
functions and classes are this file's, which every instance imports); the recorder
writes what ``initialize`` got, and every tuple, under ``pickled.out``."""
import json
import os

from bittern import Bolt, Spout, Topology


def triple(n):
    return 3 * n


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (other.x, other.y) == (self.x, self.y)


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
        self.n, self.count = 0, int(config["pickled.numbers"])

    def next_tuple(self):
        if self.n < self.count:
            self.emit([self.n])
            self.n += 1


class Apply(Bolt):
    outputs = ["n", "result"]

    def initialize(self, config, context):
        self.fn = config["pickled.fn"]

    def process(self, tup):
        self.emit([tup.values[0], self.fn(tup.values[0])])


class Recorder(Bolt):
    def initialize(self, config, context):
        os.makedirs(config["pickled.out"], exist_ok=True)
        self.file = open(os.path.join(config["pickled.out"], f"record-{context.task_id}.jsonl"), "a", buffering=1)
        self.file.write(json.dumps({"initialize": {
            "iterator": list(config["pickled.iterator"]), "countdown": list(config["pickled.countdown"]),
            "instance": config["pickled.instance"] == Point(3, 4), "tuple": repr(config["pickled.tuple"]),
            "set": repr(config["pickled.set"]), "topology_point": config["pickled.topology.point"] == Point(5, 6),
            "context_point": context.get_cluster_config()["pickled.topology.point"] == Point(5, 6)}}) + "\n")

    def process(self, tup):
        self.file.write(json.dumps({"n": tup.values[0], "result": tup.values[1]}) + "\n")


iterator = iter(["skipped", "b", "c"])
next(iterator)
countdown = Countdown(4)
next(countdown)


class PickledConfig(Topology):
    config = {"pickled.topology.point": Point(5, 6)}
    numbers = Numbers.spec()
    apply = Apply.spec(par=2, inputs=[numbers], config={"pickled.fn": triple})
    recorder = Recorder.spec(inputs=[apply], config={
        "pickled.iterator": iterator, "pickled.countdown": countdown, "pickled.instance": Point(3, 4),
        "pickled.tuple": (1, "two"), "pickled.set": {3}})
