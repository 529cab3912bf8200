"""Paths, rows and targets of the benchmark (scripts/bench.py), shared by its parts."""
from __future__ import annotations

import importlib.util
import os
import sys




ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")
TOPOLOGY = os.path.join(ROOT, "scripts", "bench_topologies", "word_count.py")
WIN_TOPOLOGY = os.path.join(ROOT, "scripts", "bench_topologies", "windowed_word_count.py")
DISK_TOPOLOGY = os.path.join(ROOT, "scripts", "bench_topologies", "keyed_count.py")
WORK = "/tmp/bittern-bench"
SAMPLE_EVERY = 0.05
FOREIGN_CPU_WARN = 50.0  # % of one core used by other processes during a run

PEER_VENVS = {
    "base": ["pyzmq", "msgpack", "psutil"],
    "bytewax": ["bytewax==0.21.*", "psutil"],
    "pystorm": ["pystorm==3.1.4", "msgpack"],  # the multilang rows' split bolt
}

BITTERN_ROWS = {  # key: (reliability mode, parallelism spout,split,count, containers)
    "amo-111": ("ATMOST_ONCE", "1,1,1", 1),
    "alo-111": ("ATLEAST_ONCE", "1,1,1", 1),
    "amo-122": ("ATMOST_ONCE", "1,2,2", 2),
    "alo-122": ("ATLEAST_ONCE", "1,2,2", 2),
    "eo-111": ("EFFECTIVELY_ONCE", "1,1,1", 1),
    "ml-json-111": ("ATMOST_ONCE", "1,1,1", 1),
    "ml-msgpack-111": ("ATMOST_ONCE", "1,1,1", 1),
}
ROW_SPLIT = {"ml-json-111": "json", "ml-msgpack-111": "msgpack"}  # multilang split bolt (pystorm)
ROW_CONFIG = {  # extra config of a row (before --config)
    "eo-111": {"topology.stateful.checkpoint.interval.seconds": 1},
}
# Windowed rows (scripts/bench_topologies/windowed_word_count.py, at most once 1-1-1):
# key: [(record row, BENCH_WINDOW, keys: 0 = the word count, else the --win-keys key mode)]
WINDOW_ROWS = {
    "win-111": [("win-111", "tumbling", 0)],
    "win-slide-100k": [("win-tumble-100k", "tumbling", "keys"), ("win-slide-100k", "sliding", "keys")],
}
PROBES = ["idle-latency", "idle-cpu"]
PEER_ROWS = ["plain", "zmq", "bytewax", "bytewax-window"]

# Targets of the benchmark's issue (reported, never asserted).
TARGET_VS_BYTEWAX = 1.0
TARGET_VS_ZMQ = 0.30
TARGET_ALO_OVER_AMO = 0.60
TARGET_EO_OVER_ALO = 0.75
TARGET_P99_MS = 50.0
TARGET_IDLE_CROSS_MS = 10.0
TARGET_IDLE_CPU_PCT = 1.0
TARGET_BOLT_RSS_MB = 40.0
TARGET_WC_RSS_MB = 300.0
TARGET_WIN_OVER_AMO = 0.70  # windowed word count / plain word count, at most once 1-1-1
TARGET_WIN_VS_BYTEWAX = 1.0  # ... / Bytewax's windowed word count
TARGET_SLIDE_OVER_TUMBLE_RSS = 2.0  # window bolt peak RSS, sliding 10 s / 1 s vs tumbling, 100k keys
TARGET_CKPT_SHARE_PCT = 5.0  # ckpt-1m: with 1% of 1M keys changed, a checkpoint's bytes / the full snapshot's
TARGET_CKPT_PAUSE_MS = 10.0  # ckpt-1m: the longest processing pause at a checkpoint
# disk-10m / disk-wc (benchkit/disk.py): the disk keyed-state backend with 10M keys keeps
# the count instance's RSS under this, and runs at this share of the memory backend's
# words/s on a state that fits in memory
TARGET_DISK_RSS_MB = 300.0
TARGET_DISK_OVER_MEMORY = 0.5


def bittern_python():
    """The interpreter that runs ``bittern``: this one if it can import bittern."""
    if importlib.util.find_spec("bittern") is not None:
        return sys.executable
    return VENV_PY


