"""heronpy's Streamlet API (``heronpy.streamlet`` of heronpy 0.20.5, the real package from
PyPI in the suite's throwaway venv) runs unchanged: files that build a ``Builder()`` and
call ``Runner().run(name, config, builder)`` (tests/topologies/streamlet_*.py), every
operator checked against its expected output computed here:

* streamlet_misc.py (``bittern run --until-done``: its sources end): a supplier and a
  generator as sources, union, clone into two sinks, repartition with a custom function
  (routed to partition ``f(element, n)``) and without one, transform with state,
  consume into files, set_name / set_num_partitions (the run's component names and
  task counts);
* streamlet_wordcount.py (Heron's example style, ``__main__`` block, ``sys.argv[1]``):
  flat_map, filter, map, log, reduce_by_key_and_window and reduce_by_window on tumbling
  windows (every word counted exactly once over the windows);
* streamlet_joins.py: join, outer_left_join, outer_right_join and outer_join over one
  window;
* mistakes: one line naming the file and the streamlet.
"""
from __future__ import annotations

import glob
import json
import os
import textwrap
from collections import Counter, defaultdict

import pytest

from conftest import ROOT, instance_log, wait_for
from test_heron import heron, heron_python  # noqa: F401 - the heronpy venv fixtures, shared

TOPOLOGIES = os.path.join(ROOT, "tests", "topologies")


def rows(out, kind):
    """Every record the sink ``kind`` wrote (all its processes)."""
    found = []
    for path in sorted(glob.glob(os.path.join(out, f"{kind}-*.jsonl"))):
        with open(path) as f:
            found += [json.loads(ln) for ln in f if ln.strip()]
    return found


def one_line_error(r):
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.slow
def test_sources_union_clone_repartition_transform(heron, tmp_path):
    out = str(tmp_path / "out")
    os.makedirs(out)
    heron.env["STREAMLET_OUT"] = out
    r = heron("run", os.path.join(TOPOLOGIES, "streamlet_misc.py"), "--until-done", "--json", timeout=120,
              check=True)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["topology"] == "streamlet_misc" and summary["drained"]
    comps = {c["component"]: c for c in summary["components"]}
    # set_name / set_num_partitions: the component names and task counts; heronpy's own
    # names for the unnamed ones; a streamlet inherits its parent's partitions
    assert {n: c["tasks"] for n, c in comps.items()} == {
        "supplied": 1, "letters": 1, "both": 1, "clone_a": 1, "consume-1": 1, "clone_b": 1, "consume-2": 1,
        "generated": 1, "by_mod": 3, "counted": 3, "consume-3": 3, "spread": 2, "doubled": 3, "consume-4": 3}
    assert all(c["errors"] == 0 and c["failed"] == 0 for c in comps.values()), comps
    n = 60
    # supplier (its iterator ends: the end of input) and generator sources; union; clone
    union = [*range(n), *"abcde"]
    assert comps["supplied"]["emitted"] == n and comps["letters"]["emitted"] == 5
    for sink in ("clone_a", "clone_b"):
        assert sorted(rows(out, sink), key=str) == sorted(union, key=str)  # each clone: every element once
    # repartition(3, n % partitions): element n went through the (n % 3)-th task of by_mod
    counted = rows(out, "counted")
    assert sorted(c[0] for c in counted) == list(range(100, 100 + n))
    via = defaultdict(set)
    for value, task, *_ in counted:
        via[task].add(value)
    assert len(via) == 3
    for k, task in enumerate(sorted(via)):
        assert via[task] == {v for v in range(100, 100 + n) if v % 3 == k}
    # transform with state: each transform task counted 1, 2, ... what it saw
    seen = defaultdict(list)
    for value, task, partition, count, partitions, stream in counted:
        seen[partition].append(count)
        assert (partitions, stream) == (3, "output")
    assert sorted(seen) == [0, 1, 2]
    assert all(sorted(c) == list(range(1, len(c) + 1)) for c in seen.values())
    assert sum(len(c) for c in seen.values()) == n
    # repartition(2) without a function, then map on 3 partitions
    assert sorted(rows(out, "doubled")) == [2 * v for v in range(100, 100 + n)]
    assert comps["spread"]["executed"] == n and comps["doubled"]["executed"] == n


WORDS = ("the quick brown fox jumps over the lazy dog the dog barks a quick fox over and over lazy brown dog "
         .split())


@pytest.mark.slow
def test_word_count_with_windows_filter_map_log(heron, home, tmp_path):
    out = str(tmp_path / "out")
    os.makedirs(out)
    heron.env["STREAMLET_OUT"] = out
    expected = Counter(w for w in WORDS if w != "the")
    expected = Counter({w: c * 25 for w, c in expected.items()})  # LINES * 25
    heron("submit", os.path.join(TOPOLOGIES, "streamlet_wordcount.py"), check=True)
    name = "streamlet_wordcount"  # Runner().run(sys.argv[1], ...): the file's name

    def counted():
        c = Counter()
        for r in rows(out, "counts"):
            c[r["key"]] += r["value"]
        return c

    def total():
        return sum(r["value"] for r in rows(out, "total"))
    try:
        wait_for(lambda: counted() == expected and total() == sum(len(w) * c for w, c in expected.items()),
                 timeout=60, what="every word counted")
        metrics = heron.json("metrics", name, "--json")
    finally:
        heron("kill", name, check=True)
    assert counted() == expected  # flat_map, filter, map, reduce_by_key_and_window: exact
    counts = rows(out, "counts")
    assert all(r["end"] - r["start"] == 2 for r in counts)  # tumbling windows of 2 s
    assert len({(r["key"], r["start"]) for r in counts}) == len(counts)  # one result per key and window
    totals = rows(out, "total")  # reduce_by_window: one result per window (all of it)
    assert len({r["start"] for r in totals}) == len(totals) and all(r["key"] is None for r in totals)
    assert total() == sum(len(w) * c for w, c in expected.items())
    logged = instance_log(home, name, "log-1")
    assert sum(logged.count(f": {w}\n") for w in expected) == sum(expected.values())  # log(): every element
    assert ": the\n" not in logged
    assert set(metrics["components"]) >= {"lines", "words", "no_the", "ones", "counts", "log-1", "consume-1"}


@pytest.mark.slow
def test_windowed_joins(heron, tmp_path):
    out = str(tmp_path / "out")
    os.makedirs(out)
    heron.env["STREAMLET_OUT"] = out
    left = [("k1", "a"), ("k1", "b"), ("k2", "c"), ("k4", "d")]  # streamlet_joins.RECORDS
    right = [("k1", "x"), ("k3", "y"), ("k4", "z"), ("k4", "w")]
    inner = sorted([k, [a, b]] for k, a in left for k2, b in right if k == k2)
    lonely_left = sorted([k, [a, None]] for k, a in left if k not in {k2 for k2, _ in right})
    lonely_right = sorted([k, [None, b]] for k, b in right if k not in {k1 for k1, _ in left})
    expected = {"inner": inner, "left_outer": sorted(inner + lonely_left),
                "right_outer": sorted(inner + lonely_right), "full_outer": sorted(inner + lonely_left + lonely_right)}
    assert len(inner) == 4 and lonely_left and lonely_right

    def results(kind):
        return sorted([r["key"], r["value"]] for r in rows(out, kind))
    heron("submit", os.path.join(TOPOLOGIES, "streamlet_joins.py"), check=True)
    try:
        wait_for(lambda: all(len(results(k)) >= len(v) for k, v in expected.items()), timeout=60,
                 what="the four joins' results")
    finally:
        heron("kill", "streamlet_joins", check=True)
    for kind, want in expected.items():
        assert results(kind) == want, kind
        windows = {(r["start"], r["end"]) for r in rows(out, kind)}
        assert len(windows) == 1 and [e - s for s, e in windows] == [6], windows  # one tumbling window


BAD = {
    "streamlet_dup.py": ("""
        src = builder.new_source(Nums()).set_name("nums")
        src.map(lambda n: n).set_name("twice").map(lambda n: n).set_name("twice").log()
        """, "two streamlets are named 'twice' (set_name must be unique)"),
    "streamlet_slide.py": ("""
        src = builder.new_source(Nums()).set_name("nums")
        src.map(lambda n: (n, 1)).reduce_by_key_and_window(WindowConfig.create_sliding_window(2, 5),
                                                           lambda a, b: a + b).set_name("sums").log()
        """, "streamlet 'sums': the window's slide interval (5 s) is longer than the window (2 s)"),
    "streamlet_foreign.py": ("""
        src = builder.new_source(Nums()).set_name("nums")
        other = Builder().new_source(Nums()).set_name("elsewhere")
        src.join(other, WindowConfig.create_sliding_window(2, 1), lambda a, b: a).set_name("joined").log()
        """, "the streamlet graph cannot be built: 'joined' reads 'elsewhere', which comes from a source not "
             "added to this Builder"),
}


@pytest.mark.parametrize("fname", sorted(BAD))
def test_mistakes_are_one_line_naming_the_streamlet(heron, tmp_path, fname):
    body, message = BAD[fname]
    path = tmp_path / fname
    path.write_text(textwrap.dedent("""
        from heronpy.streamlet.builder import Builder
        from heronpy.streamlet.config import Config
        from heronpy.streamlet.generator import Generator
        from heronpy.streamlet.runner import Runner
        from heronpy.streamlet.windowconfig import WindowConfig

        class Nums(Generator):
            def setup(self, context):
                self.it = iter(range(3))

            def get(self):
                return next(self.it)

        builder = Builder()
        """) + textwrap.dedent(body) + "Runner().run('bad', Config(), builder)\n")
    line = one_line_error(heron("run", str(path), "--until-done", timeout=60))
    assert fname in line and message in line, line


@pytest.mark.slow
def test_task_hooks_reach_every_streamlet_task_including_windowed_ones(heron, tmp_path):
    """tests/data/heron_tree's streamlet_hooks_topology.py (Heron's word_count_streamlet.py
    shape, a bounded source): topology.auto.task.hooks on every task, the windowed
    reduce_by_key_and_window bolt too, called at Heron's points as often as the engine
    counted; the run ends and drains."""
    out = str(tmp_path / "hooks")
    heron.env["STREAMLET_HOOKS_OUT"] = out
    path = os.path.join(ROOT, "tests", "data", "heron_tree", "examples", "src", "python",
                        "streamlet_hooks_topology.py")
    r = heron("run", path, "--until-done", "--duration", 90, "--json", timeout=150, check=True)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["topology"] == "streamlet_hooks_topology" and summary["drained"]
    comps = {c["component"]: c for c in summary["components"]}
    lines, words = 200, 100 * 5 + 100 * 6  # the file's LINES, its two sentences' words
    assert comps["generator-1"]["emitted"] == lines and comps["map-1"]["executed"] == words

    def hook(component):
        with open(os.path.join(out, f"autohook-{component}.json")) as f:
            doc = json.load(f)
        assert doc["wrong"] == {}, (component, doc)
        return doc["calls"]
    assert hook("generator-1-2") == {"prepare": 1, "emit": lines, "clean_up": 1}
    assert hook("flatmap-1-1") == {"prepare": 1, "bolt_execute": lines, "bolt_ack": lines, "emit": words,
                                   "clean_up": 1}
    window = comps["reducebykeyandwindow-1"]
    assert window["executed"] == words and window["emitted"] > 0  # at least one window fired
    # the window bolt: every tuple executed, every result emitted (at most once: no acks). The
    # last windows may fire at the stop, after the last metrics report the summary holds, so
    # the hook's count is at least the summary's, and the log bolt got no more than was emitted.
    wh = hook("reducebykeyandwindow-1-5")
    assert (wh["prepare"], wh["bolt_execute"], wh["clean_up"], set(wh)) == \
        (1, words, 1, {"prepare", "bolt_execute", "emit", "clean_up"}), wh
    assert wh["emit"] >= window["emitted"], (wh, window)
    lh = hook("log-1-3")
    assert (lh["prepare"], lh["clean_up"], set(lh)) == (1, 1, {"prepare", "bolt_execute", "bolt_ack", "clean_up"}), lh
    assert window["emitted"] <= lh["bolt_execute"] == lh["bolt_ack"] <= wh["emit"], (lh, wh, window)
