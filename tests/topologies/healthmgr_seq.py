"""The health manager's end-to-end target: a spout at a fixed rate into a bolt that
does about a third of it per task.

spout (par 1) -shuffle-> work (par 1 at submission) -shuffle-> sink (par 1)

* ``spout`` emits ids 0, 1, 2, ... at the rate (tuples/s) written in the file
  ``test.rate_file`` (read every 0.25 s; 0 stops it), each with a padding of
  ``test.pad`` bytes so that queues reach the backpressure watermarks quickly. It
  never bursts to catch up after a pause (backpressure): the rate is a ceiling.
  Every emitted id is appended to ``<test.out>/emitted.txt`` and every acked one to
  ``acks.txt``; at start-up (a rebalance restarts every process) it reads both and
  first emits again what was emitted and never acked, then goes on after the
  largest id, so a restart loses nothing.
* ``work`` sleeps ``test.work.ms`` per tuple (about a third of the spout's rate per
  task), then passes the id on. With ``test.slow.index = k``, its task of index k
  sleeps ``test.slow.ms`` instead when ``work`` has more than one task, in its first
  incarnation only (it leaves ``<test.out>/slow-<task>`` behind): a slow instance
  that a restart cures.
* ``sink`` appends each id to ``<test.out>/sink-<task>.txt``.
"""
import os
import time

from bittern import Bolt, ReliableSpout, Topology

from testkit import LineSinkBolt


def read_ids(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return set()
    end = data.rfind(b"\n") + 1
    return {int(x) for x in data[:end].split()}


class RateSpout(ReliableSpout):
    outputs = ["n", "pad"]

    def initialize(self, config, context):
        self.out = config["test.out"]
        os.makedirs(self.out, exist_ok=True)
        self.rate_file = config["test.rate_file"]
        self.pad = "x" * int(config.get("test.pad", 200))
        emitted = read_ids(os.path.join(self.out, "emitted.txt"))
        acked = read_ids(os.path.join(self.out, "acks.txt"))
        self.redo = sorted(emitted - acked)
        self.next_id = max(emitted, default=-1) + 1
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self.emitted = os.open(os.path.join(self.out, "emitted.txt"), flags)
        self.acks = os.open(os.path.join(self.out, "acks.txt"), flags)
        self.rate, self.checked = 0.0, 0.0
        self.next_at = time.monotonic()

    def _rate(self, now):
        if now - self.checked >= 0.25:
            self.checked = now
            try:
                self.rate = float(open(self.rate_file).read().strip() or 0)
            except (OSError, ValueError):
                pass
        return self.rate

    def next_item(self):
        now = time.monotonic()
        rate = self._rate(now)
        if rate <= 0 or now < self.next_at:
            return None
        self.next_at = max(self.next_at + 1.0 / rate, now - 0.05)  # no catching up after a pause
        if self.redo:
            n = self.redo.pop(0)
        else:
            n = self.next_id
            self.next_id += 1
            os.write(self.emitted, b"%d\n" % n)
        return n, [n, self.pad]

    def on_acked(self, tup_id):
        os.write(self.acks, b"%d\n" % tup_id)


class WorkBolt(Bolt):
    outputs = ["n"]

    def initialize(self, config, context):
        self.delay = float(config.get("test.work.ms", 5.5)) / 1000.0
        slow = config.get("test.slow.index")
        tasks = len(context.get_component_tasks(context.component))
        if slow is not None and int(slow) == context.task_index and tasks > 1:
            mark = os.path.join(config["test.out"], f"slow-{context.task_id}")
            if not os.path.exists(mark):
                os.makedirs(config["test.out"], exist_ok=True)
                open(mark, "w").close()
                self.delay = float(config.get("test.slow.ms", 20)) / 1000.0

    def process(self, tup):
        time.sleep(self.delay)
        self.emit([tup.values[0]])


class HealthSeq(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE", "topology.message.timeout.secs": 30,
              "topology.metrics.interval.secs": 1}
    spout = RateSpout.spec(par=1)
    work = WorkBolt.spec(par=1, inputs=[spout])
    sink = LineSinkBolt.spec(par=1, inputs=[work])
