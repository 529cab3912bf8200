"""``scripts/bench.py --spark``: rows/s from Parquet through a SparkSpout in each of its
modes, next to a plain PySpark ``toLocalIterator`` loop over the same files.

* ``pyspark-loop``: one Python process, one local Spark with the spout's settings
  (``local[1]``, ``-Xmx512m``, ``-XX:TieredStopAtLevel=1 -XX:+UseSerialGC``,
  maxPartitionBytes 32 MiB), ``for row in df.toLocalIterator(prefetchPartitions=True):
  list(row)`` over the whole directory; its row count is checked. rows/s excludes the
  JVM start.
* ``MODE-pN``: ``bittern run scripts/bench_topologies/spark_rows.py --until-done`` with
  N spout tasks into one counting bolt, at most once, ``spout.spark.master`` =
  ``local[1]`` (a JVM per task), ``standalone`` (scripts/spark.sh's master + worker:
  one shared application, its driver in the topology's driver helper) or ``connect``
  (scripts/spark.sh's Spark Connect server). ``rows/s`` = the rows the bolt counted /
  the span from the first task's session being up to the last task's last row (the
  log lines' timestamps); ``session s`` = the slowest task's session start; ``wall`` =
  the whole run. ``spout RSS`` = the peak of the sum of the RSS of the spout task
  processes and all their children (their JVMs in local mode); ``helper RSS`` = the
  peak RSS of the standalone driver helper and its JVM (0 otherwise). The Spark
  cluster's own JVMs (master, worker, executors, Connect server) are not counted.

The dataset (``--spark-rows`` rows, default 1,000,000; 100,000 with --quick, in 8
Parquet files of ``(id, word)``) is generated once under /tmp/bittern-bench/."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import psutil

from .common import ROOT, VENV_PY, WORK

TOPOLOGY = os.path.join(ROOT, "scripts", "bench_topologies", "spark_rows.py")
SPARK_SH = os.path.join(ROOT, "scripts", "spark.sh")
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


def run_loop(data, rows, timeout):
    r = subprocess.run([VENV_PY, "-c", LOOP, data], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        return {"row": "pyspark-loop", "ok": False, "problems": r.stderr[-500:]}
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    ok = doc["rows"] == rows
    return {"row": "pyspark-loop", "ok": ok, "rows": doc["rows"], "rows_per_s": doc["rows"] / doc["stream_s"],
            "jvm_start_s": doc["jvm_start_s"], "wall_s": doc["jvm_start_s"] + doc["stream_s"],
            "problems": None if ok else f"read {doc['rows']} of {rows} rows"}


STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) "


def log_times(text, pattern):
    """(epoch seconds of the line, first group) for each line matching ``pattern``."""
    out = []
    for m in re.finditer(STAMP + r".*?" + pattern, text, re.M):
        t = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
        out.append((t, m.group(3)))
    return out


def read_procs(home, name):
    try:
        with open(os.path.join(home, "state", "processes", f"{name}.json")) as f:
            return json.load(f).get("procs", {})
    except (OSError, ValueError):
        return {}


def tree_rss(pid):
    try:
        p = psutil.Process(pid)
        return p.memory_info().rss + sum(k.memory_info().rss for k in p.children(recursive=True))
    except psutil.Error:
        return 0


def run_spout(data, rows, par, home, timeout, mode, master, confs):
    env = dict(os.environ, BITTERN_HOME=home, BENCH_SPARK_PAR=str(par), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                    if p]))
    name = f"bench-spark-{mode}-p{par}"
    row = f"{mode}-p{par}"
    logs = os.path.join(home, "logs", name)
    shutil.rmtree(logs, ignore_errors=True)
    cmd = [VENV_PY, "-m", "bittern", "run", TOPOLOGY, "--name", name, "--until-done", "--json",
           "--duration", str(timeout), "--config", f"spout.spark.path={data}",
           "--config", f"spout.spark.master={master}"] + sum((["--config", c] for c in confs), [])
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    spout_peak = helper_peak = 0
    helper = None
    if mode == "standalone":
        from bittern.spark.cluster import HelperDir
        helper = HelperDir(name, master, home=home)
    import threading
    out = {}
    reader = threading.Thread(target=lambda: out.update(zip(("stdout", "stderr"), p.communicate(timeout=timeout + 60))))
    reader.start()
    while reader.is_alive():
        procs = read_procs(home, name)
        spouts = {int(f[6:-4]) for f in os.listdir(logs) if f.startswith("spout-")} if os.path.isdir(logs) else set()
        total = sum(tree_rss(v["pid"]) for k, v in procs.items()
                    if k.startswith("instance-") and int(k[9:]) in spouts and v.get("pid"))
        spout_peak = max(spout_peak, total)
        if helper is not None:
            hp = helper.helper_pid()
            helper_peak = max(helper_peak, tree_rss(hp) if hp else 0)
        reader.join(0.5)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        return {"row": row, "ok": False, "problems": out.get("stderr", "")[-500:]}
    counted = sum(json.loads(ln[ln.index("{"):])["rows"] for ln in out["stdout"].splitlines() if '"rows"' in ln)
    starts, ends = [], []
    for log in glob.glob(os.path.join(logs, "spout-*.log")):
        text = open(log, errors="replace").read()
        starts += log_times(text, r"Spark session of task \d+ started in ([\d.]+)s")
        ends += log_times(text, r"emitted all (\d+) rows of its")
    span = max(t for t, _ in ends) - min(t for t, _ in starts) if starts and len(ends) == par else None
    ok = counted == rows
    return {"row": row, "ok": ok, "rows": counted, "session_s": max(float(x) for _, x in starts) if starts else None,
            "rows_per_s": counted / span if span else None, "wall_s": wall,
            "spout_rss_mb": spout_peak / 2**20, "helper_rss_mb": helper_peak / 2**20,
            "problems": None if ok else f"counted {counted} of {rows} rows"}


def start_cluster():
    """scripts/spark.sh on free ports in a temp dir: (dir, master URL, Connect URL, secret file)."""
    import socket
    d = tempfile.mkdtemp(prefix="spark-", dir=WORK)
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    r = subprocess.run([SPARK_SH, "start", d, *map(str, ports)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        subprocess.run([SPARK_SH, "stop", d], capture_output=True, timeout=120)
        raise SystemExit(f"bench --spark: scripts/spark.sh start failed: {r.stderr.strip()[-500:]}")
    urls = dict(line.split("=", 1) for line in r.stdout.split())
    return d, urls["SPARK_MASTER_URL"], urls["SPARK_CONNECT_URL"], urls["SPARK_SECRET_FILE"]


ROWS = ["pyspark-loop"] + [f"{m}-p{n}" for m in ("local1", "standalone", "connect") for n in (1, 4)]


def main(a):
    rows = a.spark_rows or (100_000 if a.quick else 1_000_000)
    data = dataset(rows)
    home = os.path.join(WORK, "spark-home")
    os.makedirs(home, exist_ok=True)
    cdir, master, connect, secret = start_cluster()
    masters = {"local1": "local[1]", "standalone": master, "connect": connect}
    confs = [f"spout.spark.secret.file={secret}", "spout.spark.driver.linger.seconds=2"]
    recs = []
    try:
        for run in range(a.runs):
            for item in ROWS:
                if item == "pyspark-loop":
                    rec = run_loop(data, rows, a.timeout)
                else:
                    mode, par = item.rsplit("-p", 1)
                    rec = run_spout(data, rows, int(par), home, a.timeout, mode, masters[mode], confs)
                rec["run"] = run
                recs.append(rec)
                print(f"[bench --spark] run {run + 1}/{a.runs} {json.dumps(rec)}", file=sys.stderr, flush=True)
    finally:
        subprocess.run([SPARK_SH, "stop", cdir], capture_output=True, timeout=120)
        shutil.rmtree(cdir, ignore_errors=True)
    print(f"\nParquet -> Python rows: {rows} rows in 8 files ({data}); median of {a.runs} run(s)\n")
    print(f"{'row':16s} {'ok':>3s} {'rows/s':>10s} {'session s':>10s} {'wall s':>8s} {'spout RSS MB':>13s} "
          f"{'helper RSS MB':>14s}")
    for name in ROWS:
        mine = [r for r in recs if r["row"] == name]

        def med(key):
            vals = sorted(r[key] for r in mine if r.get(key) is not None)
            return vals[len(vals) // 2] if vals else None
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        print(f"{name:16s} {'yes' if all(r.get('ok') for r in mine) else 'NO':>3s} {fmt(med('rows_per_s'), ',.0f'):>10s} "
              f"{fmt(med('session_s') or med('jvm_start_s'), '.1f'):>10s} {fmt(med('wall_s'), '.1f'):>8s} "
              f"{fmt(med('spout_rss_mb'), ',.0f'):>13s} {fmt(med('helper_rss_mb'), ',.0f'):>14s}")
    print("\nrows/s = rows counted / (last task's last row - first task's session up); session s = the slowest "
          "task's Spark session start\n(a JVM in local1; the driver helper's start + connect in standalone; a "
          "client connect in connect). spout RSS: peak of the sum over\nthe spout task processes and their "
          "children; helper RSS: the standalone driver helper + its driver JVM. Cluster JVMs not counted.")
    return 0 if all(r.get("ok") for r in recs) else 1
