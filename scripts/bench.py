#!/usr/bin/env python3
"""Bittern's benchmark: the standard word-count workload, and its peers beside it.

    .venv/bin/python scripts/bench.py                    # the default matrix, 3 runs
    .venv/bin/python scripts/bench.py --peers            # ... with the peers in the same run
    .venv/bin/python scripts/bench.py --quick --only amo-111    # smoke test (1 run, small N)

The workload (../shared/bench/wc_common.py): sentence i is SENTENCES[i % 20]
(5-12 words), split into words, counted per word (fields grouping); the final
counts are checked against the expected counts (the ``ok`` column).

Rows (pick with ``--only``, comma-separated, a prefix matches: ``amo``, ``bittern``...):

* ``amo-111``, ``alo-111``, ``amo-122``, ``alo-122``: Bittern word count
  (scripts/bench_topologies/word_count.py) at most / at least once, parallelism
  spout-split-count 1-1-1 in one container or 1-2-2 in two. Each run is a
  throughput run (N sentences as fast as possible: sentences/s, words/s, startup,
  peak RSS of the whole process tree) followed by a latency run at half the rate
  just measured (p50/p99 end-to-end latency: spout emit -> count bolt).
* ``eo-111``: the same word count exactly once (``EFFECTIVELY_ONCE``, a checkpoint
  every second: ``topology.stateful.checkpoint.interval.seconds=1``), 1-1-1 in one
  container; the spout's position and the counts (keyed) are checkpointed state
  (``BENCH_STATEFUL=1``), and the counts go out through a transactional ``FileSink``
  (a fourth component, ``sink``: at every checkpoint the count bolt emits the counts
  that changed, committed when the checkpoint is complete; ``BENCH_SINK_DIR``). The
  run is bounded (``--until-done`` waits until the checkpoint after the spout's last
  emit is committed at the sink); then the committed files are checked: every word's
  largest committed count must be its expected count, each word's counts must
  increase once per checkpoint, nothing may be left uncommitted; otherwise the run
  fails (the row's ok column, "failed runs", exit status 1). words/s still ends at
  the last word counted (as before the sink); the "exactly-once output" table adds
  the time to the committed end. Compared with ``alo-111`` (target EO / ALO >= 0.75).
* ``ckpt-1m`` (a row group, scripts/benchkit/groups.py): checkpoint bytes and time with
  ``--ckpt-keys`` (1,000,000) keys in keyed state and 0.1 % / 1 % / 10 % changed per
  interval, through the instance's own ``Checkpointing`` (scripts/benchkit/ckpt.py,
  run as ``scripts/ckpt_measure.py --json`` in a process of its own): full-snapshot
  bytes, delta bytes and share, the loop's pause (median, max), the writer's write
  time, and the longest gap of a busy loop while a compaction runs. Targets: with 1 %
  changed a checkpoint writes <= 5 % of the full snapshot's bytes, and the longest
  processing pause at a checkpoint is <= 10 ms.
* ``disk-wc`` (a row group, scripts/benchkit/disk.py): ``eo-111`` with a count bolt that
  keeps its counts in ``state.keyed`` directly, a get and a put per word
  (``BENCH_KEYED_DIRECT=1``), run with ``bittern.state.backend=memory`` and with
  ``disk`` one after the other in every run (records ``disk-wc-memory``,
  ``disk-wc-disk``): words/s of each, their ratio per run (target disk / memory >=
  0.5), the count instance's peak RSS; the committed output is checked as ``eo-111``'s.
* ``disk-10m`` (a row group, scripts/benchkit/disk.py): a keyed count over
  ``--disk-keys`` (10,000,000) distinct keys on the disk backend
  (scripts/bench_topologies/keyed_count.py: exactly once, the spout emits 0..N-1 once
  each, the count bolt gets and puts ``state.keyed`` per tuple; bounded): keys/s, the
  count instance's peak RSS over the whole run (target <= 300 MB) and its RSS over
  time; fails unless the bolt saw N tuples, inserted N keys and a sample of keys reads
  back as 1. ~40-60k keys/s on 2 cores: a few minutes per run.
* ``ml-json-111``, ``ml-msgpack-111``: at-most-once 1-1-1 word count whose split bolt
  is a multilang component written with pystorm (streamparse's runtime, from PyPI in
  a virtualenv under /tmp/bittern-bench/), speaking JSON or msgpack; compared with
  ``amo-111`` (native split).
* ``win-111``: the windowed word count (scripts/bench_topologies/windowed_word_count.py):
  sentence i has event time ``wc_common.event_time(i)`` (10,000 sentences per event
  second, every 7th 0.25 s out of order), the spout declares ``EventTime("ts",
  lag=0.5)``, the split bolt emits [ts, word], the count bolt is a ``CountWindowBolt``
  (tumbling 1 s, fields grouping on "word"): counts per (window, word), checked exactly
  against ``wc_common.expected_window_counts(n)``. At most once 1-1-1; words/s from the
  first sentence emitted to the last window result emitted; compared with ``amo-111``
  (target >= 0.7) and with Bytewax's windowed word count (``bytewax-window``, target
  >= 1). Its latency run (half the rate) measures the *window latency*: the last
  result of a window emitted - the spout emitting that window's last tuple (p50/p99
  over the windows), and the *watermark delay*: - the spout's watermark passing the
  window's end (the topology's docstring says how the processes' wall clocks are
  correlated).
* ``win-slide-100k``: ``--win-keys`` (100,000) distinct keys (tuple i is key
  ``k<i % K>``, same event times), ``--win-n`` tuples, counted per key in tumbling
  1 s windows (record ``win-tumble-100k``) and in sliding 10 s windows every 1 s
  (``win-slide-100k``): the peak RSS of the window bolt's process (target: sliding
  <= 2x tumbling) and the windows it held open; results checked by digest.
* ``healthmgr`` (a row group, scripts/benchkit/healthmgr.py): auto-scaling by the health
  manager on the topologies of tests/test_healthmgr.py, records ``hm-up`` (a pipeline of
  two bolts short of tasks at 400/s: scale actions and seconds until a scale up is judged
  HELPED, final / needed tasks), ``hm-down`` (the rate then at a quarter: the same for the
  scale down) and ``hm-skew`` (a hot key: seconds to the DATA_SKEW report, actions taken:
  0 wanted); every id emitted acked and at the sink or the run fails. ~2 min per run.
* ``idle-latency``: one sentence every 200 ms; the median time a word takes to
  cross the topology.
* ``idle-cpu``: a topology whose spout emits nothing, for ~10 s: CPU % and RSS of
  every process (the bolts there are trivial bolts).
* ``--spark`` (instead of the above): Parquet rows/s through a SparkSpout next to a
  plain PySpark ``toLocalIterator`` loop (scripts/benchkit/spark.py).
* ``--sinks`` (instead of the above): ParquetSink rows/s (plain and partitioned by day)
  next to FileSink, each sink alone through the exactly-once protocol (scripts/benchkit/sinks.py).
* with ``--peers``: ``plain`` (one Python process, the floor), ``zmq`` (three
  pyzmq processes, msgpack batches of 100: the transport ceiling) and ``bytewax``
  (stateful_map), and ``bytewax-window`` (p3_bytewax_window.py: the windowed word
  count, same N as ``win-111``), run from ``--peers-dir`` in their own virtualenvs,
  created on demand under /tmp/bittern-bench/.

Bittern runs use ``bittern run scripts/bench_topologies/word_count.py --until-done``
with the engine of this tree (PYTHONPATH), engine defaults unless ``--config k=v``
says otherwise, and a private BITTERN_HOME (``--home``, default
/tmp/bittern-bench/home); every process a run starts stops with it (a run that
overstays ``--timeout`` is killed with its whole process tree). ``--out FILE``
appends one JSON line per run (raw figures, per-process peak RSS and CPU).

Every figure is the median [min-max] over ``--runs`` runs; runs of all rows are
interleaved (run 1 of every row, then run 2...), and the ratios are computed
per run, between rows measured in that same run. Peak RSS is sampled every
50 ms and summed over every live process of the tree (``bittern run`` itself,
the supervisor, topology master, stream managers and instances), as the shared
harness (../shared/bench/bench.py) does; startup = first sentence emitted -
launch. ``foreign CPU%`` is the CPU used by every other process of the machine
during the run (% of one core): a high value means the run was contaminated.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")

try:
    import psutil  # noqa: F401 - only to check it is importable (see below)
except ImportError:  # run with a python that lacks psutil: use the project's virtualenv
    if os.path.exists(VENV_PY) and os.path.realpath(sys.executable) != os.path.realpath(VENV_PY):
        os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])
    raise

from benchkit.common import BITTERN_ROWS, PEER_ROWS, PROBES, WINDOW_ROWS, WORK
from benchkit.groups import ROW_GROUPS
from benchkit.peers import Peers
from benchkit.report import Report
from benchkit.runner import BitternRunner
from benchkit.windowed import WindowRunner
from benchkit.workload import Workload


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------

def select(only, peers):
    ours = list(BITTERN_ROWS) + list(WINDOW_ROWS) + list(ROW_GROUPS) + PROBES
    names = (PEER_ROWS if peers else []) + ours
    if not only:
        return names
    want = [w.strip() for w in only.split(",") if w.strip()]
    known = ours + PEER_ROWS + ["bittern", "peers"]
    for w in want:
        if not any(k == w or k.startswith(w) for k in known):
            raise SystemExit(f"error: --only {w!r} matches no row (rows: {', '.join(known)})")
    out = []
    for k in PEER_ROWS + ours:
        is_peer = k in PEER_ROWS
        hit = any(k == w or k.startswith(w) for w in want) or ("bittern" in want and not is_peer) \
            or ("peers" in want and is_peer)
        if hit:  # naming a peer row (or "peers") runs it, --peers or not
            out.append(k)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=None, help="runs per row (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 1 run, small N, short windows")
    ap.add_argument("--only", default="", help="comma-separated rows (prefixes match): "
                    + ", ".join(list(BITTERN_ROWS) + list(WINDOW_ROWS) + list(ROW_GROUPS) + PROBES + PEER_ROWS)
                    + ", bittern, peers")
    ap.add_argument("--peers", action="store_true", help="also run the peers (plain, zmq, bytewax)")
    ap.add_argument("--peers-dir", default=os.path.normpath(os.path.join(ROOT, "..", "shared", "bench")),
                    help="where the peers' scripts are (default: ../shared/bench beside the repo)")
    ap.add_argument("-n", type=int, default=None,
                    help="sentences per Bittern throughput run (default 300000; 20000 with --quick)")
    ap.add_argument("--win-keys", type=int, default=None,
                    help="distinct keys of the win-slide-100k rows (default 100000; 2000 with --quick)")
    ap.add_argument("--win-n", type=int, default=None,
                    help="tuples per win-slide-100k run (default 150000: 15 event seconds, 5 past the point where "
                         "every key has its 10 sliding windows open; 20000 with --quick)")
    ap.add_argument("--lat-secs", type=float, default=None,
                    help="length of a latency run at half rate (default 4; 1.5 with --quick)")
    ap.add_argument("--ckpt-keys", type=int, default=None,
                    help="keys in keyed state of the ckpt-1m rows (default 1000000; 100000 with --quick)")
    ap.add_argument("--ckpt-rounds", type=int, default=None,
                    help="checkpoints per changed fraction of the ckpt-1m rows (default 5; 2 with --quick)")
    ap.add_argument("--disk-keys", type=int, default=None,
                    help="distinct keys of the disk-10m rows (default 10000000; 200000 with --quick)")
    ap.add_argument("--idle-secs", type=float, default=None,
                    help="idle-cpu measurement window (default 8; 3 with --quick)")
    ap.add_argument("--config", action="append", default=[], metavar="K=V",
                    help="extra config for every Bittern word-count run (e.g. topology.max.spout.pending=5000)")
    ap.add_argument("--home", default=os.path.join(WORK, "home"), help="BITTERN_HOME for the runs")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a run is killed")
    ap.add_argument("--out", help="append every raw record to this file (JSON lines)")
    ap.add_argument("--spark", action="store_true",
                    help="instead: rows/s and RSS from Parquet through a SparkSpout (local[1], standalone, "
                         "Spark Connect; par 1 and 4) next to a plain "
                         "PySpark toLocalIterator loop (scripts/benchkit/spark.py)")
    ap.add_argument("--spark-rows", type=int, default=None,
                    help="rows of the --spark dataset (default 1000000; 100000 with --quick)")
    ap.add_argument("--sinks", action="store_true",
                    help="instead: rows/s of ParquetSink next to FileSink, the sinks alone (scripts/benchkit/sinks.py)")
    ap.add_argument("--sink-rows", type=int, default=None,
                    help="rows per --sinks run (default 300000; 50000 with --quick)")
    ap.add_argument("--sink-ckpt-rows", type=int, default=None,
                    help="rows per checkpoint in the --sinks runs (default: a tenth of --sink-rows)")
    ap.add_argument("--webui", action="store_true",
                    help="instead: the web UI's page render times with a 100-task topology (scripts/benchkit/webui.py)")
    ap.add_argument("--webui-rate", type=float, default=400.0,
                    help="with --webui: the topology's tuples/s in all (0: as fast as it goes)")
    a = ap.parse_args(argv)
    a.runs = a.runs or (1 if a.quick else 3)
    if a.webui:
        from benchkit import webui
        return webui.main(a)
    if a.sinks:
        from benchkit import sinks
        return sinks.main(a)
    if a.spark:
        from benchkit import spark
        os.makedirs(WORK, exist_ok=True)
        return spark.main(a)
    a.n = a.n or (20_000 if a.quick else 300_000)
    a.win_keys = a.win_keys or (2_000 if a.quick else 100_000)
    a.win_n = a.win_n or (20_000 if a.quick else 150_000)
    a.lat_secs = a.lat_secs or (1.5 if a.quick else 4.0)
    a.idle_secs = a.idle_secs or (3.0 if a.quick else 8.0)
    a.ckpt_keys = a.ckpt_keys or (100_000 if a.quick else 1_000_000)
    a.ckpt_rounds = a.ckpt_rounds or (2 if a.quick else 5)
    if a.disk_keys is None:
        a.disk_keys = 200_000 if a.quick else 10_000_000
    elif a.disk_keys < 1:
        raise SystemExit(f"error: --disk-keys must be a whole number >= 1, got {a.disk_keys}")
    a.peers_dir = os.path.abspath(a.peers_dir)
    items = select(a.only, a.peers)
    os.makedirs(WORK, exist_ok=True)

    peers = Peers(a)
    workload = Workload(a.peers_dir if os.path.isdir(a.peers_dir) else None)
    notes = []
    if workload.wc is None:
        notes.append(f"{a.peers_dir}/wc_common.py not found: expected counts computed from the topology's "
                     "own SENTENCES")
    peer_items = [k for k in items if k in PEER_ROWS]
    if peer_items and not peers.available():
        items = [k for k in items if k not in PEER_ROWS]
        peer_items = []
    bt = BitternRunner(a, workload)
    win = WindowRunner(bt, workload, a)
    groups = {k: ROW_GROUPS[k](a, bt, workload) for k in items if k in ROW_GROUPS}
    records = []
    outf = open(a.out, "a") if a.out else None
    t_start = time.time()

    def keep(rec, kind, run):
        rec["kind"], rec["run"] = kind, run
        rec["time"] = time.time()
        records.append(rec)
        brief = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in rec.items()
                 if k in ("row", "ok", "sent_per_s", "words_per_s", "startup_s", "peak_rss_mb", "p50_ms",
                          "p99_ms", "wm_p99_ms", "win_bolt_rss_mb", "open_windows_peak", "foreign_cpu_pct",
                          "sink_exact", "commit_after_s", "share_1pct", "pause_max_1pct_ms",
                          "compact_gap_max_ms", "backend", "count_rss_mb", "keys_per_s", "actions",
                          "converge_s", "final", "over", "problems")}
        print(f"[bench] run {run + 1}/{a.runs} {kind:10s} {json.dumps(brief)}", file=sys.stderr, flush=True)
        if outf:
            slim = {k: v for k, v in rec.items() if k not in ("counts",)}
            outf.write(json.dumps(slim) + "\n")
            outf.flush()

    try:
        for run in range(a.runs):
            for item in items:
                if item in BITTERN_ROWS:
                    th = bt.run_wc(item, "throughput", a.n)
                    keep(th, "throughput", run)
                    if th.get("ok") and th.get("sent_per_s"):
                        rate = th["sent_per_s"] / 2
                        n_lat = max(20, int(rate * a.lat_secs))
                        keep(bt.run_wc(item, "latency", n_lat, rate=rate), "latency", run)
                elif item in WINDOW_ROWS:
                    for row, window, keys in WINDOW_ROWS[item]:
                        n = a.win_n if keys else a.n
                        th = win.run(row, window, a.win_keys if keys else 0, "throughput", n)
                        keep(th, "throughput", run)
                        if not keys and th.get("ok") and th.get("sent_per_s"):
                            rate = th["sent_per_s"] / 2
                            n_lat = max(20, int(rate * a.lat_secs))
                            keep(win.run(row, window, 0, "latency", n_lat, rate=rate), "latency", run)
                elif item in groups:
                    for rec in groups[item].run(run):
                        keep(rec, groups[item].kind, run)
                elif item == "idle-latency":
                    keep(bt.run_wc("idle-latency", "latency", 10 if a.quick else 25, rate=5.0), "latency", run)
                elif item == "idle-cpu":
                    keep(bt.idle_cpu(settle=1.0 if a.quick else 2.0, window=a.idle_secs), "idle", run)
                elif item in PEER_ROWS:
                    for rec in peers.run(item, a.quick, n_win=a.n):
                        keep(rec, "throughput", run)
    except KeyboardInterrupt:
        notes.append("interrupted: partial results")
    finally:
        if outf:
            outf.close()
    notes = notes + peers.notes
    notes.append(f"total benchmark time {time.time() - t_start:.0f}s")
    print(Report(records, a.runs, notes, workload.source, a, groups.values()).render(), flush=True)
    bittern_ok = all(r.get("ok") for r in records if r.get("peer") == "bittern")
    return 0 if records and bittern_ok else 1


if __name__ == "__main__":
    sys.exit(main())

