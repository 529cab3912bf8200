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
  log lines' timestamps; the tasks' "emitted all N rows" must add up to the rows too);
  ``session s`` = the slowest task's session start; ``wall`` = the whole run.
* RSS, peaks of sums sampled every 0.25 s: ``task`` = the largest spout task process
  (with its JVM in local1); ``spouts`` = all spout tasks; ``helper`` = the standalone
  driver helper and its driver JVM (a child of the task that started it, counted
  only here); ``total`` = spouts + helper; ``topology`` = every process of the run
  (the ``bittern run`` CLI, supervisor, stream manager, bolt, spouts, helper). The
  pyspark-loop row: its Python process + JVM. The Spark cluster's own JVMs (master,
  worker, executors, Connect server) are not counted. The targets (issue 21) are
  printed after the table.

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
    p = subprocess.Popen([VENV_PY, "-c", LOOP, data], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import threading
    out = {}
    reader = threading.Thread(target=lambda: out.update(zip(("stdout", "stderr"), p.communicate(timeout=timeout))))
    reader.start()
    peak = 0
    while reader.is_alive():
        peak = max(peak, rss_of(tree(p.pid)))
        reader.join(0.25)
    if p.returncode != 0:
        return {"row": "pyspark-loop", "ok": False, "problems": out.get("stderr", "")[-500:]}
    doc = json.loads(out["stdout"].strip().splitlines()[-1])
    ok = doc["rows"] == rows
    return {"row": "pyspark-loop", "ok": ok, "rows": doc["rows"], "rows_per_s": doc["rows"] / doc["stream_s"],
            "jvm_start_s": doc["jvm_start_s"], "wall_s": doc["jvm_start_s"] + doc["stream_s"],
            "task_rss_mb": peak / 2**20, "spout_rss_mb": peak / 2**20, "total_rss_mb": peak / 2**20,
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


def tree(pid):
    """``pid`` and all its descendants (psutil Processes); [] if it is gone."""
    try:
        p = psutil.Process(pid)
        return [p] + p.children(recursive=True)
    except psutil.Error:
        return []


def rss_of(procs, skip=()):
    """The sum of the RSS of ``procs``, leaving out the pids in ``skip``."""
    total = 0
    for q in procs:
        if q.pid in skip:
            continue
        try:
            total += q.memory_info().rss
        except psutil.Error:
            pass
    return total


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
    spout_peak = helper_peak = task_peak = total_peak = topo_peak = 0
    helper = None
    if mode == "standalone":
        from bittern.spark.cluster import HelperDir
        helper = HelperDir(name, master, home=home)
    import threading
    out = {}
    reader = threading.Thread(target=lambda: out.update(zip(("stdout", "stderr"), p.communicate(timeout=timeout + 60))))
    reader.start()
    while reader.is_alive():
        # the standalone driver helper is started by a spout task (its own session, but
        # the task's child): its tree is counted as the helper's, never as the task's
        hp = helper.helper_pid() if helper is not None else None
        helper_procs = tree(hp) if hp else []
        skip = {q.pid for q in helper_procs}
        procs = read_procs(home, name)
        spouts = {int(f[6:-4]) for f in os.listdir(logs) if f.startswith("spout-")} if os.path.isdir(logs) else set()
        tasks = [rss_of(tree(v["pid"]), skip) for k, v in procs.items()
                 if k.startswith("instance-") and int(k[9:]) in spouts and v.get("pid")]
        hrss = rss_of(helper_procs)
        spout_peak = max(spout_peak, sum(tasks))
        task_peak = max([task_peak] + tasks)
        helper_peak = max(helper_peak, hrss)
        total_peak = max(total_peak, sum(tasks) + hrss)
        topo_peak = max(topo_peak, rss_of(tree(p.pid), skip) + hrss)
        reader.join(0.25)
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
    emitted = sum(int(x) for _, x in ends)
    ok = counted == rows and emitted == rows and span is not None
    return {"row": row, "ok": ok, "rows": counted, "session_s": max(float(x) for _, x in starts) if starts else None,
            "rows_per_s": counted / span if span else None, "wall_s": wall,
            "task_rss_mb": task_peak / 2**20, "spout_rss_mb": spout_peak / 2**20,
            "helper_rss_mb": helper_peak / 2**20, "total_rss_mb": total_peak / 2**20,
            "topology_rss_mb": topo_peak / 2**20, "emitted": emitted,
            "problems": None if ok else f"counted {counted}, the tasks emitted {emitted} of {rows} rows"
                                          f"{'' if span else ' (no span: a task logged no session or no end)'}"}


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
    if a.out:
        out = open(a.out, "a", encoding="utf-8")
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
                if a.out:
                    out.write(json.dumps(dict(rec, bench="spark", data_rows=rows)) + "\n")
                    out.flush()
    finally:
        subprocess.run([SPARK_SH, "stop", cdir], capture_output=True, timeout=120)
        shutil.rmtree(cdir, ignore_errors=True)
    print(f"\nParquet -> Python rows: {rows} rows in 8 files ({data}); median of {a.runs} run(s)\n")
    cols = [("rows_per_s", "rows/s", ",.0f", 9), ("session_s", "session s", ".1f", 9), ("wall_s", "wall s", ".1f", 7),
            ("task_rss_mb", "task RSS", ",.0f", 8), ("spout_rss_mb", "spouts RSS", ",.0f", 10),
            ("helper_rss_mb", "helper RSS", ",.0f", 10), ("total_rss_mb", "total RSS", ",.0f", 9),
            ("topology_rss_mb", "topology RSS", ",.0f", 12)]
    print(f"{'row':16s} {'ok':>3s} " + " ".join(f"{h:>{w}s}" for _, h, _, w in cols))
    medians = {}
    for name in ROWS:
        mine = [r for r in recs if r["row"] == name]

        def med(key):
            vals = sorted(r[key] for r in mine if r.get(key) is not None)
            return vals[len(vals) // 2] if vals else None
        m = medians[name] = {k: med(k) for k, _, _, _ in cols}
        if m["session_s"] is None:
            m["session_s"] = med("jvm_start_s")
        print(f"{name:16s} {'yes' if mine and all(r.get('ok') for r in mine) else 'NO':>3s} "
              + " ".join(f"{'-' if m[k] is None else format(m[k], f):>{w}s}" for k, _, f, w in cols))
    print("\nrows/s = rows counted / (last task's last row - first task's session up); session s = the slowest "
          "task's Spark session start\n(a JVM in local1; the driver helper's start + connect in standalone; a "
          "client connect in connect). RSS in MB, peaks over the run (sampled\nevery 0.25 s): task = the largest "
          "spout task process (+ its JVM in local1); spouts = the sum over the spout tasks; helper = the\n"
          "standalone driver helper + its driver JVM; total = spouts + helper; topology = every process of the "
          "run (CLI, supervisor,\nstream manager, bolt, spouts, helper). The cluster's JVMs (master, worker, "
          "executors, Connect server) are not counted.")
    c1, c4, l4 = medians.get("connect-p1", {}), medians.get("connect-p4", {}), medians.get("local1-p4", {})
    if c1.get("task_rss_mb") is not None and c4.get("task_rss_mb") is not None:
        task = max(c1["task_rss_mb"], c4["task_rss_mb"])
        print(f"\ntarget: a Spark Connect spout task <= 150 MB: {task:.0f} MB ({'met' if task <= 150 else 'NOT met'})")
    if c4.get("total_rss_mb") and l4.get("total_rss_mb"):
        for key, what in (("total_rss_mb", "spout tasks"), ("topology_rss_mb", "whole topology")):
            if c4.get(key) and l4.get(key):
                ratio = c4[key] / l4[key]
                print(f"target: connect-p4 <= 1/3 of local1-p4 ({what}): {c4[key]:.0f} / {l4[key]:.0f} MB = "
                      f"{ratio:.2f} ({'met' if ratio <= 1 / 3 else 'NOT met'})")
    return 0 if all(r.get("ok") for r in recs) else 1
