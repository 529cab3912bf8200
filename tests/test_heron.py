"""heronpy topologies run unchanged (tests/topologies/heron_*.py, written as Heron's
examples are), with the real heronpy 0.20.5 from PyPI in a throwaway venv
(bittern.compat.heron.PIP_REQUIREMENTS: heronpy without its 3.11-breaking pins):

* the builder style with ``if __name__ == '__main__': ... build_and_submit()``, named by
  ``sys.argv[1]``: word count with fields grouping, tick tuples, a registered metric,
  heronpy's own TumblingWindowBolt (which sets its tick period in ``initialize``),
  Heron config keys (strings and booleans) carried over, Heron's max-spout-pending default;
* the class style: named streams, ALL grouping, a custom grouping (ICustomGrouping);
* at least once: Heron's half-ack bolt fails every other tuple behind an anchoring
  relay, the spout replays on fail, every id is acked exactly once in the end
  (``bittern submit`` + ``kill``);
* effectively once: heronpy StatefulComponents checkpoint through Bittern's state and
  count exactly once across a kill -9 of a task;
* bad input: a component class only the __main__ block defines, an unsupported
  grouping: one line naming the component, non-zero exit, nothing started.
"""
from __future__ import annotations

import glob
import json
import os
from collections import Counter

import pytest

from conftest import ROOT, Bittern, wait_for
from foreignvenv import heron_python  # noqa: F401 - the heronpy venv fixture

TOPOLOGIES = os.path.join(ROOT, "tests", "topologies")
WORDS = ["nathan", "mike", "jackson", "golda", "bertels"]  # heron_components.WORDS


@pytest.fixture
def heron(home, heron_python):
    return Bittern(home, python=heron_python)


def run(bittern, name, *config, duration=3):
    args = ["run", os.path.join(TOPOLOGIES, name), "--json", "--duration", duration]
    for kv in config:
        args += ["--config", kv]
    r = bittern(*args, timeout=duration + 60, check=True)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    return summary["topology"], {c["component"]: c for c in summary["components"]}


def records(out, pattern):
    """{task: [records]} from the per-task files heron_components.Recorder writes."""
    by_task = {}
    for path in glob.glob(os.path.join(out, pattern)):
        task = int(path.rsplit("-", 1)[1].split(".")[0])
        with open(path) as f:
            by_task[task] = [json.loads(ln) for ln in f if ln.strip()]
    return by_task


def test_builder_style_word_count(heron, home, tmp_path):
    out, n = str(tmp_path / "out"), 1000
    name, comps = run(heron, "heron_word_count.py", f"heron.out={out}", f"heron.words={n}")
    assert name == "heron_word_count"  # TopologyBuilder(name=sys.argv[1]): the file's name
    assert comps["word_spout"]["emitted"] == 2 * n and comps["count_bolt"]["executed"] == 2 * n
    assert comps["count_bolt"]["emitted"] == 2 * n  # [word, count] per word
    assert comps["count_bolt"]["errors"] == 0 and comps["word_spout"]["errors"] == 0

    seen = records(out, "count-*.jsonl")
    assert len(seen) == 2
    header = {task: rows[0] for task, rows in seen.items()}
    words = {task: Counter(r["word"] for r in rows[1:]) for task, rows in seen.items()}
    total = sum(words.values(), Counter())
    assert total == {w: 2 * n // len(WORDS) for w in WORDS}  # exact counts
    tasks = sorted(seen)
    assert not set(words[tasks[0]]) & set(words[tasks[1]])  # fields grouping: a word has one task
    assert all(r["from"] == "word_spout" and r["stream"] == "default" for rows in seen.values() for r in rows[1:])

    h = header[tasks[0]]
    assert h["config"] == {"topology.reliability.mode": "ATMOST_ONCE",
                           "topology.tick.tuple.freq.secs": 0.5,  # the component's config
                           "topology.max.spout.pending": 100,  # Heron's default
                           "topology.message.timeout.secs": 45,  # given as the string "45"
                           "topology.enable.message.timeouts": False,
                           "wordcount.custom": "for the count bolt"}
    assert h["cluster_config_mode"] == "ATMOST_ONCE"
    assert (h["topology"], h["component"], h["tasks"]) == ("heron_word_count", "count_bolt", tasks)
    assert h["sources"] == [["word_spout", "default", "FIELDS"]]

    ticks = records(out, "tick-*.jsonl")
    assert sorted(ticks) == tasks and all(ticks.values())  # every 0.5 s, to each task
    assert all(t == {"tick": True, "stream": "__tick", "component": "__system", "system": True}
               for rows in ticks.values() for t in rows)

    windows = [w for rows in records(out, "window-*.jsonl").values() for w in rows]
    assert windows and all(w["seconds"] == 1 for w in windows)  # ticks at the period it asked for
    assert sum(w["tuples"] for w in windows) == 2 * n  # tumbling: each word in exactly one window

    logs = "".join(open(p).read() for p in glob.glob(os.path.join(home, "logs", name, "word_spout-*.log")))
    assert logs.count(f"will emit {n} words") == 2  # self.logger: the delegate's logger


def test_class_style_streams_all_and_custom_grouping(heron, tmp_path):
    out, n = str(tmp_path / "out"), 1000
    name, comps = run(heron, "heron_streams.py", f"heron.out={out}", f"heron.numbers={n}")
    assert name == "heron_streams"
    assert comps["numbers"]["emitted"] == n
    assert comps["audit"]["executed"] == 2 * (n // 2)  # ALL: both tasks get every odd number
    assert comps["pick"]["executed"] == n // 2

    odds, evens = list(range(1, n, 2)), list(range(0, n, 2))
    audit = records(out, "audit-*.jsonl")
    assert len(audit) == 2
    for rows in audit.values():
        assert sorted(r["n"] for r in rows) == odds and {r["stream"] for r in rows} == {"odd"}

    pick = records(out, "pick-*.jsonl")
    tasks = sorted(pick)
    assert len(tasks) == 3 and all(r["tasks"] == tasks for rows in pick.values() for r in rows)
    for k, task in enumerate(tasks):  # ModGrouping: n goes to the (n // 2) % 3-th task
        assert sorted(r["n"] for r in pick[task]) == [e for e in evens if (e // 2) % 3 == k]
        assert {r["stream"] for r in pick[task]} == {"even"}


def test_at_least_once_half_ack_replays_until_all_acked(heron, tmp_path):
    out, n = str(tmp_path / "out"), 200
    heron("submit", os.path.join(TOPOLOGIES, "heron_half_ack.py"), "--config", f"heron.out={out}",
          "--config", f"heron.ids={n}", check=True)
    try:
        def acked():
            return [r["acked"] for rows in records(out, "spout-*.jsonl").values() for r in rows if "acked" in r]
        wait_for(lambda: len(acked()) >= n, timeout=40, what=f"{n} ids acked by the spout")
    finally:
        heron("kill", "half_ack", check=True)
    spout = [r for rows in records(out, "spout-*.jsonl").values() for r in rows]
    acks = [r["acked"] for r in spout if "acked" in r]
    fails = [r["failed"] for r in spout if "failed" in r]
    assert sorted(acks) == list(range(n))  # each id acked exactly once, in the end
    assert len(fails) >= n // 2 - 5  # about every other delivery failed and was replayed
    assert set(fails) <= set(range(n))
    assert max(r["max_pending"] for r in spout if "acked" in r) <= 20  # topology.max.spout.pending
    delivered = [r["acked"] for rows in records(out, "halfack-*.jsonl").values() for r in rows]
    assert sorted(delivered) == list(range(n))  # every tuple got through once, failures replayed


@pytest.mark.parametrize("name, component, message", [
    ("heron_bad_main_class.py", "hidden_words", "class HiddenSpout is defined inside the topology file's "
                                                "__main__ block"),
    ("heron_bad_direct.py", "direct_count", "Grouping.DIRECT is not supported for heronpy topologies"),
])
def test_bad_input_is_one_line_naming_the_component(heron, name, component, message):
    r = heron("run", os.path.join(TOPOLOGIES, name), "--duration", 1, timeout=60)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"component {component!r}" in lines[0] and message in lines[0], lines[0]
    assert name in lines[0]


def test_effectively_once_stateful_components_survive_a_killed_task(heron, tmp_path):
    """heronpy StatefulComponents checkpoint through Bittern's state: kill -9 one bolt
    task mid-run, and the checkpointed totals still count every number exactly once."""
    out, n = str(tmp_path / "out"), 1200
    heron("submit", os.path.join(TOPOLOGIES, "heron_stateful.py"), "--config", f"heron.out={out}",
          "--config", f"heron.numbers={n}", "--config", "heron.rate=400", check=True)

    def latest():  # the state each task saved at its latest checkpoint
        return {task: max(rows, key=lambda r: r["checkpoint"]) for task, rows in records(out, "sum-*.jsonl").items()
                if rows}
    try:
        wait_for(lambda: sum(r["count"] for r in latest().values()) >= 300, timeout=30, what="checkpoints")
        victim = sorted(latest().items())[0][1]["pid"]
        os.kill(victim, 9)
        wait_for(lambda: sum(r["count"] for r in latest().values()) >= n, timeout=40,
                 what="every number in a checkpoint")
        final = latest()
        assert sum(r["count"] for r in final.values()) == n  # none lost, none counted twice
        assert sum(r["sum"] for r in final.values()) == n * (n - 1) // 2
        assert any(r["pid"] != victim for r in records(out, "sum-*.jsonl")[sorted(final)[0]])  # restarted
        ckpts = heron.json("metrics", "heron_stateful", "--json")["checkpoints"]
        assert ckpts["restores"] >= 1, ckpts
    finally:
        heron("kill", "heron_stateful", check=True)
