"""Exactly-once word count: file lines -> split -> keyed counts -> transactional file sink.

    bittern run topologies/exactly_once_word_count.py --until-done
    python topologies/exactly_once_word_count.py [OUTPUT_DIR]      # check the committed output

    lines (FileSpout, par 2) -shuffle-> split (par 2) -fields(word)-> count (par 2)
          -fields(word)-> out (SinkBolt over a FileSink, par 2)

``topology.reliability.mode = EFFECTIVELY_ONCE`` with a checkpoint every second.
The input is generated on first use (no arguments needed): ``wordcount.files``
files (default 4) holding ``wordcount.lines`` lines in all (default 10000), line
*i* being ``SENTENCES[i % 20]``, under ``wordcount.input.dir`` (default
``<tmp>/bittern-eo-wordcount/input-<lines>-<files>``). Each spout task reads its
share of the files (``FileSpout``: ``files[i::2]``), its offset in its checkpointed
state.

The count bolt keeps its counts in keyed state (``state.keyed``, so a restore or a
rescale brings each word's count back on the task its tuples reach) and, at every
checkpoint (``pre_save``), emits ``[word, count]`` for each word whose count changed
since the previous one: the new running total. Those tuples precede the
checkpoint's barrier, so the sink writes them under that checkpoint and they
become visible when it is complete: ``<wordcount.output.dir>/counts-<n>-<task>.jsonl``
(default ``<tmp>/bittern-eo-wordcount/<topology name>``), one ``["word", count]``
per line. The final count of a word is its value in the highest checkpoint that
has it (counts only grow: the largest). After a failure the topology rolls back
to its last complete checkpoint and replays from there; the committed files never
hold a count that was not exact at a complete checkpoint.

The spout says ``done()`` after its last line; ``--until-done`` stops once the
first checkpoint taken after that is committed at every sink (the runtime waits for
it), so the end of the input is in the output. Run this file with Python to print the committed
totals and compare them with the expected counts.
"""
import glob
import json
import os
import sys
import tempfile
from collections import Counter

from bittern import Bolt, Grouping, Topology
from bittern.sinks import FileSink, SinkBolt
from bittern.spouts import FileSpout

from word_count import SENTENCES  # the 20 sentences of the plain example, in this directory
BASE = os.path.join(tempfile.gettempdir(), "bittern-eo-wordcount")
DEFAULT_LINES, DEFAULT_FILES = 10000, 4


def input_dir(lines, files):
    return os.path.join(BASE, f"input-{lines}-{files}")


def generate(directory, lines, files):
    """Write the input (idempotent: every process may call it; each file is written
    whole under a temp name, then renamed). Line i is SENTENCES[i % 20]; file k holds
    lines k*per .. (k+1)*per - 1. Returns the glob of the files."""
    os.makedirs(directory, exist_ok=True)
    per = -(-lines // files)
    for k in range(files):
        path = os.path.join(directory, f"part-{k:03d}.txt")
        if os.path.exists(path):
            continue
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".gen-")
        with os.fdopen(fd, "w") as f:
            for i in range(k * per, min(lines, (k + 1) * per)):
                f.write(SENTENCES[i % len(SENTENCES)] + "\n")
        os.replace(tmp, path)
    return os.path.join(directory, "part-*.txt")


def expected_counts(lines):
    c = Counter()
    for i in range(lines):
        c.update(SENTENCES[i % len(SENTENCES)].split())
    return dict(c)


def committed_counts(out_dir, prefix="counts"):
    """{word: final count} from the committed files only (``<prefix>-<n>-<task>.jsonl``)."""
    counts = {}
    for path in glob.glob(os.path.join(out_dir, f"{prefix}-*-*.jsonl")):
        with open(path) as f:
            for line in f:
                if line.strip():
                    word, n = json.loads(line)
                    counts[word] = max(n, counts.get(word, 0))
    return counts


class Lines(FileSpout):
    """FileSpout over the generated input (unless ``spout.files`` names other files)."""

    def initialize(self, config, context):
        config = dict(config)
        if not config.get("spout.files"):
            lines = int(config.get("wordcount.lines", DEFAULT_LINES))
            files = int(config.get("wordcount.files", DEFAULT_FILES))
            config["spout.files"] = generate(config.get("wordcount.input.dir") or input_dir(lines, files),
                                             lines, files)
        super().initialize(config, context)


class Split(Bolt):
    outputs = ["word"]

    def process(self, tup):
        emit = self.emit
        for word in tup.values[0].split():
            emit([word])


class Count(Bolt):
    outputs = ["word", "count"]

    def init_state(self, state):
        self.counts = state.keyed  # restored: the counts of the last complete checkpoint
        self.changed = {}

    def process(self, tup):
        word = tup.values[0]
        n = self.counts.get(word, 0) + 1
        self.counts.put(word, n)
        self.changed[word] = n

    def pre_save(self, checkpoint_id):
        # emitted before the barrier of checkpoint_id: the sink stages them under it
        for word, n in self.changed.items():
            self.emit([word, n])
        self.changed = {}


class FreshFileSink(FileSink):
    """A FileSink that, when the topology starts with no complete checkpoint, removes
    committed files of an earlier run of the same name (their checkpoint ids would
    collide with this run's)."""

    def recover(self, completed_ids=(), last_complete=None):
        if last_complete is None and not list(completed_ids):
            for path in self.committed_files():
                os.unlink(path)
        return super().recover(completed_ids, last_complete)


class CountsOut(SinkBolt):
    def make_sink(self, config, context):
        out = config.get("wordcount.output.dir") or os.path.join(BASE, context.topology_name)
        return FreshFileSink(out, "counts")

    def close(self):
        if self.sink is not None and self.sink.context is not None:
            files = self.sink.committed_files()
            print(json.dumps({"sink_task": self.sink.task, "directory": self.sink.directory,
                              "committed_files": len(files)}))
        super().close()


class ExactlyOnceWordCount(Topology):
    config = {"topology.reliability.mode": "EFFECTIVELY_ONCE",
              "topology.stateful.checkpoint.interval.seconds": 1.0,
              "topology.stmgrs": 2}
    lines = Lines.spec(par=2)
    split = Split.spec(par=2, inputs=[lines])
    count = Count.spec(par=2, inputs={split: Grouping.fields("word")})
    out = CountsOut.spec(par=2, inputs={count: Grouping.fields("word")})


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(BASE, "exactly_once_word_count")
    lines = int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_LINES
    got, want = committed_counts(out_dir), expected_counts(lines)
    print(json.dumps({"directory": out_dir, "words": sum(got.values()), "expected_words": sum(want.values()),
                      "exact": got == want}))
    sys.exit(0 if got == want else 1)
