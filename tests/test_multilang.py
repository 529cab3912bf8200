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

from bittern.hashing import storm_task_index

from conftest import ROOT, instance_log

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


@pytest.mark.parametrize("serializer, fields_hash, debug", [("json", "storm", "false"), ("msgpack", "crc32", "true")])
def test_storm_py_split_sentence_word_count(bittern, home, tmp_path, serializer, fields_hash, debug):
    """With topology.fields.grouping.hash = storm every word is counted by the task a
    Storm cluster would pick (Java hashCode of the word, over the sorted tasks). With
    topology.debug every emit is logged, the native spout's and the multilang bolt's."""
    out = str(tmp_path / "out")
    n = 1000
    comps = run(bittern, "multilang_word_count.py", f"wordcount.sentences={n}", f"wordcount.out={out}",
                f"topology.multilang.serializer={serializer}", f"topology.fields.grouping.hash={fields_hash}",
                f"topology.debug={debug}")
    sys.path.insert(0, TOPOLOGIES)
    try:
        import multilang_word_count as wc
    finally:
        sys.path.remove(TOPOLOGIES)
    got, by_task = Counter(), {}
    for path in glob.glob(os.path.join(out, "counts-*.json")):
        with open(path) as f:
            by_task[int(path.rsplit("-", 1)[1].split(".")[0])] = counts = json.load(f)
        got.update(counts)
    want = wc.expected_counts(n)
    assert dict(got) == want
    if fields_hash == "storm":
        tasks = sorted(by_task)
        assert len(tasks) == 2
        assert {w: t for t in tasks for w in by_task[t]} == \
            {w: tasks[storm_task_index([w], 2)] for w in want}
    assert comps["split"]["emitted"] == sum(want.values()) and comps["split"]["acked"] == n
    assert f"{serializer} serializer" in instance_log(home, "multilang_word_count", "split")
    spout_emits = instance_log(home, "multilang_word_count", "sentences").count("emitting: ['")
    split_emits = instance_log(home, "multilang_word_count", "split").count("emitting: 'default' ['")
    if debug == "true":
        assert spout_emits >= n and split_emits >= sum(want.values()), (spout_emits, split_emits)
    else:
        assert spout_emits == split_emits == 0


# -- the host driven directly (no topology): a fake instance around a ShellBolt ------------

class FakeInstance:
    def __init__(self, component):
        from types import SimpleNamespace

        from bittern.loader import MODULE_NAME, load_topology
        saved_path, saved_mod = list(sys.path), sys.modules.get(MODULE_NAME)
        try:
            tdef = load_topology(os.path.join(TOPOLOGIES, "multilang_conformance.py"))
        finally:  # leave this process's imports as they were
            sys.path[:] = saved_path
            if saved_mod is None:
                sys.modules.pop(MODULE_NAME, None)
            else:
                sys.modules[MODULE_NAME] = saved_mod
        tasks = {i + 1: c for i, c in enumerate(tdef.components)}
        self.plan = SimpleNamespace(topology=tdef, packing=SimpleNamespace(task_component=tasks))
        self.task = next(t for t, c in tasks.items() if c == component)
        self.errors, self.watched, self.timers = [], [], []

    def report_error(self, where, exc, fatal=False):
        self.errors.append(str(exc))

    def watch(self, fd, cb):
        self.watched.append(fd)

    def unwatch(self, fd):
        self.watched.remove(fd)

    def add_timer(self, fn):
        self.timers.append(fn)


def hosted_bolt(tmp_path, scenario, **conf):
    from types import SimpleNamespace

    from bittern.config import defaults
    from instance.shell import ShellBolt
    inst = FakeInstance("exit")
    config = defaults()
    config.update({"multilang.command": [sys.executable], "multilang.script": "multilang/fake.py",
                   "fake.scenario": scenario, "fake.out": str(tmp_path), **conf})
    bolt = ShellBolt()
    got = {"emits": [], "acks": [], "fails": []}
    bolt.emit = lambda values, stream="default", anchors=None, direct_task=None, need_task_ids=False: \
        got["emits"].append(values) or ([7] if need_task_ids else None)
    bolt.ack, bolt.fail = got["acks"].append, got["fails"].append
    bolt.context = SimpleNamespace(component="exit", task_id=inst.task, register_metric=lambda n, m: m)
    bolt._runtime_attach(inst)
    bolt.initialize(config, bolt.context)
    return bolt, inst, got


def test_a_slow_child_makes_process_wait_at_max_pending(tmp_path):
    import time

    from bittern.api.tuple import Tuple
    bolt, inst, got = hosted_bolt(tmp_path, "slow", **{"topology.shellbolt.max.pending": 2})
    try:
        assert inst.watched == [bolt._stdout] and inst.timers
        big = "x" * 30000  # two of these fill the pipe: then the host's own queue fills
        t0 = time.monotonic()
        for i in range(30):
            bolt.process(Tuple((1, 2), "numbers", "default", 1, [f"{i}{big}"]))
            assert bolt._queued < 2
        assert time.monotonic() - t0 > 0.25  # process() waited for the child
        assert bolt._runtime_in_flight() == 30 - len(got["acks"]) > 0  # what a drain waits for
        deadline = time.monotonic() + 20
        while len(got["acks"]) < 30 and time.monotonic() < deadline:
            bolt._service(0.1)
        assert len(got["acks"]) == 30 and len(got["emits"]) == 30 and not inst.errors
        assert bolt._runtime_in_flight() == 0
        assert [a.values[0][:2] for a in got["acks"]][:3] == ["0x", "1x", "2x"]
    finally:
        bolt.close()
    assert bolt._proc.poll() is not None


def test_acking_an_unknown_id_ends_the_instance(tmp_path):
    import time

    from bittern.api.tuple import Tuple
    from instance.runtime import Crash
    bolt, inst, got = hosted_bolt(tmp_path, "ack_unknown")
    with pytest.raises(Crash, match="acked id 'nope', which is not a tuple it was given"):
        bolt.process(Tuple((1, 2), "numbers", "default", 1, [1]))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            bolt._service(0.1)
    assert inst.errors and "multilang bolt 'exit'" in inst.errors[0]
    assert bolt._proc.poll() is not None  # the child was killed with it
