"""tests/topologies/exactly_once_seq.py with incremental checkpoints made visible: the
keyed count bolt's compactions (a chain merged into a new base on the instance's writer
thread) can be slowed down and are announced, so a test can kill -9 the bolt in the
middle of one.

* ``test.compaction.sleep`` (seconds, default 0): a count task's compaction waits this
  long before merging, with a marker file ``<test.out>/compacting/count-<task>``
  present meanwhile (written before the wait, removed after the merge). With the disk
  backend a compaction streams a base from the task's database: the same wait, the
  marker present until the base is written.
* Everything else as in exactly_once_seq.py (``test.count``, ``test.keys``,
  ``test.rate``, pids in ``<test.out>/pids``, committed rows in ``<test.out>/sink``).
"""
import os
import time

from bittern import Grouping, Topology
from exactly_once_seq import CountBolt, SeqSink, SeqSpout


class CompactionMarkingCount(CountBolt):
    def initialize(self, config, context):
        super().initialize(config, context)
        delay = float(config.get("test.compaction.sleep", 0) or 0)
        if delay > 0:
            _mark_compactions(os.path.join(config["test.out"], "compacting"), f"count-{context.task_id}", delay)


def _mark_compactions(directory, name, delay):
    import instance.ckptwriter as cw
    real = cw.apply_delta
    if getattr(real, "_marked", False):
        return
    os.makedirs(directory, exist_ok=True)
    marker = os.path.join(directory, name)

    def apply_delta(full, delta, *args, **kwargs):  # only a compaction calls it on the writer thread
        with open(marker, "w") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(delay)
        try:
            return real(full, delta, *args, **kwargs)
        finally:
            try:
                os.unlink(marker)
            except FileNotFoundError:
                pass
    apply_delta._marked = True
    cw.apply_delta = apply_delta
    real_dump = cw.dump_base

    def dump_base(*args, **kwargs):  # the disk backend's bases, streamed on the writer thread
        with open(marker, "w") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(delay)
        try:
            yield from real_dump(*args, **kwargs)
        finally:
            try:
                os.unlink(marker)
            except FileNotFoundError:
                pass
    cw.dump_base = dump_base


class IncrementalSeq(Topology):
    config = {"topology.stmgrs": 2, "topology.reliability.mode": "EFFECTIVELY_ONCE",
              "topology.stateful.checkpoint.interval.seconds": 0.3,
              "bittern.checkpoint.incremental.max.deltas": 2}
    spout = SeqSpout.spec(par=1)
    count = CompactionMarkingCount.spec(par=2, inputs={spout: Grouping.fields("key")})
    sink = SeqSink.spec(par=2, inputs={count: Grouping.SHUFFLE})
