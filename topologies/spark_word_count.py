"""Word count over a Parquet dataset read by Spark: a batch job run as a stream.

    bittern run topologies/spark_word_count.py --until-done
    bittern run topologies/spark_word_count.py --until-done --config spout.spark.path=/data/lines

    lines (SparkSpout, par 2) -shuffle-> split (par 2) -fields(word)-> count (par 2)

Needs ``pip install 'bittern[spark]'`` and Java 17. Each spout task starts its own
local Spark (one JVM per task) and streams its share of the Parquet files
(``files[i::2]``), file by file, under ``topology.reliability.mode = ATLEAST_ONCE``:
a row whose tree fails is emitted again. When both tasks have emitted and had
acked every row they say ``done()`` and ``--until-done`` stops the topology.

Without ``spout.spark.path`` the input is generated on first use (before the CLI
checks the source): ``<tmp>/bittern-spark-wordcount/input-<lines>-<files>``,
``wordcount.lines`` rows (default 20000) in ``wordcount.files`` Parquet files
(default 4), one column ``line``, row *i* being ``SENTENCES[i % 20]``. Any dataset
with a string column ``line`` will do (``--config spout.spark.format=json`` etc.).

On shutdown each count task prints ``{"component", "task", "counts"}`` as JSON and,
when ``wordcount.output.dir`` is set, writes ``counts-<task>.json`` there.
"""
import json
import os
import tempfile
from collections import Counter

from bittern import Bolt, Grouping, Topology
from bittern.spark import SparkSpout

from word_count import SENTENCES  # the 20 sentences of the plain example, in this directory
BASE = os.path.join(tempfile.gettempdir(), "bittern-spark-wordcount")
DEFAULT_LINES, DEFAULT_FILES = 20000, 4


def generate(directory, lines, files):
    """Write the Parquet input (idempotent: each file is written whole under a temp
    name, then renamed). Returns the directory."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    os.makedirs(directory, exist_ok=True)
    per = -(-lines // files)
    for k in range(files):
        path = os.path.join(directory, f"part-{k:03d}.parquet")
        if os.path.exists(path):
            continue
        rows = [SENTENCES[i % len(SENTENCES)] for i in range(k * per, min(lines, (k + 1) * per))]
        tmp = os.path.join(directory, f".gen-{os.getpid()}-{k}")
        pq.write_table(pa.table({"line": pa.array(rows, pa.string())}), tmp)
        os.replace(tmp, path)
    return directory


def expected_counts(lines):
    c = Counter()
    for i in range(lines):
        c.update(SENTENCES[i % len(SENTENCES)].split())
    return dict(c)


def with_input(config):
    """``config`` with ``spout.spark.path`` set, generating the default input if unset."""
    config = dict(config)
    if not config.get("spout.spark.path"):
        lines = int(config.get("wordcount.lines", DEFAULT_LINES))
        files = int(config.get("wordcount.files", DEFAULT_FILES))
        config["spout.spark.path"] = generate(os.path.join(BASE, f"input-{lines}-{files}"), lines, files)
    return config


class Lines(SparkSpout):
    format = "parquet"
    fields = ["line"]

    @classmethod
    def preflight(cls, config):
        super().preflight(with_input(config))

    def initialize(self, config, context):
        super().initialize(with_input(config), context)


class Split(Bolt):
    outputs = ["word"]

    def process(self, tup):
        emit = self.emit
        for word in tup.values[0].split():
            emit([word])


class Count(Bolt):
    outputs = []

    def initialize(self, config, context):
        self.counts = Counter()
        self.task = context.task_id
        self.out = config.get("wordcount.output.dir")

    def process(self, tup):
        self.counts[tup.values[0]] += 1

    def close(self):
        print(json.dumps({"component": "count", "task": self.task, "counts": dict(self.counts)}))
        if self.out:
            os.makedirs(self.out, exist_ok=True)
            with open(os.path.join(self.out, f"counts-{self.task}.json"), "w") as f:
                json.dump(dict(self.counts), f)


class SparkWordCount(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE", "topology.max.spout.pending": 5000}
    lines = Lines.spec(par=2)
    split = Split.spec(par=2, inputs=[lines])
    count = Count.spec(par=2, inputs={split: Grouping.fields("word")})
