"""Lifecycle verbs against real processes: submit, list, deactivate/activate,
restart, kill (idempotent), recovery from kill -9, and the word-count example."""
from __future__ import annotations

import json
import os
import signal
import sys
import time

import psutil
import pytest

from conftest import EXAMPLES, TOPOLOGIES, processes_of, wait_for

sys.path.insert(0, EXAMPLES)
from word_count import SENTENCES  # noqa: E402

FLOW = os.path.join(TOPOLOGIES, "flow.py")


def expected_counts(n):
    counts = {}
    for i in range(n):
        for w in SENTENCES[i % len(SENTENCES)].split():
            counts[w] = counts.get(w, 0) + 1
    return counts


def parse_wc_output(stdout):
    sentences, counts = 0, {}
    for line in stdout.splitlines():
        if "{" not in line:
            continue
        doc = json.loads(line[line.index("{"):])
        if "sentences" in doc:
            sentences += doc["sentences"]
        for w, c in doc.get("counts", {}).items():
            assert w not in counts, f"word {w!r} counted by two tasks (fields grouping broken)"
            counts[w] = c
    return sentences, counts


def test_word_count_prints_correct_counts(bittern, tmp_path):
    out = tmp_path / "wc"
    r = bittern("run", os.path.join(EXAMPLES, "word_count.py"), "--duration", 4,
                "--config", f"wordcount.output.dir={out}", check=True)
    sentences, counts = parse_wc_output(r.stdout)
    assert sentences > 1000, r.stdout[-2000:]
    assert counts == expected_counts(sentences)
    files = sorted(os.listdir(out))
    assert files == ["counts-1.json", "counts-2.json"]
    merged = {}
    for f in files:
        merged.update(json.load(open(out / f)))
    assert merged == counts
    # the summary: one row per component with exact totals
    rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines() if ln.split()[:1]
            and ln.split()[0] in ("sentence", "split", "count")}
    assert int(rows["sentence"][3]) == sentences
    assert int(rows["split"][5]) == sentences
    assert int(rows["count"][5]) == sum(counts.values())


def test_run_json_summary_with_limit(bittern):
    r = bittern("run", os.path.join(EXAMPLES, "word_count.py"), "--duration", 2, "--json",
                "--config", "wordcount.sentences=5000", "--config", "topology.stmgrs=3", check=True)
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    comps = {c["component"]: c for c in doc["components"]}
    assert doc["drained"] is True
    assert comps["sentence"]["emitted"] == 5000
    assert comps["split"]["executed"] == 5000
    assert comps["count"]["executed"] == sum(expected_counts(5000).values())


def spout_log(out):
    path = os.path.join(out, "spout-3.log")  # task ids: sink 1-2, spout 3 (sorted by name)
    return open(path).read().split("\n") if os.path.exists(path) else []


def calls(out):
    return max([int(ln.split()[1]) for ln in spout_log(out) if ln.startswith("calls")] or [0])


def sink_total(out):
    total = 0
    for f in os.listdir(out):
        if f.startswith("sink-") and f.endswith(".txt"):
            total += int(open(os.path.join(out, f)).read().split()[0])
    return total


def component_totals(bittern, name):
    """``{component: {"emitted", "executed", ...}}`` as the topology master reports them."""
    return bittern.json("metrics", name, "--json")["components"]


def sink_pids(out):
    return {f: int(open(os.path.join(out, f)).read().split()[1])
            for f in os.listdir(out) if f.startswith("sink-") and f.endswith(".txt")}


@pytest.fixture
def flow(bittern, tmp_path):
    out = str(tmp_path / "flow")
    bittern("submit", FLOW, "--name", "flow", "--config", f"test.out={out}", check=True)
    yield out
    bittern("kill", "flow")


def test_submit_list_deactivate_activate_kill(bittern, home, flow):
    rows = bittern.json("list", "--json")
    assert [(r["name"], r["state"], r["containers"], r["tasks"]) for r in rows] == [("flow", "RUNNING", 2, 3)]
    wait_for(lambda: sink_total(flow) > 50, what="tuples reaching the sinks")

    # a second topology with the same name is refused, and the first keeps running
    r = bittern("submit", FLOW, "--name", "flow", "--config", f"test.out={flow}")
    assert r.returncode != 0 and "already running" in r.stderr
    assert bittern.json("list", "--json")[0]["state"] == "RUNNING"

    r = bittern("deactivate", "flow", check=True)
    assert "deactivated" in r.stdout
    assert bittern.json("list", "--json")[0]["state"] == "PAUSED"
    assert spout_log(flow).count("deactivate") == 1
    # (deactivate answers once every instance reported after it: the spout's count is final)
    emitted = component_totals(bittern, "flow")["spout"]["emitted"]
    wait_for(lambda: component_totals(bittern, "flow")["sink"]["executed"] == emitted,
             what=f"the sinks to execute all {emitted} tuples emitted before the deactivation")
    wait_for(lambda: sink_total(flow) == emitted, what=f"the sinks' files to count {emitted}")
    c1 = calls(flow)
    # A negative check: nothing to wait for but time. While it passes, the spout's process
    # answers the metrics report below, so it was alive and not calling next_tuple.
    time.sleep(1.0)
    assert calls(flow) == c1, "next_tuple was called while deactivated"
    assert component_totals(bittern, "flow")["spout"]["emitted"] == emitted, "emitted while deactivated"
    assert sink_total(flow) == emitted

    bittern("activate", "flow", check=True)
    assert bittern.json("list", "--json")[0]["state"] == "RUNNING"
    # only the re-activation logs an "activate" after the "deactivate" (the start-up one is before it)
    wait_for(lambda: "activate" in spout_log(flow)[spout_log(flow).index("deactivate"):],
             what="the spout's activate() called after its deactivate()")
    wait_for(lambda: calls(flow) > c1 + 100, what="next_tuple calls after activate")
    wait_for(lambda: sink_total(flow) > emitted + 20, what="tuples after activate")
    assert component_totals(bittern, "flow")["spout"]["emitted"] > emitted

    r = bittern("kill", "flow", check=True)
    assert "killed" in r.stdout
    assert processes_of(home) == []
    assert bittern.json("list", "--json") == []
    assert os.listdir(os.path.join(home, "state", "topologies")) == []
    r = bittern("kill", "flow", check=True)  # idempotent
    assert "not running" in r.stdout


def test_submit_deactivated_does_not_call_next_tuple(bittern, tmp_path):
    out = str(tmp_path / "flow")
    bittern("submit", FLOW, "--name", "paused", "--deactivated", "--config", f"test.out={out}", check=True)
    try:
        assert bittern.json("list", "--json")[0]["state"] == "PAUSED"
        wait_for(lambda: any(ln.startswith("init ") for ln in spout_log(out)), what="the spout initialized")
        wait_for(lambda: "all 3 tasks up" in open(os.path.join(bittern.home, "logs", "paused", "tmaster.log")).read(),
                 what="every task up")
        # a negative check: nothing to wait for but time (the spout is up and not called)
        time.sleep(1.0)
        assert calls(out) == 0 and "activate" not in spout_log(out), spout_log(out)
        bittern("activate", "paused", check=True)
        wait_for(lambda: "activate" in spout_log(out), what="the spout's activate()")
        wait_for(lambda: calls(out) > 100, what="next_tuple after activate")
    finally:
        bittern("kill", "paused", check=True)


def proc_pid(bittern, name, key):
    return bittern.processes(name)[key]["pid"]


def test_kill_9_instance_and_stream_manager_are_recovered(bittern, flow):
    wait_for(lambda: len(sink_pids(flow)) == 2, what="both sinks reporting")
    # kill -9 a sink instance: the supervisor restarts it and it receives tuples again
    old = proc_pid(bittern, "flow", "instance-2")
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: proc_pid(bittern, "flow", "instance-2") != old, what="instance restart")
    new = proc_pid(bittern, "flow", "instance-2")
    assert bittern.processes("flow")["instance-2"]["restarts"] == 1
    wait_for(lambda: sink_pids(flow).get("sink-2.txt") == new and
             int(open(os.path.join(flow, "sink-2.txt")).read().split()[0]) > 10,
             what="restarted sink receiving tuples")
    # kill -9 the stream manager of container 1, which holds sink task 2 only
    assert bittern.processes("flow")["instance-2"]["container"] == 1
    key = "stmgr-1"
    old = proc_pid(bittern, "flow", key)
    before = sink_total(flow)
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: proc_pid(bittern, "flow", key) != old, what="stream manager restart")
    wait_for(lambda: sink_total(flow) > before + 100, timeout=30, what="tuples flowing after stmgr restart")
    # every sink still receives
    counts = {f: int(open(os.path.join(flow, f)).read().split()[0]) for f in sink_pids(flow)}

    def all_grew():
        now = {f: int(open(os.path.join(flow, f)).read().split()[0]) for f in sink_pids(flow)}
        return all(now[f] > counts[f] for f in counts) and now
    wait_for(all_grew, what=f"every sink receiving (counts were {counts})")


def test_restart_container(bittern, flow):
    wait_for(lambda: len(sink_pids(flow)) == 2, what="both sinks reporting")
    before = {k: v["pid"] for k, v in bittern.processes("flow").items() if v["container"] == 1}
    r = bittern("restart", "flow", "--container", 1, check=True)
    assert f"restarting {len(before)} processes" in r.stdout
    wait_for(lambda: all(bittern.processes("flow")[k]["pid"] != p for k, p in before.items()),
             what="container 1 restarted")
    for p in before.values():
        assert not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE
    total = sink_total(flow)
    wait_for(lambda: sink_total(flow) > total + 50, what="tuples after restart")


def test_supervisor_killed_9_takes_everything_with_it(bittern, home, tmp_path):
    out = str(tmp_path / "flow")
    bittern("submit", FLOW, "--name", "orphan", "--config", f"test.out={out}", check=True)
    sup = bittern.state("processes", "orphan")["supervisor"]
    assert len(processes_of(home)) == 1 + 1 + 2 + 3  # supervisor, tmaster, 2 stmgrs, 3 instances
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: processes_of(home) == [], timeout=10, what="every process to die with the supervisor")
    assert bittern.json("list", "--json")[0]["state"] == "DEAD"
    bittern("kill", "orphan", check=True)
    assert bittern.json("list", "--json") == []


def test_logs_verb(bittern, flow):
    wait_for(lambda: len(sink_pids(flow)) == 2, what="both sinks reporting")
    r = bittern("logs", "flow", "sink", 2, check=True)
    assert "sink[task 2] initialized" in r.stdout and "==>" not in r.stdout
    r = bittern("logs", "flow", "sink", check=True)
    assert "==> sink-1.log <==" in r.stdout and "==> sink-2.log <==" in r.stdout
    r = bittern("logs", "flow", "tmaster", "-n", 0, check=True)
    assert "all 3 tasks up" in r.stdout
    r = bittern("logs", "flow", "nosuch")
    assert r.returncode == 1 and "has no log for nosuch" in r.stderr
    r = bittern("logs", "ghost")
    assert r.returncode == 1 and "no logs for topology 'ghost'" in r.stderr


def test_a_spout_that_sleeps_in_next_tuple_still_flows_and_stops(bittern, home):
    """next_tuple sleeping 0.5 s after each tuple (heronpy's ArrayLooper(sleep=...)): a
    turn of the spout's loop is bounded in time, not only in calls, so its tuples flow,
    its control messages are heard and the stop drains it. Unbounded, the first turn
    made all 64 calls (32 s) before the stop was read."""
    r = bittern("run", os.path.join(TOPOLOGIES, "sleepy_spout.py"), "--duration", "4", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    comps = {c["component"]: c for c in summary["components"]}
    emitted = comps["spout"]["emitted"]
    assert summary["drained"] and 1 <= emitted < 64, summary
    assert comps["sink"]["executed"] == emitted, summary
    assert not processes_of(home)
