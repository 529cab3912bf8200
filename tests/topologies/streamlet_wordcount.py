"""Word count in heronpy's Streamlet API, written as Heron's word_count_streamlet.py is
(``Runner().run(sys.argv[1], ...)`` under ``__main__``): a bounded generator of lines,
flat_map, filter, map, reduce_by_key_and_window and reduce_by_window on tumbling
windows, log, consume into files (one per process, under $STREAMLET_OUT)."""
import datetime
import json
import os
import sys

from heronpy.streamlet.builder import Builder
from heronpy.streamlet.config import Config
from heronpy.streamlet.generator import Generator
from heronpy.streamlet.runner import Runner
from heronpy.streamlet.windowconfig import WindowConfig

LINES = ["the quick brown fox", "jumps over the lazy dog", "the dog barks", "a quick fox",
         "over and over", "lazy brown dog"] * 25
WINDOW = datetime.timedelta(seconds=2)


class Lines(Generator):
    """The lines once each; get() raising StopIteration ends the source (Bittern)."""

    def __init__(self, lines):
        self.lines = lines

    def setup(self, context):
        self.it = iter(self.lines)

    def get(self):
        return next(self.it)


def writer(kind):
    def write(value):
        window = value[0]._window if hasattr(value[0], "_window") else value[0]
        record = {"key": getattr(value[0], "_key", None), "start": window._start_time, "end": window._end_time,
                  "value": value[1]}
        with open(os.path.join(os.environ["STREAMLET_OUT"], f"{kind}-{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")
    return write


if __name__ == '__main__':
    builder = Builder()
    words = builder.new_source(Lines(LINES)).set_name("lines") \
        .flat_map(lambda line: line.split()).set_name("words").set_num_partitions(2) \
        .filter(lambda word: word != "the").set_name("no_the")
    words.log()
    words.map(lambda word: (word, 1)).set_name("ones") \
        .reduce_by_key_and_window(WindowConfig.create_tumbling_window(WINDOW), lambda x, y: x + y) \
        .set_name("counts").set_num_partitions(2) \
        .consume(writer("counts"))
    words.map(lambda word: len(word)).set_name("lengths") \
        .reduce_by_window(WindowConfig.create_tumbling_window(WINDOW), lambda acc, n: (acc or 0) + n) \
        .set_name("total_length") \
        .consume(writer("total"))
    Runner().run(sys.argv[1], Config(), builder)
