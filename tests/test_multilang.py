"""Storm multilang components with real subprocesses under ``bittern run``:

* conformance: a Python spout feeds scripted multilang bolts (topologies/multilang/fake.py),
  one per scenario: task-id replies interleaved with queued tuples, ticks, log/metrics,
  stderr, and four broken children (an anchor to an unknown id, a stray print() on
  stdout, an exit, a hang past topology.subprocess.timeout.secs), each of which ends its
  instance with a clear error naming the component; the instance restarts, the lost
  tuples time out and are replayed, and the run completes;
* a multilang spout (next/ack/activate/deactivate, task ids);
* Storm's word count with the split-sentence bolt as a storm.py component, exact
  counts, with the JSON and the msgpack serializer.
"""
from __future__ import annotations

import glob
import json
import os
import sys
from collections import Counter

import pytest

from conftest import ROOT

TOPOLOGIES = os.path.join(ROOT, "tests", "topologies")


def run(bittern, name, *config, until_done=True, duration=60):
    args = ["run", os.path.join(TOPOLOGIES, name), "--json", "--duration", duration]
    if until_done:
        args.append("--until-done")
    for kv in config:
        args += ["--config", kv]
    r = bittern(*args, timeout=duration + 40, check=True)
    return {c["component"]: c for c in json.loads(r.stdout.strip().splitlines()[-1])["components"]}


def records(out, pattern):
    rows = []
    for path in glob.glob(os.path.join(out, pattern)):
        with open(path) as f:
            rows += [json.loads(ln) for ln in f if ln.strip()]
    return rows


def instance_log(home, topology, component):
    text = ""
    for path in glob.glob(os.path.join(home, "logs", topology, f"{component}-*.log")):
        with open(path, errors="replace") as f:
            text += f.read()
    return text


def test_conformance_with_a_scripted_component(bittern, home, tmp_path):
    out = str(tmp_path / "out")
    n = 100
    comps = run(bittern, "multilang_conformance.py", f"test.count={n}", f"test.out={out}", f"fake.out={out}")
    assert comps["numbers"]["acked"] == n  # every tree completed, after the replays

    # task ids: each [n] went to the sink task the host told the component about, and the
    # replies came after tuples the host had already queued (the component buffered them)
    rows = records(out, "interleave_sink-*.jsonl")
    got = {(r["values"][0], r["task"]) for r in rows if r["stream"] == "default"}
    told = {(r["values"][0], t) for r in rows if r["stream"] == "check" for t in r["values"][1]}
    assert {v for v, _ in got} == set(range(n))
    assert told == got
    assert max(records(out, "buffered-*.jsonl")) >= 1
    ticks = records(out, "tick-*.jsonl")
    assert ticks and all(t[:3] == ["__system", "__tick", -1] for t in ticks), ticks

    log = instance_log(home, "multilang_conformance", "interleave")
    assert "interleave bolt got its first tuple" in log  # the log command
    assert "stderr: fake interleave component starting" in log  # its stderr

    # the broken ones: a clear error naming the component, a restart, and everything replayed
    sink = records(out, "sink-*.jsonl")
    for comp, error in [("unknown_anchor", "anchored an emit to id 'no-such-id', which is not a tuple it was given"),
                        ("garbage", "wrote something to stdout that is not a multilang message: "
                                    "'hello from a stray print'"),
                        ("exit", "died: its stdout closed, exit code 3"),
                        ("hang", "did not answer a heartbeat within 2 s (topology.subprocess.timeout.secs)")]:
        log = instance_log(home, "multilang_conformance", comp)
        assert f"multilang bolt '{comp}'" in log and error in log, (comp, log[-3000:])
        assert "exits on purpose" in log, comp
        assert log.count("started: pid") >= 2, comp  # restarted with a new child
        assert {r["values"][0] for r in sink if r["src"] == comp} == set(range(n)), comp


def test_multilang_spout(bittern, home, tmp_path):
    out = str(tmp_path / "out")
    n = 300
    comps = run(bittern, "multilang_spout.py", f"fake.count={n}", f"test.out={out}", f"fake.out={out}",
                until_done=False, duration=4)
    assert comps["numbers"]["emitted"] == n and comps["numbers"]["acked"] == n
    assert sorted(r["values"][0] for r in records(out, "sink-*.jsonl")) == list(range(n))
    assert sorted(records(out, "acked-*.jsonl")) == list(range(n))  # acks reached the component
    assert records(out, "commands-*.jsonl")[0] == "activate"


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_storm_py_split_sentence_word_count(bittern, home, tmp_path, serializer):
    out = str(tmp_path / "out")
    n = 1000
    comps = run(bittern, "multilang_word_count.py", f"wordcount.sentences={n}", f"wordcount.out={out}",
                f"topology.multilang.serializer={serializer}")
    sys.path.insert(0, TOPOLOGIES)
    try:
        import multilang_word_count as wc
    finally:
        sys.path.remove(TOPOLOGIES)
    got = Counter()
    for path in glob.glob(os.path.join(out, "counts-*.json")):
        with open(path) as f:
            got.update(json.load(f))
    want = wc.expected_counts(n)
    assert dict(got) == want
    assert comps["split"]["emitted"] == sum(want.values()) and comps["split"]["acked"] == n
    assert f"{serializer} serializer" in instance_log(home, "multilang_word_count", "split")
