"""heronpy's Streamlet API: a bounded supplier and a bounded generator as sources,
union, clone into two sinks, repartition with a custom function and without one,
transform with state, set_name / set_num_partitions; every result consumed into files
under $STREAMLET_OUT (one per process). Runs to its end: ``bittern run --until-done``."""
import json
import os

from heronpy.streamlet.builder import Builder
from heronpy.streamlet.config import Config
from heronpy.streamlet.generator import Generator
from heronpy.streamlet.runner import Runner
from heronpy.streamlet.transformoperator import TransformOperator

N = 60
NUMBERS = iter(range(N))  # the supplier's (pickled with its position: each task gets a fresh one)


def next_number():
    return next(NUMBERS)  # StopIteration at the end: Bittern's end of input


class Letters(Generator):
    def setup(self, context):
        self.it = iter(["a", "b", "c", "d", "e"])

    def get(self):
        return next(self.it)


class Numbers(Generator):
    def setup(self, context):
        self.it = iter(range(100, 100 + N))

    def get(self):
        return next(self.it)


class RunningCount(TransformOperator):
    """State across tuples: how many elements this partition has seen so far; with the
    task of the repartition bolt the element came through (its routing)."""

    def setup(self, context):
        self.context = context
        self.seen = 0

    def transform(self, tup):
        self.seen += 1
        self.context.emit([tup.values[0], tup.task, self.context.get_partition_index(), self.seen,
                           self.context.get_num_partitions(), self.context.get_stream_name()])


def sink(kind):
    def write(value):
        with open(os.path.join(os.environ["STREAMLET_OUT"], f"{kind}-{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(value) + "\n")
    return write


builder = Builder()
numbers = builder.new_source(next_number).set_name("supplied")
letters = builder.new_source(Letters()).set_name("letters")
both = numbers.union(letters).set_name("both")
first, second = both.clone(2)
first.set_name("clone_a").consume(sink("clone_a"))
second.set_name("clone_b").consume(sink("clone_b"))
generated = builder.new_source(Numbers()).set_name("generated")
generated.repartition(3, lambda n, partitions: n % partitions).set_name("by_mod") \
    .transform(RunningCount()).set_name("counted").consume(sink("counted"))
generated.repartition(2).set_name("spread").map(lambda n: n * 2).set_name("doubled").set_num_partitions(3) \
    .consume(sink("doubled"))
Runner().run("streamlet_misc", Config(), builder)
