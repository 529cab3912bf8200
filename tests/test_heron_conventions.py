"""Heron's conventions with the real heronpy 0.20.5 from PyPI (a throwaway venv:
bittern.compat.heron.PIP_REQUIREMENTS), and Python objects in component config:

* components named ``__integration_test_...`` and a stream named ``__results`` run with
  exact output; a name Bittern uses itself (``__system``) is refused in one line;
* config values that are a function, a lambda, an advanced list iterator, a
  generator-backed iterator, a class instance, a tuple and a set reach ``initialize``
  equal (cloudpickle, as heronpy), shown as ``<pickled: TYPE>`` by the HTTP API; a
  live generator is refused in one line naming the component and the key; the same
  with the standard pickle in a Bittern topology, in local and in cluster mode;
* topologies handed over the way heron-cli takes them: a class made by a factory
  (heronpy's ``TopologyType``) runs; ``Topology.write()`` and ``build_and_submit()``
  at module level or in the ``__main__`` block are taken, and write no ``.defn`` file;
* mistakes heronpy itself catches while the file is imported are one line naming the
  file's line (and the component when heronpy was working on one).
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import textwrap
from collections import Counter

import pytest


from conftest import ROOT, wait_for
from test_heron import heron, heron_python  # noqa: F401 - the heronpy venv fixtures, shared

TOPOLOGIES = os.path.join(ROOT, "tests", "topologies")
WORDS = ["nathan", "mike", "jackson", "golda", "bertels"]  # heron_components.WORDS




def jsonl(pattern):
    rows = {}
    for path in glob.glob(pattern):
        with open(path) as f:
            rows[path] = [json.loads(ln) for ln in f if ln.strip()]
    return rows


def one_line_error(r):
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_underscore_names_and_python_objects_in_config(heron, home, tmp_path):
    from test_httpapi import ApiServer
    out, n = str(tmp_path / "out"), 60
    name = "heron_conventions"
    heron("submit", os.path.join(TOPOLOGIES, "heron_conventions.py"), "--config", f"heron.out={out}",
          "--config", f"heron.numbers={n}", check=True)
    try:
        wait_for(lambda: sum(len(r) for r in jsonl(os.path.join(out, "aggregator-*.jsonl")).values()) >= n + 1,
                 timeout=40, what=f"{n} tuples at the aggregator")
        server = ApiServer(heron, tmp_path)
        try:
            plan = {c["name"]: c for c in server.json(f"/api/v1/topologies/{name}")["logical_plan"]["components"]}
            shown = server.json(f"/api/v1/topologies/{name}/components/__integration_test_aggregator_bolt")
        finally:
            server.stop()
        logs = heron("logs", name, "__integration_test_aggregator_bolt", check=True).stdout
    finally:
        heron("kill", name, check=True)

    (rows,) = jsonl(os.path.join(out, "aggregator-*.jsonl")).values()
    assert rows[0] == {"component": "__integration_test_aggregator_bolt", "initialize": {
        "function": 49, "lambda": 42, "iterator": ["b", "c"], "countdown": [3, 2, 1], "instance_equal": True,
        "topology_function": -5, "instance": {"type": "Point", "repr": "Point(3, 4)"},
        "tuple": {"type": "tuple", "repr": "(1, 'two')"}, "set": {"type": "set", "repr": "{3}"}}}
    assert sorted((r["n"], r["square"]) for r in rows[1:]) == [(i, i * i) for i in range(n)]  # exact, once each
    assert {(r["from"], r["stream"]) for r in rows[1:]} == {("__integration_test_square_bolt", "__results")}

    assert list(plan) == ["__integration_test_spout", "__integration_test_square_bolt",
                          "__integration_test_aggregator_bolt"]
    assert plan["__integration_test_square_bolt"]["outputs"] == {"__results": {"fields": ["n", "square"],
                                                                               "direct": False}}
    conf = shown["definition"]["config"]
    assert {k: conf[k] for k in conf if k.startswith("conventions.")} == {
        "conventions.function": "<pickled: function>", "conventions.lambda": "<pickled: function>",
        "conventions.iterator": "<pickled: list_iterator>", "conventions.countdown": "<pickled: Countdown>",
        "conventions.instance": "<pickled: Point>", "conventions.tuple": "<pickled: tuple>",
        "conventions.set": "<pickled: set>"}
    assert plan["__integration_test_square_bolt"]["config"]["conventions.square"] == "<pickled: function>"
    assert "__integration_test_aggregator_bolt[" in logs


def test_a_name_bittern_uses_is_refused_in_one_line(heron, home):
    r = heron("run", os.path.join(TOPOLOGIES, "heron_reserved.py"), "--duration", 1, timeout=60)
    assert one_line_error(r) == ("error: heron_reserved.py: component '__system': the name '__system' is reserved "
                                 "by Bittern (the source of tick tuples); choose another")
    assert not glob.glob(os.path.join(home, "state", "topologies", "*"))  # nothing recorded


def test_a_value_cloudpickle_cannot_carry_is_one_line(heron):
    r = heron("run", os.path.join(TOPOLOGIES, "heron_unpicklable.py"), "--duration", 1, timeout=60)
    assert one_line_error(r) == ("error: heron_unpicklable.py: component 'count': config key 'count.numbers': "
                                 "a generator cannot be pickled (TypeError: cannot pickle 'generator' object)")


def test_a_topology_made_by_a_factory_runs(heron, tmp_path):
    out, n = str(tmp_path / "out"), 500
    r = heron("run", os.path.join(TOPOLOGIES, "heron_factory.py"), "--json", "--duration", 3,
              "--config", f"heron.out={out}", "--config", f"heron.words={n}", timeout=90, check=True)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["topology"] == "factory_word_count"  # the name the factory gave TopologyType
    counts = Counter(rec["word"] for rows in jsonl(os.path.join(out, "count-*.jsonl")).values()
                     for rec in rows if "word" in rec)
    assert counts == {w: 2 * n // len(WORDS) for w in WORDS}  # two spout tasks, n words each


COMPONENTS = """
from heronpy.api.bolt.bolt import Bolt
from heronpy.api.spout.spout import Spout
from heronpy.api.stream import Grouping
from heronpy.api.topology import Topology, TopologyBuilder, TopologyType

class Words(Spout):
    outputs = ["word"]

class Count(Bolt):
    pass
"""

LOAD = """
import glob, json, os, sys
from bittern.errors import TopologyError
from bittern.loader import load_topology
try:
    t = load_topology(sys.argv[1])
except TopologyError as e:
    print(json.dumps({"error": str(e), "traceback": getattr(e, "user_traceback", None)}))
else:
    from heronpy.api.topology import Topology, TopologyBuilder
    print(json.dumps({"name": t.name, "components": [[c.name, c.par] for c in t.components.values()],
                      "defn": glob.glob(os.path.join(os.environ["TMPDIR"], "*.defn")),
                      "restored": TopologyBuilder.build_and_submit.__qualname__ == "TopologyBuilder.build_and_submit"
                                  and Topology.write.__qualname__ == "Topology.write"}))
"""


def load(heron_python, tmp_path, body):
    path = tmp_path / "topo.py"
    path.write_text(textwrap.dedent(COMPONENTS) + textwrap.dedent(body))
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    r = subprocess.run([heron_python, "-c", LOAD, str(path)], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env=dict(os.environ, TMPDIR=str(tmp)))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("body, name", [
    ("""
     import sys
     if __name__ == "__main__":
         w = Words.spec(par=2)
         c = Count.spec(par=1, inputs={w: Grouping.SHUFFLE})
         TopologyType(sys.argv[1] + "_written", (Topology,), {"words": w, "count": c}).write()
     """, "topo_written"),
    ("""
     def make(par):
         class WordCount(Topology):
             words = Words.spec(par=par)
             count = Count.spec(par=1, inputs={words: Grouping.SHUFFLE})
         return WordCount
     Made = make(2)
     """, "topo"),
    ("""
     def submit():
         b = TopologyBuilder("module_level")
         w = b.add_spout("words", Words, 2)
         b.add_bolt("count", Count, 1, inputs={w: Grouping.SHUFFLE})
         b.build_and_submit()
     submit()
     """, "module_level"),
    ("""
     class WordCount(Topology):
         words = Words.spec(par=2)
         count = Count.spec(par=1, inputs={words: Grouping.SHUFFLE})
     WordCount.write()
     """, "topo"),
], ids=["main-block-write", "factory-class", "module-level-build-and-submit", "module-level-write"])
def test_topologies_handed_over_as_heron_cli_takes_them(heron_python, tmp_path, body, name):
    got = load(heron_python, tmp_path, body)
    assert got == {"name": name, "components": [["words", 2], ["count", 1]], "defn": [], "restored": True}, got


@pytest.mark.parametrize("body, message", [
    ("""
     class WordCount(Topology):
         words = Words.spec(par="two")
     """, "line 14: heronpy refused it: AssertionError at `words = Words.spec(par=\"two\")`"),
    ("""
     class WordCount(Topology):
         words = Words.spec(par=1)
         count = Count.spec(par=1, inputs={words: Grouping.SHUFFLE}, config={"g": (i for i in range(2))})
     """, "line 13: component 'count': heronpy refused it: TypeError: cannot pickle 'generator' object"),
    ("""
     b = TopologyBuilder("dup")
     w = b.add_spout("words", Words, 1)
     b.add_bolt("words", Count, 1, inputs={w: Grouping.SHUFFLE})
     """, "line 15: heronpy refused it: ValueError: Attempting to add duplicate spec name: 'words'"),
], ids=["bad-parallelism", "unpicklable-at-class-definition", "duplicate-name"])
def test_what_heronpy_refuses_at_import_is_one_line(heron_python, tmp_path, body, message):
    got = load(heron_python, tmp_path, body)
    assert got["traceback"] is None
    assert got["error"].startswith(f"topology file {str(tmp_path / 'topo.py')!r} {message}"), got["error"]


def pickled_records(out, n):
    rows = [r for rs in jsonl(os.path.join(out, "record-*.jsonl")).values() for r in rs]
    return rows if len(rows) >= n + 1 else None


PICKLED_INIT = {"iterator": ["b", "c"], "countdown": [3, 2, 1], "instance": True, "tuple": "(1, 'two')",
                "set": "{3}", "topology_point": True, "context_point": True}


def test_pickled_config_in_a_bittern_topology_local(bittern, tmp_path):
    out, n = str(tmp_path / "out"), 40
    bittern("submit", os.path.join(TOPOLOGIES, "pickled_config.py"), "--config", f"pickled.out={out}",
            "--config", f"pickled.numbers={n}", check=True)
    try:
        rows = wait_for(lambda: pickled_records(out, n), timeout=40, what="every number recorded")
        doc = bittern.state("topologies", "pickled_config")
    finally:
        bittern("kill", "pickled_config", check=True)
    assert rows[0] == {"initialize": PICKLED_INIT}
    assert sorted((r["n"], r["result"]) for r in rows[1:]) == [(i, 3 * i) for i in range(n)]
    comps = {c["name"]: c for c in doc["definition"]["components"]}
    assert comps["apply"]["config"]["pickled.fn"] == "<pickled: function>"
    assert set(comps["apply"]["pickled"]) == {"pickled.fn"}
    assert doc["config"]["pickled.topology.point"] == "<pickled: Point>"


def test_pickled_config_in_cluster_mode(cluster, tmp_path):
    """Through nimbus, ZooKeeper and a supervisor: the values arrive as JSON with their
    pickles, and only the instances unpickle them."""
    cluster.start_nimbus()
    cluster.start_supervisor("a")
    out, n = str(tmp_path / "out"), 40
    cluster.cli("submit", os.path.join(TOPOLOGIES, "pickled_config.py"), "--config", f"pickled.out={out}",
                "--config", f"pickled.numbers={n}", check=True)
    try:
        rows = wait_for(lambda: pickled_records(out, n), timeout=60, what="every number recorded")
        status, doc = cluster.api("/api/v1/topologies/pickled_config")
    finally:
        cluster.cli("kill", "pickled_config", check=True)
    assert rows[0] == {"initialize": PICKLED_INIT}
    assert sorted((r["n"], r["result"]) for r in rows[1:]) == [(i, 3 * i) for i in range(n)]
    assert status == 200
    comps = {c["name"]: c for c in doc["logical_plan"]["components"]}
    assert comps["recorder"]["config"]["pickled.instance"] == "<pickled: Point>"
    assert comps["recorder"]["config"]["pickled.iterator"] == "<pickled: list_iterator>"
    assert doc["config"]["pickled.topology.point"] == "<pickled: Point>"
    # the bytes are not shown: only the instances see them
    assert "pickled" not in doc["logical_plan"] and all("pickled" not in c for c in comps.values())
