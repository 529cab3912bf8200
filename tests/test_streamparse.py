"""streamparse projects run unchanged by ``bittern run`` / ``bittern submit``, with the
real streamparse and pystorm from PyPI in a throwaway venv (every process of the
topology runs in it):

* the project ``sparse quickstart wordcount`` generates, its topologies/wordcount.py
  untouched, under ``bittern run --duration 3``, whose drain at the end waits for the
  inputs the multilang children still hold: with ``topology.debug``
  the multilang host logs every tuple the pystorm components emit, and the bolt's
  running counts are exactly 1..k per word (10, 20, ... for "dog", which the quickstart
  counts tenfold), each word on one task, k the number of times the spout emitted it,
  and the totals match the metrics;
* tests/topologies/streamparse_batching: a reliable pystorm spout, a BatchingBolt whose
  batches only tick tuples flush, a TicklessBatchingBolt sending its results on a
  direct stream, msgpack (which the children learn from the host): exact counts and sums;
* files Bittern cannot run (a JavaBolt, a class that does not resolve) fail with one
  line naming the component.
"""
from __future__ import annotations

import ast
import glob
import json
import os
import re
import shutil
import subprocess
import time
from collections import defaultdict

import pytest

from conftest import ROOT, Bittern, instance_log, wait_for
from foreignvenv import streamparse_python  # noqa: F401 - the streamparse venv fixture

TOPOLOGIES = os.path.join(ROOT, "tests", "topologies")
EMIT = re.compile(r"\] (\w+)\[(\d+)\]: emitting: '(\w+)' (\[.*\])$")


@pytest.fixture
def sp_bittern(home, streamparse_python):
    return Bittern(home, python=streamparse_python)


def emits(home, topology, component):
    """[(task, stream, values)] logged by the host of ``component`` (topology.debug)."""
    out = []
    for path in sorted(glob.glob(os.path.join(home, "logs", topology, f"{component}-*.log"))):
        with open(path, errors="replace") as f:
            for line in f:
                m = EMIT.search(line.rstrip("\n"))
                if m and m.group(1) == component:
                    out.append((int(m.group(2)), m.group(3), ast.literal_eval(m.group(4))))
    return out


def test_sparse_quickstart_wordcount_runs_unchanged(sp_bittern, home, streamparse_python, tmp_path):
    sparse = os.path.join(os.path.dirname(streamparse_python), "sparse")
    r = subprocess.run([sparse, "quickstart", "wordcount"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, LEIN_ROOT="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    topology = tmp_path / "wordcount" / "topologies" / "wordcount.py"
    assert "class WordCount(Topology):" in topology.read_text()

    # bittern run: 3 s, then deactivate and drain (the drain waits for the inputs the
    # multilang children still hold), kill, and the summary
    r = sp_bittern("run", topology, "--duration", 3, "--json", "--config", "topology.debug=true",
                   timeout=150, check=True)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["drained"], r.stderr
    comps = {c["component"]: c for c in summary["components"]}
    assert comps["count_bolt"]["tasks"] == 2

    spout = [v for _, s, v in emits(home, "wordcount", "word_spout") if s == "default"]
    counts = emits(home, "wordcount", "count_bolt")
    sent = defaultdict(int)
    for (word,) in spout:
        sent[word] += 1
    seen, tasks = defaultdict(list), defaultdict(set)
    for task, stream, (word, count) in counts:
        assert stream == "default"
        seen[word].append(count)
        tasks[word].add(task)
    assert set(sent) == {"dog", "cat", "zebra", "elephant"} and set(seen) == set(sent)
    for word, k in sent.items():
        step = 10 if word == "dog" else 1
        assert seen[word] == [step * i for i in range(1, k + 1)], word  # no gap, no duplicate
        assert len(tasks[word]) == 1, word  # fields grouping: one task per word
    total = sum(sent.values())
    assert comps["word_spout"]["emitted"] == total > 100
    assert comps["count_bolt"]["executed"] == comps["count_bolt"]["emitted"] == len(counts) == total
    log = instance_log(home, "wordcount", "count_bolt")
    assert "bittern.compat.streamparse -s json bolts.wordcount.WordCountBolt" in log  # config.json
    assert "json serializer" in log


def test_batching_bolts_with_ticks_and_a_direct_stream(sp_bittern, home, tmp_path):
    project = tmp_path / "streamparse_batching"
    shutil.copytree(os.path.join(TOPOLOGIES, "streamparse_batching"), project)
    # without a serializer in config.json the children speak what the host speaks
    conf = json.loads((project / "config.json").read_text())
    assert conf.pop("serializer") == "msgpack"
    (project / "config.json").write_text(json.dumps(conf))
    out = tmp_path / "out"
    out.mkdir()
    n, keys = 2000, 7
    sp_bittern("submit", project / "topologies" / "batching.py", "--config", f"numbers.out={out}",
               "--config", f"numbers.count={n}", "--config", "topology.multilang.serializer=msgpack",
               timeout=90, check=True)
    try:
        def rows(pattern):
            got = []
            for path in glob.glob(str(out / pattern)):
                with open(path) as f:
                    got += [json.loads(ln) for ln in f if ln.endswith("\n")]
            return got

        def done():
            sink = rows("sink-*.jsonl")
            return len(rows("acked-*.jsonl")) >= n and \
                sum(r[3][1] for r in sink if r[0] == "batcher") >= n and \
                sum(r[3][1] for r in sink if r[0] == "tickless") >= n

        wait_for(done, timeout=60, what="every number acked and counted by both batching bolts")
    finally:
        sp_bittern("kill", "batching", timeout=60, check=True)

    assert sorted(rows("acked-*.jsonl")) == list(range(n))  # each tree completed once
    sink = rows("sink-*.jsonl")
    want = {k: (len(range(k, n, keys)), sum(range(k, n, keys))) for k in range(keys)}
    sink_tasks = sorted(int(re.search(r"sink-(\d+)", p).group(1)) for p in glob.glob(str(out / "sink-*")))
    assert len(sink_tasks) == 2  # each sink task opened its file
    for source, stream in [("batcher", "batches"), ("tickless", "direct_batches")]:
        got = defaultdict(lambda: [0, 0])
        batches = [r for r in sink if r[0] == source]
        for _, s, _, (key, count, total) in batches:
            assert s == stream
            got[key][0] += count
            got[key][1] += total
        assert {k: tuple(v) for k, v in got.items()} == want, source
        assert len(batches) < n  # batched, not one by one
    # the direct stream went to the task the bolt chose: the sink's lowest
    assert {r[2] for r in sink if r[0] == "tickless"} == {min(sink_tasks)}
    for comp in ("numbers", "batcher", "tickless", "sink"):
        log = instance_log(home, "batching", comp)
        assert "bittern.compat.streamparse " in log and " -s " not in log  # no serializer argument ...
        assert "msgpack serializer" in log, comp  # ... the child followed the host


@pytest.mark.parametrize("name, component, message", [
    ("bad_java.py", "counter", "JavaBolt is a Java component (com.example.CountBolt)"),
    ("bad_missing.py", "ghost", "cannot resolve class 'bolts.nowhere.GhostBolt'"),
])
def test_a_file_bittern_cannot_run_fails_with_one_line(sp_bittern, name, component, message):
    path = os.path.join(TOPOLOGIES, "streamparse_dsl", "topologies", name)
    r = sp_bittern("run", path, "--duration", 1, timeout=60)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and f"component {component!r}" in lines[0] and message in lines[0]
