"""Spark -> Bittern -> Parquet -> Spark: spend per user and day, exactly once.

    bittern run topologies/spark_pipeline.py --until-done
    python topologies/spark_pipeline.py --check [OUTPUT_DIR [INPUT_DIR]]
    python topologies/spark_pipeline.py --generate INPUT_DIR [--rows N] [--files K]

    events (SparkSpout, par $PIPELINE_SPOUT_PAR, default 2) -fields(user)-> spend (par 2)
           -fields(day)-> out (ParquetSinkBolt, par 2, partitioned by day)

The input is Parquet events ``(id int64, day string, user string, amount int64)``; with
no ``spout.spark.path`` it is generated on first use under
``<tmp>/bittern-spark-pipeline/input-<rows>-<files>`` (``pipeline.rows``, default 20000,
in ``pipeline.files`` files, default 4). Each spout task reads its share of the files
through its own local Spark (``spout.spark.master``'s default).

``topology.reliability.mode = EFFECTIVELY_ONCE``, a checkpoint every second. ``spend``
keeps, in keyed state per user, ``{day: [events, total]}`` and at every checkpoint
(``pre_save``) emits ``[day, user, events, total]`` for each (day, user) that changed:
the new running totals. ``out`` writes them to Parquet under ``sink.parquet.dir``
(default ``<tmp>/bittern-spark-pipeline/daily``), in Hive partitions
``day=YYYY-MM-DD/part-<checkpoint>-<task>.parquet`` with columns ``user string,
events int64, total int64``, visible when the checkpoint is complete. So the output
is a change log: a (day, user)'s result is its row with the most events, and each
running count is committed at most once.

``--check`` starts a local Spark, runs one SQL query over the output (the latest row
per (day, user)) and the same aggregation over the input (``count(*)``,
``sum(amount)`` per (day, user)), and prints ``OK ...`` or one line of differences
(missing, extra or different keys; running counts committed twice); exit status 0 or 1.
"""
import argparse
import os
import sys
import tempfile

from bittern import Bolt, Grouping, Topology
from bittern.sinks import ParquetSinkBolt
from bittern.spark import SparkSpout

BASE = os.path.join(tempfile.gettempdir(), "bittern-spark-pipeline")
DEFAULT_ROWS, DEFAULT_FILES, USERS, DAYS = 20000, 4, 50, 7


def event(i):
    """Event ``i``: ``(id, day, user, amount in cents)``."""
    return i, f"2026-11-{20 + i % DAYS:02d}", f"user{(i * 7919) % USERS:02d}", (i * 37) % 1000 + 1


def generate(directory, rows=DEFAULT_ROWS, files=DEFAULT_FILES):
    """Write the input (idempotent: each file written whole under a hidden name, then
    renamed). Returns the directory."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    os.makedirs(directory, exist_ok=True)
    per = -(-rows // files)
    for k in range(files):
        path = os.path.join(directory, f"part-{k:03d}.parquet")
        if os.path.exists(path):
            continue
        cols = list(zip(*(event(i) for i in range(k * per, min(rows, (k + 1) * per))))) or [[], [], [], []]
        table = pa.table({"id": pa.array(cols[0], pa.int64()), "day": pa.array(cols[1], pa.string()),
                          "user": pa.array(cols[2], pa.string()), "amount": pa.array(cols[3], pa.int64())})
        tmp = os.path.join(directory, f".gen-{os.getpid()}-{k}")
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    return directory


def with_input(config):
    config = dict(config)
    if not config.get("spout.spark.path"):
        rows = int(config.get("pipeline.rows", DEFAULT_ROWS))
        files = int(config.get("pipeline.files", DEFAULT_FILES))
        config["spout.spark.path"] = generate(os.path.join(BASE, f"input-{rows}-{files}"), rows, files)
    return config


class Events(SparkSpout):
    format = "parquet"
    fields = ["id", "day", "user", "amount"]

    @classmethod
    def preflight(cls, config):
        super().preflight(with_input(config))

    def initialize(self, config, context):
        super().initialize(with_input(config), context)


class Spend(Bolt):
    outputs = ["day", "user", "events", "total"]

    def init_state(self, state):
        self.users = state.keyed        # user -> {day: [events, total]}
        self.changed = set()

    def process(self, tup):
        _, day, user, amount = tup.values
        days = self.users.get(user) or {}
        events, total = days.get(day, (0, 0))
        days[day] = [events + 1, total + amount]
        self.users.put(user, days)      # (changed in place: put again)
        self.changed.add((day, user))

    def pre_save(self, checkpoint_id):
        for day, user in sorted(self.changed):
            events, total = self.users.get(user)[day]
            self.emit([day, user, events, total])
        self.changed = set()


class Daily(ParquetSinkBolt):
    directory = os.path.join(BASE, "daily")
    partition_by = ["day"]
    schema = {"user": "string", "events": "int64", "total": "int64"}


class SparkPipeline(Topology):
    config = {"topology.reliability.mode": "EFFECTIVELY_ONCE", "topology.stmgrs": 1,
              "topology.stateful.checkpoint.interval.seconds": 1.0}
    events = Events.spec(par=int(os.environ.get("PIPELINE_SPOUT_PAR", "2")))
    spend = Spend.spec(par=2, inputs={events: Grouping.fields("user")})
    out = Daily.spec(par=2, inputs={spend: Grouping.fields("day")})


# -- the check: Spark over the output vs Spark over the input ------------------------------
OUT_SQL = """
SELECT CAST(day AS STRING) AS day, user, max(events) AS events, max_by(total, events) AS total,
       count(*) AS versions, count(DISTINCT events) AS distinct_versions
FROM bittern_out GROUP BY CAST(day AS STRING), user"""
IN_SQL = """
SELECT CAST(day AS STRING) AS day, user, count(*) AS events, sum(amount) AS total
FROM bittern_in GROUP BY CAST(day AS STRING), user"""


def spark_session():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[1]").appName("bittern-pipeline-check")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", "512m")
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    return s


def check(out_dir, in_dir):
    """``(ok, one line)``: the output's latest row per (day, user) against Spark's own
    aggregation of the input."""
    for what, d in (("output", out_dir), ("input", in_dir)):
        if not os.path.isdir(d):
            return False, f"MISMATCH: the {what} directory {d} does not exist"
    spark = spark_session()
    try:
        spark.read.parquet(out_dir).createOrReplaceTempView("bittern_out")
        spark.read.parquet(in_dir).createOrReplaceTempView("bittern_in")
        got = {(r.day, r.user): r for r in spark.sql(OUT_SQL).collect()}
        want = {(r.day, r.user): (r.events, r.total) for r in spark.sql(IN_SQL).collect()}
        rows = spark.sql("SELECT count(*) AS n FROM bittern_out").collect()[0].n
        files = len(spark.read.parquet(out_dir).inputFiles())
    finally:
        spark.stop()
    problems = []
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    wrong = sorted(k for k in set(got) & set(want) if (got[k].events, got[k].total) != want[k])
    twice = sorted(k for k, r in got.items() if r.versions != r.distinct_versions)
    if missing:
        problems.append(f"{len(missing)} (day, user) missing, e.g. {missing[0]}")
    if extra:
        problems.append(f"{len(extra)} not in the input, e.g. {extra[0]}")
    if wrong:
        k = wrong[0]
        problems.append(f"{len(wrong)} differ, e.g. {k}: output (events, total) = "
                        f"({got[k].events}, {got[k].total}), input {want[k]}")
    if twice:
        problems.append(f"{len(twice)} with a running count committed twice, e.g. {twice[0]}")
    if problems:
        return False, "MISMATCH: " + "; ".join(problems)
    events = sum(e for e, _ in want.values())
    return True, (f"OK: {len(want)} (day, user) results match Spark's aggregation of {events} input events "
                  f"({rows} output rows in {files} files)")


def main(argv=None):
    ap = argparse.ArgumentParser(description="check or generate the data of topologies/spark_pipeline.py")
    ap.add_argument("--check", nargs="*", metavar="DIR", help="[OUTPUT_DIR [INPUT_DIR]] (defaults: the "
                    "topology's defaults)")
    ap.add_argument("--generate", metavar="INPUT_DIR", help="write the input dataset there")
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    ap.add_argument("--files", type=int, default=DEFAULT_FILES)
    a = ap.parse_args(argv)
    if a.generate:
        print(generate(a.generate, a.rows, a.files))
        return 0
    if a.check is None:
        ap.error("give --check or --generate")
    if len(a.check) > 2:
        ap.error("--check takes at most OUTPUT_DIR and INPUT_DIR")
    out_dir = a.check[0] if a.check else Daily.directory
    in_dir = a.check[1] if len(a.check) > 1 else os.path.join(BASE, f"input-{a.rows}-{a.files}")
    ok, line = check(out_dir, in_dir)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
