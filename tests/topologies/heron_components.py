"""heronpy spouts, bolts and a custom grouping for the heron_* test topologies, written
as Heron's examples are (heron/examples/src/python): heronpy imports only, components
built by the runtime with ``cls(delegate=...)``, ``initialize(config, context)``.

Every bolt appends what it receives to a line per tuple under ``heron.out`` (one file per
task), so a test reads exactly what each task saw; ticks are logged the same way."""
import json
import os
from collections import Counter

from heronpy.api.bolt.bolt import Bolt
from heronpy.api.bolt.window_bolt import TumblingWindowBolt
from heronpy.api.custom_grouping import ICustomGrouping
from heronpy.api.metrics import CountMetric
from heronpy.api.spout.spout import Spout
from heronpy.api.stream import Stream
from heronpy.api.tuple import TupleHelper
from heronpy.proto import topology_pb2

WORDS = ["nathan", "mike", "jackson", "golda", "bertels"]


class Recorder:
    """Appends JSON lines to ``<heron.out>/<name>-<task>.jsonl``."""

    def __init__(self, config, context, name):
        out = config["heron.out"]
        os.makedirs(out, exist_ok=True)
        self.file = open(os.path.join(out, f"{name}-{context.get_task_id()}.jsonl"), "a", buffering=1)

    def __call__(self, record):
        self.file.write(json.dumps(record) + "\n")


class WordSpout(Spout):
    """Emits ``heron.words`` words per task, cycling through WORDS, unreliably."""
    outputs = ['word']

    def initialize(self, config, context):
        self.left = int(config["heron.words"])
        self.i = 0
        self.logger.info("WordSpout task %d will emit %d words", context.get_task_id(), self.left)

    def next_tuple(self):
        if self.left > 0:
            self.emit([WORDS[self.i % len(WORDS)]])
            self.i += 1
            self.left -= 1


class CountBolt(Bolt):
    """Counts words; logs each word and each tick tuple it gets."""
    outputs = ['word', 'count']

    def initialize(self, config, context):
        self.counter = Counter()
        self.record = Recorder(config, context, "count")
        self.ticks = Recorder(config, context, "tick")
        self.metric = context.register_metric("words", CountMetric(), 1)
        self.record({"config": {k: config.get(k) for k in (
            "topology.reliability.mode", "topology.tick.tuple.freq.secs", "topology.max.spout.pending",
            "topology.message.timeout.secs", "topology.enable.message.timeouts", "wordcount.custom")},
            "cluster_config_mode": context.get_cluster_config().get("topology.reliability.mode"),
            "topology": context.get_topology_name(), "component": context.get_component_id(),
            "tasks": context.get_component_tasks(context.get_component_id()),
            "sources": sorted([s.component_name, s.id, topology_pb2.Grouping.Name(g)]
                              for s, g in context.get_this_sources().items())})

    def process(self, tup):
        word = tup.values[0]
        self.counter[word] += 1
        self.metric.incr()
        self.record({"word": word, "from": tup.component, "stream": tup.stream})
        self.emit([word, self.counter[word]])

    def process_tick(self, tup):
        self.ticks({"tick": self.is_tick(tup), "stream": tup.stream, "component": tup.component,
                    "system": tup.component == TupleHelper.TICK_SOURCE_COMPONENT})


class NumberSpout(Spout):
    """0..heron.numbers-1: evens on stream "even", odds on "odd"."""
    outputs = [Stream(fields=['n'], name='even'), Stream(fields=['n'], name='odd')]

    def initialize(self, config, context):
        self.n, self.end = 0, int(config["heron.numbers"])

    def next_tuple(self):
        if self.n < self.end:
            self.emit([self.n], stream='even' if self.n % 2 == 0 else 'odd')
            self.n += 1


class SeenBolt(Bolt):
    """Logs every tuple with the task it reached and the task ids of its component."""
    outputs = []

    def initialize(self, config, context):
        self.record = Recorder(config, context, context.get_component_id())
        self.task = context.get_task_id()
        self.tasks = sorted(context.get_component_tasks(context.get_component_id()))

    def process(self, tup):
        self.record({"n": tup.values[0], "stream": tup.stream, "task": self.task, "tasks": self.tasks})


class ModGrouping(ICustomGrouping):
    """Sends n to the (n // 2) % len-th target task (by sorted task id)."""

    def prepare(self, context, component, stream, target_tasks):
        self.targets = sorted(target_tasks)

    def choose_tasks(self, values):
        return [self.targets[(values[0] // 2) % len(self.targets)]]


class ReplaySpout(Spout):
    """Emits ids 0..heron.ids-1 reliably and re-emits an id when it fails; logs acks."""
    outputs = ['id']

    def initialize(self, config, context):
        self.next_id, self.end = 0, int(config["heron.ids"])
        self.pending, self.to_replay = set(), []
        self.max_pending = 0
        self.record = Recorder(config, context, "spout")

    def next_tuple(self):
        if self.to_replay:
            i = self.to_replay.pop()
        elif self.next_id < self.end:
            i, self.next_id = self.next_id, self.next_id + 1
        else:
            return
        self.pending.add(i)
        self.max_pending = max(self.max_pending, len(self.pending))
        self.emit([i], tup_id=i)

    def ack(self, tup_id):
        self.pending.discard(tup_id)
        self.record({"acked": tup_id, "max_pending": self.max_pending})

    def fail(self, tup_id):
        self.pending.discard(tup_id)
        self.to_replay.append(tup_id)
        self.record({"failed": tup_id})


class HalfAckBolt(Bolt):
    """Heron's half-ack example: fails every other tuple it gets, acks the rest."""
    outputs = []

    def initialize(self, config, context):
        self.total = 0
        self.record = Recorder(config, context, "halfack")

    def process(self, tup):
        self.total += 1
        if self.total % 2 == 0:
            self.log(f"Failing a tuple: {tup.values}", "debug")
            self.fail(tup)
        else:
            self.ack(tup)
            self.record({"acked": tup.values[0]})


class RelayBolt(Bolt):
    """Passes each id on anchored to its input, then acks the input."""
    outputs = ['id']

    def process(self, tup):
        self.emit([tup.values[0]], anchors=[tup])
        self.ack(tup)



class WindowBolt(TumblingWindowBolt):
    """heronpy's own tumbling window (it asks for ticks every window in initialize):
    logs each window's size."""

    def initialize(self, config, context):
        super().initialize(config, context)
        self.record = Recorder(config, context, "window")

    def processWindow(self, window_info, tuples):
        self.record({"tuples": len(tuples), "seconds": window_info.end - window_info.start})
