"""``scripts/bench.py --spark``: rows/s from Parquet through a SparkSpout, next to a plain
PySpark ``toLocalIterator`` loop over the same files.

* ``pyspark-loop``: one Python process, one local Spark with the spout's settings
  (``local[1]``, ``-Xmx512m``, ``-XX:TieredStopAtLevel=1 -XX:+UseSerialGC``,
  maxPartitionBytes 32 MiB), ``for row in df.toLocalIterator(prefetchPartitions=True):
  list(row)`` over the whole directory. rows/s excludes the JVM start.
* ``bittern-spout-pN``: ``bittern run scripts/bench_topologies/spark_rows.py
  --until-done`` with N spout tasks (one JVM each) into one counting bolt, at most
  once. ``rows/s`` = rows / (the slowest task's time from its Spark session being up
  to its last row, from the spout's log lines); ``wall`` is the whole run, JVM
  start-ups and topology start included.

The dataset (``--spark-rows`` rows, default 1,000,000; 100,000 with --quick, in 8
Parquet files of ``(id, word)``) is generated once under /tmp/bittern-bench/."""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time

from .common import ROOT, VENV_PY, WORK

TOPOLOGY = os.path.join(ROOT, "scripts", "bench_topologies", "spark_rows.py")
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]

LOOP = r"""
import os, sys, time, json
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1"); os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
t0 = time.monotonic()
from pyspark.sql import SparkSession
s = (SparkSession.builder.master("local[1]").appName("bench-loop").config("spark.ui.enabled", "false")
     .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "512m")
     .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
     .config("spark.sql.files.maxPartitionBytes", str(32 << 20)).getOrCreate())
s.sparkContext.setLogLevel("ERROR")
t1 = time.monotonic()
n = 0
for row in s.read.parquet(sys.argv[1]).toLocalIterator(prefetchPartitions=True):
    list(row); n += 1
t2 = time.monotonic()
s.stop()
print(json.dumps({"rows": n, "jvm_start_s": t1 - t0, "stream_s": t2 - t1}))
"""


def dataset(rows, files=8):
    import pyarrow as pa
    import pyarrow.parquet as pq
    d = os.path.join(WORK, f"spark-data-{rows}-{files}")
    if len(glob.glob(os.path.join(d, "part-*.parquet"))) == files:
        return d
    os.makedirs(d, exist_ok=True)
    per = -(-rows // files)
    for k in range(files):
        ids = range(k * per, min(rows, (k + 1) * per))
        tmp = os.path.join(d, f".gen-{k}")
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "word": [WORDS[i % 5] for i in ids]}), tmp,
                       row_group_size=50000)
        os.replace(tmp, os.path.join(d, f"part-{k:03d}.parquet"))
    return d


def run_loop(data, timeout):
    r = subprocess.run([VENV_PY, "-c", LOOP, data], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        return {"row": "pyspark-loop", "ok": False, "problems": r.stderr[-500:]}
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    return {"row": "pyspark-loop", "ok": True, "rows": doc["rows"], "rows_per_s": doc["rows"] / doc["stream_s"],
            "jvm_start_s": doc["jvm_start_s"], "wall_s": doc["jvm_start_s"] + doc["stream_s"]}


def run_spout(data, rows, par, home, timeout):
    env = dict(os.environ, BITTERN_HOME=home, BENCH_SPARK_PAR=str(par), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                    if p]))
    name = f"bench-spark-p{par}"
    t0 = time.monotonic()
    r = subprocess.run([VENV_PY, "-m", "bittern", "run", TOPOLOGY, "--name", name, "--until-done", "--json",
                        "--duration", str(timeout), "--config", f"spout.spark.path={data}"],
                       capture_output=True, text=True, timeout=timeout + 60, env=env, cwd=ROOT)
    wall = time.monotonic() - t0
    row = f"bittern-spout-p{par}"
    if r.returncode != 0:
        return {"row": row, "ok": False, "problems": r.stderr[-500:]}
    counted = sum(json.loads(ln[ln.index("{"):])["rows"] for ln in r.stdout.splitlines() if '"rows"' in ln)
    starts, ends = [], []
    for log in glob.glob(os.path.join(home, "logs", name, "*.log")):
        text = open(log, errors="replace").read()
        starts += [float(x) for x in re.findall(r"Spark session of task \d+ started in ([\d.]+)s", text)]
        ends += [float(x) for x in re.findall(r"emitted all \d+ rows of its .*? in ([\d.]+)s; done", text)]
    stream = max(e - s for s, e in zip(sorted(starts), sorted(ends))) if starts and len(starts) == len(ends) else None
    return {"row": row, "ok": counted == rows, "rows": counted, "jvm_start_s": max(starts) if starts else None,
            "rows_per_s": rows / stream if stream else None, "wall_s": wall,
            "problems": None if counted == rows else f"counted {counted} of {rows} rows"}


def main(a):
    rows = a.spark_rows or (100_000 if a.quick else 1_000_000)
    data = dataset(rows)
    home = os.path.join(WORK, "spark-home")
    os.makedirs(home, exist_ok=True)
    recs = []
    for run in range(a.runs):
        for item in ("pyspark-loop", "p1", "p2"):
            rec = run_loop(data, a.timeout) if item == "pyspark-loop" else \
                run_spout(data, rows, int(item[1:]), home, a.timeout)
            rec["run"] = run
            recs.append(rec)
            print(f"[bench --spark] run {run + 1}/{a.runs} {json.dumps(rec)}", file=sys.stderr, flush=True)
    print(f"\nParquet -> Python rows: {rows} rows in 8 files ({data}); median of {a.runs} run(s)\n")
    print(f"{'row':18s} {'ok':>3s} {'rows/s':>10s} {'JVM start s':>12s} {'wall s':>8s}")
    for name in ("pyspark-loop", "bittern-spout-p1", "bittern-spout-p2"):
        mine = [r for r in recs if r["row"] == name]

        def med(key):
            vals = sorted(r[key] for r in mine if r.get(key) is not None)
            return vals[len(vals) // 2] if vals else None
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        print(f"{name:18s} {'yes' if all(r.get('ok') for r in mine) else 'NO':>3s} {fmt(med('rows_per_s'), ',.0f'):>10s} "
              f"{fmt(med('jvm_start_s'), '.1f'):>12s} {fmt(med('wall_s'), '.1f'):>8s}")
    print("\nrows/s excludes the JVM start; a spout run's rows/s is rows over its slowest task's streaming time.")
    return 0 if all(r.get("ok") for r in recs) else 1
