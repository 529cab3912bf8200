"""The streamparse DSL translated into Bittern's definition (bittern/compat/streamparse.py),
with the real streamparse from PyPI in a throwaway venv: the topology files under
tests/topologies/streamparse_dsl/ are loaded and validated there (as ``bittern submit``
would, config checks included) by one subprocess, whose findings the tests read.

Named streams, a direct stream (subscribed with Grouping.DIRECT, and implied by a list
input whose default stream is direct), every grouping, shell components, a
``streamparse_run`` script with ``-s``, per-environment parallelism, Storm config keys;
and the files Bittern must refuse with one line naming the component."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from foreignvenv import streamparse_python  # noqa: F401 - the streamparse venv fixture

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DSL = os.path.join(ROOT, "tests", "topologies", "streamparse_dsl", "topologies")

# Loads each file given like `bittern submit` does and prints one JSON document.
PROBE = r"""
import json, logging, os, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
from bittern.cli.launch import prepare
from bittern.errors import BitternError
out = {}
for path in sys.argv[1:]:
    warnings = []
    try:
        tdef, conf = prepare(path, warn=warnings.append)
        out[os.path.basename(path)] = {"definition": tdef.to_dict(), "config": conf, "warnings": warnings,
                                       "python": sys.executable}
    except BitternError as e:
        out[os.path.basename(path)] = {"error": str(e)}
print(json.dumps(out))
"""

BAD = {
    "bad_java.py": "component 'counter': JavaBolt is a Java component (com.example.CountBolt); "
                   "Bittern runs Python and multilang components only",
    "bad_missing.py": "component 'ghost': cannot resolve class 'bolts.nowhere.GhostBolt': "
                      "ModuleNotFoundError: No module named 'bolts'",
    "bad_not_a_bolt.py": "component 'odd': 'dsl_components.NotAComponent' is not a pystorm Bolt subclass",
    "bad_java_grouping.py": "component 'custom': input 'source' uses a Java custom grouping",
    "bad_local_class.py": "component 'local': class make.<locals>.Local is defined inside a function",
}


@pytest.fixture(scope="module")
def probe(streamparse_python):
    files = ["streams.py", "inline.py", *BAD]
    r = subprocess.run([streamparse_python, "-c", PROBE, *[os.path.join(DSL, f) for f in files]],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def components(probe, name):
    doc = probe[0][name]
    assert "error" not in doc, doc
    return {c["name"]: c for c in doc["definition"]["components"]}


def inputs(comp):
    return {(i["component"], i["stream"]): i["grouping"] for i in comp["inputs"]}


def test_named_and_direct_streams(probe):
    comps = components(probe, "streams.py")
    assert comps["source"]["outputs"] == {"default": {"fields": ["n"], "direct": False},
                                          "words": {"fields": ["word", "n"], "direct": False},
                                          "picked": {"fields": ["n"], "direct": True}}
    assert inputs(comps["picked"]) == {("source", "picked"): {"type": "direct"}}
    # inputs=[spec] on a spec whose default stream is direct: streamparse makes it DIRECT
    assert comps["direct_only"]["outputs"] == {"default": {"fields": ["n"], "direct": True}}
    assert inputs(comps["auto_direct"]) == {("direct_only", "default"): {"type": "direct"}}


def test_groupings(probe):
    comps = components(probe, "streams.py")
    assert inputs(comps["by_word"]) == {("source", "words"): {"type": "fields", "fields": ["word"]},
                                        ("source", "default"): {"type": "global"}}  # Storm: fields([])
    assert inputs(comps["shuffled"]) == {("by_word", "default"): {"type": "shuffle"},  # a list: shuffle
                                         ("picked", "default"): {"type": "shuffle"}}
    assert inputs(comps["everyone"]) == {("by_word", "default"): {"type": "all"},
                                         ("picked", "default"): {"type": "none"},
                                         ("auto_direct", "default"): {"type": "local_or_shuffle"}}


def test_python_components_run_through_streamparse_run(probe):
    comps = components(probe, "streams.py")
    python = probe[0]["streams.py"]["python"]
    runner = [python, "-m", "bittern.compat.streamparse"]
    assert comps["source"]["kind"] == "spout" and comps["source"]["par"] == 2
    assert comps["source"]["class"] == "instance.shell:ShellSpout"
    assert comps["source"]["config"]["multilang.command"] == runner + ["dsl_components.Source"]
    assert comps["by_word"]["class"] == "instance.shell:ShellBolt"
    assert comps["by_word"]["config"]["multilang.command"] == runner + ["dsl_components.Route"]
    assert comps["by_word"]["par"] == 3  # par={"prod": 3, "beta": 1}: the largest
    # no -s and no config.json serializer: the host's serializer (not pinned per component)
    assert "topology.multilang.serializer" not in comps["source"]["config"]
    # ShellBolt.spec(command="streamparse_run", script="-s msgpack module.Class")
    assert comps["wrapped"]["config"]["multilang.command"] == runner + ["-s", "msgpack", "dsl_components.Route"]
    assert comps["wrapped"]["config"]["topology.multilang.serializer"] == "msgpack"
    # a class defined in the topology file: the child imports the file by its name
    here = components(probe, "inline.py")["here"]
    assert here["config"]["multilang.command"] == runner + ["inline.Here"]


def test_shell_component_script_found_in_the_projects_src(probe):
    split = components(probe, "streams.py")["split"]
    assert split["config"]["multilang.command"] == ["python3"]
    assert split["config"]["multilang.script"] == os.path.join("..", "src", "split.py")
    assert split["outputs"] == {"default": {"fields": ["word"], "direct": False}}


def test_storm_config_carries_over(probe):
    doc = probe[0]["streams.py"]
    conf = doc["config"]
    assert doc["warnings"] == []  # nothing Storm-specific is warned about
    assert conf["topology.reliability.mode"] == "ATMOST_ONCE"  # topology.acker.executors = 0
    assert conf["topology.stmgrs"] == 2  # topology.workers
    assert conf["topology.tick.tuple.freq.secs"] == 2
    assert conf["topology.max.spout.pending"] == 10
    assert conf["topology.message.timeout.secs"] == 5
    assert "topology.no.such.thing" not in conf  # no Bittern meaning: dropped
    for key, val in [("storm.zookeeper.servers", ["zk1"]), ("pystorm.log.level", "debug"), ("my.key", "v")]:
        assert conf[key] == val  # reach the components' storm_conf
    by_word = components(probe, "streams.py")["by_word"]["config"]
    assert by_word["topology.tick.tuple.freq.secs"] == 1 and "topology.no.such.thing" not in by_word
    # said at debug level
    assert "Storm config key 'topology.no.such.thing' has no meaning in Bittern; ignored" in probe[1]
    # a topology that says nothing about acking runs with Storm's default: ackers on
    assert probe[0]["inline.py"]["config"]["topology.reliability.mode"] == "ATLEAST_ONCE"
    assert probe[0]["inline.py"]["definition"]["name"] == "inline"  # the file's name, as sparse


@pytest.mark.parametrize("name", sorted(BAD))
def test_refused_with_one_line_naming_the_component(probe, name):
    err = probe[0][name].get("error")
    assert err is not None, probe[0][name]
    assert "\n" not in err
    assert err.startswith(f"{name}: ") and BAD[name] in err, err


# -- the project's config.json (no streamparse needed: this process) ---------------------

def project(tmp_path, doc, where="root"):
    topo = tmp_path / "proj" / "topologies"
    topo.mkdir(parents=True)
    if doc is not None:
        target = tmp_path / "proj" if where == "root" else topo
        (target / "config.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(topo / "wordcount.py")


@pytest.mark.parametrize("doc, where, want", [
    ({"serializer": "msgpack", "topology_specs": "topologies/"}, "root", "msgpack"),
    ({"serializer": "json"}, "topologies", "json"),
    ({"topology_specs": "topologies/"}, "root", None),
    (None, "root", None),
])
def test_serializer_from_the_projects_config_json(tmp_path, doc, where, want):
    from bittern.compat.streamparse import project_serializer
    assert project_serializer(project(tmp_path, doc, where)) == want


@pytest.mark.parametrize("doc, message", [
    ("{not json", "cannot be read"),
    ({"serializer": "thrift"}, "serializer must be one of json, msgpack, got 'thrift'"),
])
def test_a_bad_config_json_is_named(tmp_path, doc, message):
    from bittern.compat.streamparse import project_serializer
    from bittern.errors import TopologyError
    with pytest.raises(TopologyError, match="streamparse project config .*config.json") as e:
        project_serializer(project(tmp_path, doc))
    assert message in str(e.value)
