"""Components for the end-to-end grouping tests (tests/test_groupings_e2e.py).

Every component writes what it saw or did to ``<test.out>/<component>-<task>.jsonl``
(one JSON object per line, flushed on close):

* ``{"kind": "meta", ...}``: the task's component, task id, index and container, as
  the running instance reports them through its context;
* ``{"kind": "recv", ...}``: a data tuple received (source component and task,
  stream, values, and the values read back by field name);
* ``{"kind": "tick", ...}``: a tick tuple received by ``process_tick``;
* ``{"kind": "sent", ...}``: a tuple emitted and the task ids ``emit`` returned.

``GroupingSpout`` emits every ``n`` in ``range(test.count)`` once over its tasks
(task index k emits the n congruent to k modulo the parallelism) as
``[n, key]`` on ``default`` (key = ``k<n % test.keys>``), and also on ``evens``
(``[n, key]``) or ``odds`` (``[n, n*n]``), always with ``need_task_ids=True``.
"""
import json
import os
import time

from bittern import Bolt, Spout, Stream


class _Journal:
    def __init__(self, config, context):
        out = config["test.out"]
        os.makedirs(out, exist_ok=True)
        self.path = os.path.join(out, f"{context.component}-{context.task_id}.jsonl")
        self.lines = []
        self.write({"kind": "meta", "component": context.component, "task": context.task_id,
                    "index": context.task_index, "container": context.container,
                    "pid": os.getpid()})

    def write(self, rec):
        self.lines.append(json.dumps(rec))

    def close(self):
        with open(self.path, "w") as f:
            f.write("\n".join(self.lines) + "\n")


class GroupingSpout(Spout):
    outputs = [Stream(["n", "key"]), Stream(["n", "key"], name="evens"), Stream(["n", "sq"], name="odds")]

    def initialize(self, config, context):
        self.journal = _Journal(config, context)
        self.count = int(config["test.count"])
        self.keys = int(config["test.keys"])
        self.par = len(context.get_component_tasks(context.component))
        self.i = context.task_index
        self.task = context.task_id

    def next_tuple(self):
        n = self.i
        if n >= self.count:
            return
        self.i += self.par
        key = f"k{n % self.keys}"
        got = self.emit([n, key], tup_id=n, need_task_ids=True)
        self.journal.write({"kind": "sent", "stream": "default", "n": n, "tasks": got})
        if n % 2 == 0:
            got = self.emit([n, key], stream="evens", need_task_ids=True)
            self.journal.write({"kind": "sent", "stream": "evens", "n": n, "tasks": got})
        else:
            got = self.emit([n, n * n], stream="odds", need_task_ids=True)
            self.journal.write({"kind": "sent", "stream": "odds", "n": n, "tasks": got})

    def close(self):
        self.journal.close()


class Recorder(Bolt):
    """Records every tuple and tick it receives; emits nothing."""

    outputs = []

    def initialize(self, config, context):
        self.journal = _Journal(config, context)
        self.task = context.task_id
        self.context = context

    def record(self, tup):
        fields = self.context.get_component_outputs(tup.component)[tup.stream]
        self.journal.write({"kind": "recv", "task": self.task, "src": tup.component, "src_task": tup.task,
                            "stream": tup.stream, "values": list(tup.values),
                            "by_name": {f: tup[f] for f in fields}, "is_tick": tup.is_tick})

    def process(self, tup):
        self.record(tup)

    def process_tick(self, tup):
        self.journal.write({"kind": "tick", "time": time.monotonic(), "is_tick": tup.is_tick,
                            "component": tup.component, "stream": tup.stream, "values": list(tup.values)})

    def close(self):
        self.journal.close()


class DirectorBolt(Recorder):
    """Sends each ``n`` it receives to direct_sink's task ``tasks[n % len(tasks)]`` on its
    direct stream ``targeted``, recording what ``emit`` returned."""

    outputs = [Stream(["n", "target"], name="targeted", direct=True)]

    def initialize(self, config, context):
        super().initialize(config, context)
        self.targets = sorted(context.get_component_tasks(config["test.direct.target"]))

    def process(self, tup):
        self.record(tup)
        n = tup.values[0]
        target = self.targets[n % len(self.targets)]
        got = self.emit([n, target], stream="targeted", direct_task=target, need_task_ids=True)
        self.journal.write({"kind": "sent", "stream": "targeted", "n": n, "tasks": got})


class ModuloGrouping:
    """A custom grouping: ``n % 10 == 0`` goes nowhere, ``n % 10 == 5`` goes to the lowest
    and the highest target task, any other ``n`` to ``targets[(n + offset) % len]``.
    ``prepare`` leaves a note of its arguments in ``test.out``."""

    def __init__(self, offset=0):
        self.offset = offset
        self.targets = None

    def prepare(self, context, component, stream, target_tasks):
        self.targets = sorted(target_tasks)
        if context is None:  # used directly by the test to compute the expectation
            return
        out = context.get_cluster_config()["test.out"]
        os.makedirs(out, exist_ok=True)
        note = {"offset": self.offset, "emitter_task": context.get_task_id(),
                "emitter": context.get_component_id(), "component": component, "stream": stream,
                "target_tasks": list(target_tasks)}
        with open(os.path.join(out, f"prepare-{self.offset}-{context.get_task_id()}.json"), "w") as f:
            json.dump(note, f)

    def choose_tasks(self, values):
        n = values[0]
        if n % 10 == 0:
            return []
        if n % 10 == 5:
            return [self.targets[0], self.targets[-1]]
        return [self.targets[(n + self.offset) % len(self.targets)]]
