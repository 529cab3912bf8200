"""``scripts/bench.py --sinks``: rows/s of ParquetSink next to FileSink, the sinks alone.

Each measurement is a fresh process (``.venv/bin/python``, this tree's engine) that drives
one sink through the exactly-once protocol as a sink task does: ``write`` for every row,
then ``pre_commit(n)`` + ``commit(n)`` every ``--sink-ckpt-rows`` rows (a checkpoint; the
file is fsync'd, renamed, the directory fsync'd), over ``--sink-rows`` rows of
``[id int, day str (7 values), user str (50 values), amount int]`` (the rows of
topologies/spark_pipeline.py, built before the clock starts). Rows:

* ``file``: ``FileSink`` (JSON lines);
* ``parquet``: ``ParquetSink`` (snappy, row groups of 65,536 rows);
* ``parquet-by-day``: ``ParquetSink`` partitioned by ``day`` (a file per day and checkpoint).

Each run checks what was committed (lines, or Parquet rows read back) equals the rows
written. The table gives medians over the runs: rows/s (wall) and rows per CPU second (the
process's own CPU time: steadier when other work shares the machine), each with its ratio
to ``file`` in the same run, bytes on disk, files, and the process's peak RSS."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from .common import ROOT, VENV_PY, WORK

ROWS = ("file", "parquet", "parquet-by-day")

MEASURE = r"""
import json, os, resource, sys, time
from types import SimpleNamespace
from bittern.sinks import FileSink, ParquetSink
kind, n, per_ck, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [[i, f"2026-11-{20 + i % 7:02d}", f"user{(i * 7919) % 50:02d}", (i * 37) % 1000 + 1] for i in range(n)]
fields = ["id", "day", "user", "amount"]
if kind == "file":
    sink = FileSink(d, "part")
else:
    sink = ParquetSink(d, "part", fields=fields, partition_by=["day"] if kind == "parquet-by-day" else ())
sink.open(SimpleNamespace(task_id=1, component="sink", topology_name="bench"), {})
sink.recover([], None)
t0, c0 = time.perf_counter(), time.process_time()
ck, write = 1, sink.write
for start in range(0, n, per_ck):
    for r in rows[start:start + per_ck]:
        write(ck, r)
    sink.pre_commit(ck)
    sink.commit(ck)
    ck += 1
secs, cpu = time.perf_counter() - t0, time.process_time() - c0
sink.close()
files, size, got = 0, 0, 0
for root, _, names in os.walk(d):
    for f in names:
        p = os.path.join(root, f)
        files += 1
        size += os.path.getsize(p)
        if kind == "file":
            with open(p) as fh:
                got += sum(1 for _ in fh)
        else:
            import pyarrow.parquet as pq
            got += pq.ParquetFile(p).metadata.num_rows
print(json.dumps({"rows": n, "seconds": secs, "cpu": cpu, "files": files, "bytes": size, "committed": got,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(kind, rows, per_ck, timeout):
    d = tempfile.mkdtemp(prefix=f"sink-{kind}-", dir=WORK)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "")
                                                                  .split(os.pathsep) if p]))
    try:
        r = subprocess.run([VENV_PY, "-c", MEASURE, kind, str(rows), str(per_ck), os.path.join(d, "out")],
                           capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if r.returncode != 0:
        return {"row": kind, "ok": False, "problems": r.stderr.strip().splitlines()[-1:] or ["failed"]}
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    ok = doc["committed"] == rows
    return {"row": kind, "ok": ok, "rows_per_s": rows / doc["seconds"], "rows_per_cpu_s": rows / doc["cpu"],
            "seconds": doc["seconds"],
            "files": doc["files"], "mb": doc["bytes"] / 1e6, "rss_mb": doc["rss_mb"],
            "problems": None if ok else f"committed {doc['committed']} of {rows} rows"}


def median(vals):
    vals = sorted(v for v in vals if v is not None)
    return vals[len(vals) // 2] if vals else None


def main(a):
    rows = a.sink_rows or (50_000 if a.quick else 300_000)
    per_ck = a.sink_ckpt_rows or max(1, rows // 10)
    os.makedirs(WORK, exist_ok=True)
    recs = []
    for run in range(a.runs):
        base = None
        for kind in ROWS:
            rec = measure(kind, rows, per_ck, a.timeout)
            rec["run"] = run
            if kind == "file":
                base = (rec["rows_per_s"], rec["rows_per_cpu_s"]) if rec.get("ok") else None
            rec["vs_file"] = rec["rows_per_s"] / base[0] if base and rec.get("rows_per_s") else None
            rec["cpu_vs_file"] = rec["rows_per_cpu_s"] / base[1] if base and rec.get("rows_per_cpu_s") else None
            recs.append(rec)
            print(f"[bench --sinks] run {run + 1}/{a.runs} {json.dumps(rec)}", file=sys.stderr, flush=True)
    print(f"\nSinks alone, exactly-once protocol: {rows} rows of [id, day, user, amount], a checkpoint "
          f"(pre_commit + commit) every {per_ck} rows; median of {a.runs} run(s)\n")
    print(f"{'row':16s} {'ok':>3s} {'rows/s':>10s} {'vs file':>8s} {'rows/CPU-s':>11s} {'vs file':>8s} "
          f"{'MB on disk':>11s} {'files':>6s} {'peak RSS MB':>12s}")
    for kind in ROWS:
        mine = [r for r in recs if r["row"] == kind]

        def fmt(key, f):
            v = median(r.get(key) for r in mine)
            return "-" if v is None else format(v, f)
        print(f"{kind:16s} {'yes' if all(r.get('ok') for r in mine) else 'NO':>3s} {fmt('rows_per_s', ',.0f'):>10s} "
              f"{fmt('vs_file', '.2f'):>8s} {fmt('rows_per_cpu_s', ',.0f'):>11s} {fmt('cpu_vs_file', '.2f'):>8s} "
              f"{fmt('mb', '.1f'):>11s} {fmt('files', '.0f'):>6s} "
              f"{fmt('rss_mb', '.0f'):>12s}")
    print("\nrows/s: rows over the wall time from the first write to the last commit (fsyncs included); "
          "rows/CPU-s: over the process's CPU time (steadier on a loaded machine); 'vs file': the median "
          "of each run's ratio to FileSink.")
    return 0 if all(r.get("ok") for r in recs) else 1
