"""Components of the health manager's end-to-end topologies (healthmgr_seq.py,
healthmgr_pipe.py, healthmgr_skew.py), shared with the benchmark's healthmgr rows.

* :class:`RateSpout` emits ids 0, 1, 2, ... as ``[n, key, pad]`` at the rate
  (tuples/s) written in the file ``test.rate_file`` (read every 0.25 s; 0 stops it).
  The pace is steady: an id is emitted when it is due and never two at once, so a
  spout held up (by backpressure, or the scheduler) for more than one period starts
  its pace again from then instead of catching up in a burst; what it emits is
  therefore never above the rate, and ``emitted / (1 - paused)`` measures it. ``pad``
  is ``test.pad`` bytes (200) so that queues reach the backpressure watermarks
  quickly. ``key`` is ``"hot"`` for ``test.hot.percent`` ids of every 100 (0: none),
  else the id itself (a hot key for a fields grouping). Every emitted id is appended
  to ``<test.out>/emitted.txt`` and every acked one to ``acks.txt``; at start-up (a
  rebalance restarts every process) it reads both and first emits again what was
  emitted and never acked, then goes on after the largest id: a restart loses nothing.
* :class:`WorkBolt` waits ``test.<component>.ms`` (else ``test.work.ms``) per tuple
  (waiting, not computing: more tasks help on 2 cores), then passes the id on. With
  ``test.slow.index = k``, its task of index k waits ``test.slow.ms`` instead when the
  component has more than one task, in its first incarnation only (it leaves
  ``<test.out>/slow-<task>`` behind): a slow instance that a restart cures.
"""
import os
import time

from bittern import Bolt, ReliableSpout


def read_ids(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return set()
    end = data.rfind(b"\n") + 1
    return {int(x) for x in data[:end].split()}


class RateSpout(ReliableSpout):
    outputs = ["n", "key", "pad"]

    def initialize(self, config, context):
        self.out = config["test.out"]
        os.makedirs(self.out, exist_ok=True)
        self.rate_file = config["test.rate_file"]
        self.pad = "x" * int(config.get("test.pad", 200))
        self.hot = int(config.get("test.hot.percent", 0))
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
        period = 1.0 / rate
        # on time (late by less than a period: the poll's jitter): the next one a period
        # after this one was due; later than that (paused): a period from now, no catching up
        self.next_at = (self.next_at if now - self.next_at < period else now) + period
        if self.redo:
            n = self.redo.pop(0)
        else:
            n = self.next_id
            self.next_id += 1
            os.write(self.emitted, b"%d\n" % n)
        key = "hot" if n % 100 < self.hot else str(n)
        return n, [n, key, self.pad]

    def on_acked(self, tup_id):
        os.write(self.acks, b"%d\n" % tup_id)


class WorkBolt(Bolt):
    outputs = ["n"]

    def initialize(self, config, context):
        ms = config.get(f"test.{context.component}.ms", config.get("test.work.ms", 5.5))
        self.delay = float(ms) / 1000.0
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
