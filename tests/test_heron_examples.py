"""Topologies written as Heron's own Python examples are, run unchanged from the root of
their tree, with the real heronpy 0.20.5 from PyPI (test_heron's throwaway venv).

tests/data/heron_tree/ is laid out as Heron's repository (our own code, not Heron's):
``examples/src/python/*_topology.py`` import their spouts, bolts and task hook as
``examples.src.python.spout`` / ``.bolt`` / ``.misc`` (the packages beside them), and
``window_size_topology.py`` also as ``heron.examples.src.python.spout``, the name Heron's
pex files gave the tree. One end-to-end test submits all six at once (word count, half
acking, multiple streams with ``topology.auto.task.hooks``, a custom grouping, heronpy's
sliding window bolt, a stateful word count effectively once), waits for what the engine
reports, kills them and checks every output exactly, and what heronpy's task hooks were
told at each of Heron's points. Fast tests cover how the tree's root is found.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from bittern.loader import package_roots

from conftest import ROOT, wait_for
from test_heron import heron, heron_python  # noqa: F401 - the heronpy venv fixtures, shared

TREE = os.path.join(ROOT, "tests", "data", "heron_tree")
EXAMPLES = "examples/src/python"
WORDS = ["apple", "banana", "cherry", "damson", "elder"]  # spout/words.py
PER_TASK = 100  # words each spout task emits (spout/words.py's default)
TOPOLOGIES = ["word_count", "half_acking", "multi_stream", "custom_grouping", "window_size",
              "stateful_word_count"]


# --------------------------------------------------------------------------------------
# Finding the tree's root (bittern/loader.py), no topology run
# --------------------------------------------------------------------------------------

def test_package_roots_come_from_the_files_own_imports(tmp_path):
    assert package_roots(os.path.join(TREE, EXAMPLES, "word_count_topology.py")) == ([TREE], [])
    # Heron's pex name for the tree: aliased, since the tree has no heron/examples/
    assert package_roots(os.path.join(TREE, EXAMPLES, "window_size_topology.py")) == ([TREE], ["heron"])
    # a checkout named heron/: heron.examples... is a real path from its parent
    top = tmp_path / "heron" / "examples" / "src" / "python"
    top.mkdir(parents=True)
    (top / "t.py").write_text("from heron.examples.src.python.spout import S\nfrom examples.src.python import b\n")
    assert package_roots(str(top / "t.py")) == ([str(tmp_path), str(tmp_path / "heron")], [])
    plain = tmp_path / "plain.py"  # nothing of its own tree imported: nothing added
    plain.write_text("import os\nfrom heronpy.api.topology import Topology\nfrom . import x\n")
    assert package_roots(str(plain)) == ([], [])
    (tmp_path / "broken.py").write_text("def (:\n")
    assert package_roots(str(tmp_path / "broken.py")) == ([], [])  # importing it reports the error


def test_tree_imports_resolve_to_one_module_under_both_names(tmp_path):
    """In a fresh interpreter, as every instance imports the file: the root goes after
    site-packages, and heron.examples.X is the very module examples.X."""
    top = tmp_path / "tree" / "examples" / "src" / "python"
    (top / "spout").mkdir(parents=True)
    (top / "spout" / "__init__.py").write_text("from .word import Word\n")
    (top / "spout" / "word.py").write_text("class Word:\n    pass\n")
    (top / "topo.py").write_text("from heron.examples.src.python.spout import Word as A\n"
                                 "from examples.src.python.spout.word import Word as B\n"
                                 "SAME = A is B\n")
    script = textwrap.dedent(f"""
        import sys
        from bittern.loader import import_file
        m = import_file({str(top / 'topo.py')!r}, "t")
        import heron.examples.src.python.spout.word as w
        print(m.SAME, w.__name__, sys.path.index({str(tmp_path / 'tree')!r}) == len(sys.path) - 1)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "examples.src.python.spout.word", "True"]


# --------------------------------------------------------------------------------------
# The six example topologies, end to end
# --------------------------------------------------------------------------------------

def files(out, pattern):
    """{task: doc} of the JSON files the components wrote (NAME-TASK.json)."""
    docs = {}
    for path in glob.glob(os.path.join(out, pattern)):
        with open(path) as f:
            docs[int(path.rsplit("-", 1)[1].split(".")[0])] = json.load(f)
    return docs


def ids(task):
    return sorted(f"{task}-{i}" for i in range(PER_TASK))


@pytest.fixture
def tree_cli(heron):
    """``python -m bittern ARGS`` with heronpy's venv, from the tree's root (the way a
    user in a Heron checkout runs it)."""
    def cli(*args, cwd=TREE, timeout=180):
        r = subprocess.run([heron.python, "-m", "bittern", *map(str, args)], env=heron.env, cwd=cwd,
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, f"bittern {' '.join(map(str, args))}: {r.stderr}"
        return r
    return cli


@pytest.mark.slow
def test_heron_example_topologies_run_unchanged_from_the_tree_root(heron, tree_cli, tmp_path):
    out = {t: str(tmp_path / t) for t in TOPOLOGIES}
    procs = {}
    for t in TOPOLOGIES:  # submitted together: the machine is shared, the waits overlap
        path = f"{EXAMPLES}/{t}_topology.py"
        cwd = TREE
        if t == "custom_grouping":  # from elsewhere too: the root comes from the file's imports
            path, cwd = os.path.join(TREE, path), str(tmp_path)
        procs[t] = subprocess.Popen([heron.python, "-m", "bittern", "submit", path, "--config",
                                     f"examples.out={out[t]}"], env=heron.env, cwd=cwd, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
    names = {t: f"{t}_topology" for t in TOPOLOGIES}  # TopologyBuilder(name=sys.argv[1]) / the file's name
    try:
        for t, p in procs.items():
            _, err = p.communicate(timeout=240)
            assert p.returncode == 0, f"submit {t}: {err}"

        def metrics(t):
            return tree_cli("metrics", names[t], "--json").stdout

        def comps(t):
            return json.loads(metrics(t))["components"]

        def done():
            c = {t: comps(t) for t in ("word_count", "half_acking", "multi_stream", "custom_grouping",
                                       "window_size")}
            return (c["word_count"]["word_spout"]["acked"] == 2 * PER_TASK
                    and c["half_acking"]["word_spout"]["acked"] + c["half_acking"]["word_spout"]["failed"]
                    == 2 * PER_TASK
                    and c["multi_stream"]["stream_aggregator"]["executed"] == 2 * PER_TASK * 11 // 10
                    and c["multi_stream"]["count_bolt"]["executed"] == 2 * PER_TASK
                    and c["custom_grouping"]["consume_bolt"]["executed"] == PER_TASK
                    and c["window_size"]["word_spout"]["acked"] == 2 * PER_TASK)  # each left its last window
        wait_for(done, timeout=120, interval=0.5, what="every example's tuples processed and acked")

        def checkpointed():  # the latest checkpoint of each count task holds all it counted
            docs = files(out["stateful_word_count"], "stateful_count-*.json")
            return len(docs) == 2 and sum(sum(d["state"].values()) for d in docs.values()) == 2 * PER_TASK
        wait_for(checkpointed, timeout=120, interval=0.5, what="the stateful counts in a checkpoint")
    finally:
        for t in TOPOLOGIES:
            subprocess.run([heron.python, "-m", "bittern", "kill", names[t]], env=heron.env, cwd=TREE,
                           capture_output=True, timeout=120)
    every = {w: 2 * PER_TASK // len(WORDS) for w in WORDS}

    # word count: exact counts, a word on one task; the hooks saw every point
    o = out["word_count"]
    counts = {task: Counter(d["counts"]) for task, d in files(o, "count_bolt-*.json").items()}
    assert sum(counts.values(), Counter()) == every
    assert not set(counts[min(counts)]) & set(counts[max(counts)])  # fields grouping
    spouts = files(o, "word_spout-*.json")
    assert {task: (d["sent"], d["acked"], d["failed"]) for task, d in spouts.items()} == \
        {task: (PER_TASK, ids(task), []) for task in spouts}
    hooks = files(o, "hook-word_spout-*.json")
    assert {task: (h["calls"], h["acked_ids"], h["streams"], h["wrong"]) for task, h in hooks.items()} == \
        {task: ({"prepare": 1, "emit": PER_TASK, "spout_ack": PER_TASK, "clean_up": 1}, ids(task),
                {"default": PER_TASK}, {}) for task in spouts}  # message ids: the spout's own
    hooks = files(o, "hook-count_bolt-*.json")
    n = {task: sum(c.values()) for task, c in counts.items()}
    assert {task: (h["calls"], h["wrong"]) for task, h in hooks.items()} == \
        {task: ({"prepare": 1, "bolt_execute": n[task], "emit": n[task], "bolt_ack": n[task], "clean_up": 1}, {})
         for task in counts}

    # half acking: the bolt fails every other tuple; the spout and the hooks hear of each
    o = out["half_acking"]
    bolts = files(o, "half_ack_bolt-*.json")
    assert sum(b["total"] for b in bolts.values()) == 2 * PER_TASK
    assert all((b["failed"], b["acked"]) == (b["total"] // 2, b["total"] - b["total"] // 2) for b in bolts.values())
    hooks = files(o, "hook-half_ack_bolt-*.json")
    assert {task: h["calls"] for task, h in hooks.items()} == \
        {task: {"prepare": 1, "bolt_execute": b["total"], "bolt_ack": b["acked"], "bolt_fail": b["failed"],
                "clean_up": 1} for task, b in bolts.items()}
    spouts, hooks = files(o, "word_spout-*.json"), files(o, "hook-word_spout-*.json")
    for task, s in spouts.items():
        assert sorted(s["acked"] + s["failed"]) == ids(task) and not set(s["acked"]) & set(s["failed"])
        h = hooks[task]
        assert (h["acked_ids"], h["failed_ids"], h["wrong"]) == (s["acked"], s["failed"], {})
        assert h["calls"] == {"prepare": 1, "emit": PER_TASK, "spout_ack": len(s["acked"]),
                              "spout_fail": len(s["failed"]), "clean_up": 1}
    assert sum(len(s["failed"]) for s in spouts.values()) == sum(b["failed"] for b in bolts.values())

    # multiple streams: ALL on both streams, fields on the words; auto hooks on every task
    o = out["multi_stream"]
    assert list(files(o, "stream_aggregator-*.json").values()) == \
        [{"streams": {"default": 2 * PER_TASK, "error": 2 * PER_TASK // 10}}]
    counts = {task: Counter(d["counts"]) for task, d in files(o, "count_bolt-*.json").items()}
    assert sum(counts.values(), Counter()) == every
    auto = {(os.path.basename(p).split("-")[1], task): h for p in glob.glob(os.path.join(o, "autohook-*.json"))
            for task, h in files(o, os.path.basename(p)).items()}
    spout_tasks = [task for c, task in auto if c == "spout"]
    assert len(spout_tasks) == 2 and all(
        (auto["spout", t]["calls"], auto["spout", t]["streams"]) ==
        ({"prepare": 1, "emit": PER_TASK * 11 // 10, "clean_up": 1}, {"default": PER_TASK, "error": PER_TASK // 10})
        for t in spout_tasks)  # at most once: nothing acked, no spout_ack
    for task, c in counts.items():
        total = sum(c.values())
        both = {"prepare": 1, "bolt_execute": total, "emit": total, "bolt_ack": total, "clean_up": 1}
        assert auto["count_bolt", task]["calls"] == both  # the auto hook and the one the bolt added
        assert files(o, f"hook-count_bolt-{task}.json")[task]["calls"] == both
    (agg,) = [h for (c, _), h in auto.items() if c == "stream_aggregator"]
    assert agg["calls"] == {"prepare": 1, "bolt_execute": 2 * PER_TASK * 11 // 10, "clean_up": 1}
    assert all(h["wrong"] == {} for h in auto.values())

    # custom grouping: every word to the first target task
    consumed = files(out["custom_grouping"], "consume_bolt-*.json")
    assert {task: d["total"] for task, d in consumed.items()} == \
        {task: (PER_TASK if task == min(consumed) else 0) for task in consumed}

    # window size: every tuple was in a window, and acked once it left the last one
    o = out["window_size"]
    windows = files(o, "window_bolt-*.json")
    assert sum(w["distinct"] for w in windows.values()) == 2 * PER_TASK
    assert all(w["sizes"] and max(w["sizes"]) <= w["distinct"] for w in windows.values())
    spouts = files(o, "word_spout-*.json")
    assert {task: (s["acked"], s["failed"]) for task, s in spouts.items()} == \
        {task: (ids(task), []) for task in spouts}

    # stateful word count: heronpy's State holds the exact counts at the last checkpoint
    docs = files(out["stateful_word_count"], "stateful_count-*.json")
    assert sum((Counter(d["state"]) for d in docs.values()), Counter()) == every
    assert all(d["checkpoint"] >= 1 for d in docs.values())
