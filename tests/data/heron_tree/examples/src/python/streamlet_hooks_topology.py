'''A Streamlet word count in the shape of Heron's word_count_streamlet.py (a __main__
block, the name from sys.argv[1]), with a bounded source and a task hook on every task.

The source emits LINES lines (one every PACE seconds), then ends (StopIteration from
get(): Bittern's end of input); the words are counted per key over sliding windows of 2 s
every 1 s and logged. topology.auto.task.hooks puts misc's AutoHook on every task,
including the windowed bolt; it writes what it was called with into the directory named
by the STREAMLET_HOOKS_OUT environment variable (nothing without it).'''
import os
import sys
import time

from heronpy.streamlet.builder import Builder
from heronpy.streamlet.config import Config
from heronpy.streamlet.generator import Generator
from heronpy.streamlet.runner import Runner
from heronpy.streamlet.windowconfig import WindowConfig

from examples.src.python.misc import AutoHook

SENTENCES = ["Mary had a little lamb", "its fleece was white as snow"]
LINES = 200
PACE = 0.01


class Lines(Generator):
  def setup(self, context):
    self.n = 0

  def get(self):
    if self.n >= LINES:
      raise StopIteration
    time.sleep(PACE)
    self.n += 1
    return SENTENCES[self.n % len(SENTENCES)]


if __name__ == '__main__':
  if len(sys.argv) != 2:
    print("Topology's name is not specified")
    sys.exit(1)

  builder = Builder()
  builder.new_source(Lines()) \
         .flat_map(lambda line: line.split()) \
         .map(lambda word: (word, 1)) \
         .reduce_by_key_and_window(WindowConfig.create_sliding_window(2, 1), lambda x, y: x + y) \
         .log()
  settings = {"topology.auto.task.hooks": [f"{AutoHook.__module__}.{AutoHook.__name__}"]}
  if os.environ.get("STREAMLET_HOOKS_OUT"):
    settings["examples.out"] = os.environ["STREAMLET_HOOKS_OUT"]
  Runner().run(sys.argv[1], Config(settings), builder)
