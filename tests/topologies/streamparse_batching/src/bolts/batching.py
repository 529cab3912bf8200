"""Batching bolts: per key, the count and sum of a batch of numbers.

``KeyBatcher`` is a pystorm BatchingBolt: its batches are flushed by tick tuples.
``TicklessKeyBatcher`` flushes from its own timer thread and sends each batch's
result directly to the lowest task of the sink, on a direct stream."""
from streamparse import BatchingBolt, Stream, TicklessBatchingBolt


class KeyBatcher(BatchingBolt):
    outputs = [Stream(fields=["key", "count", "total"], name="batches")]
    ticks_between_batches = 0  # every tick flushes

    def group_key(self, tup):
        return tup.values[1]

    def process_batch(self, key, tups):
        self.emit([key, len(tups), sum(t.values[0] for t in tups)], stream="batches")


class TicklessKeyBatcher(TicklessBatchingBolt):
    outputs = [Stream(fields=["key", "count", "total"], name="direct_batches", direct=True)]
    secs_between_batches = 0.5

    def initialize(self, conf, context):
        self.sink_task = min(int(t) for t, c in context["task->component"].items() if c == "sink")

    def group_key(self, tup):
        return tup.values[1]

    def process_batch(self, key, tups):
        self.emit([key, len(tups), sum(t.values[0] for t in tups)], stream="direct_batches",
                  direct_task=self.sink_task)
