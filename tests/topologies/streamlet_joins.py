"""Windowed joins in heronpy's Streamlet API: one bounded source of ("L"|"R", key,
value) records, split by filter/map into a left and a right streamlet, joined four ways
(join, outer_left_join, outer_right_join, outer_join) over a tumbling window, each
result consumed into files under $STREAMLET_OUT. The source waits for the start of a
window (processing time, windows aligned to the epoch) and sends everything at once, so
every record lands in one window."""
import datetime
import json
import math
import os
import time

from heronpy.streamlet.builder import Builder
from heronpy.streamlet.config import Config
from heronpy.streamlet.generator import Generator
from heronpy.streamlet.runner import Runner
from heronpy.streamlet.windowconfig import WindowConfig

WINDOW = 6
RECORDS = [("L", "k1", "a"), ("L", "k1", "b"), ("R", "k1", "x"), ("L", "k2", "c"), ("R", "k3", "y"),
           ("R", "k4", "z"), ("L", "k4", "d"), ("R", "k4", "w")]


class Burst(Generator):
    """RECORDS right after the next window starts; then the end of input."""

    def setup(self, context):
        self.at = math.floor(time.time() / WINDOW + 1) * WINDOW + 0.2
        self.it = iter(RECORDS)

    def get(self):
        if time.time() < self.at:
            return None
        return next(self.it)


def writer(kind):
    def write(value):
        keyed, joined = value
        with open(os.path.join(os.environ["STREAMLET_OUT"], f"{kind}-{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps({"key": keyed._key, "start": keyed._window._start_time,
                                "end": keyed._window._end_time, "value": joined}) + "\n")
    return write


builder = Builder()
records = builder.new_source(Burst()).set_name("records")
left = records.filter(lambda r: r[0] == "L").set_name("left_only").map(lambda r: (r[1], r[2])).set_name("left")
right = records.filter(lambda r: r[0] == "R").set_name("right_only").map(lambda r: (r[1], r[2])).set_name("right")
window = WindowConfig.create_tumbling_window(datetime.timedelta(seconds=WINDOW))
left.join(right, window, lambda a, b: [a, b]).set_name("inner").consume(writer("inner"))
left.outer_left_join(right, window, lambda a, b: [a, b]).set_name("left_outer").consume(writer("left_outer"))
left.outer_right_join(right, window, lambda a, b: [a, b]).set_name("right_outer").consume(writer("right_outer"))
left.outer_join(right, window, lambda a, b: [a, b]).set_name("full_outer").set_num_partitions(2) \
    .consume(writer("full_outer"))
Runner().run("streamlet_joins", Config(), builder)
