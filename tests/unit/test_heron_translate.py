"""heronpy topology files -> Bittern TopologyDefs (bittern/compat/heron.py).

heronpy is not in the project's venv, so each case loads a small topology file with
``bittern.loader.load_topology`` in a throwaway venv holding the real heronpy 0.20.5
(bittern.compat.heron.PIP_REQUIREMENTS) and prints the definition as JSON, or the
one-line error, which the test then checks.
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from foreignvenv import heron_python  # noqa: F401 - the heronpy venv fixture

LOAD = """
import json, os, sys
from bittern.errors import TopologyError
from bittern.loader import load_topology
argv, submit = list(sys.argv), None
try:
    tdef = load_topology(sys.argv[1])
except TopologyError as e:
    print(json.dumps({"error": str(e), "traceback": getattr(e, "user_traceback", None)}))
else:
    from heronpy.api.topology import TopologyBuilder
    d = tdef.to_dict()
    d["components"] = {c["name"]: c for c in d["components"]}
    d["argv_restored"] = sys.argv == argv
    d["submit_restored"] = TopologyBuilder.build_and_submit.__qualname__ == "TopologyBuilder.build_and_submit"
    print(json.dumps(d))
"""

COMPONENTS = """
from heronpy.api.bolt.bolt import Bolt
from heronpy.api.custom_grouping import ICustomGrouping
from heronpy.api.spout.spout import Spout
from heronpy.api.stream import Grouping, Stream
from heronpy.api.topology import Topology, TopologyBuilder

class Words(Spout):
    outputs = ["word"]

class Two(Spout):
    outputs = ["a", Stream(fields=["b"]), Stream(fields=["x", "y"], name="pairs")]

class Count(Bolt):
    outputs = ["word", "count"]

class Sink(Bolt):
    pass

class FirstTask(ICustomGrouping):
    def prepare(self, context, component, stream, target_tasks):
        self.tasks = sorted(target_tasks)

    def choose_tasks(self, values):
        return self.tasks[:1]
"""


@pytest.fixture
def load(heron_python, tmp_path):
    def load(body, name="topo.py", env=None):
        path = tmp_path / name
        path.write_text(COMPONENTS + textwrap.dedent(body))
        run_env = {k: v for k, v in os.environ.items() if k != "HERON_OPTIONS"}
        run_env.update(env or {})
        r = subprocess.run([heron_python, "-c", LOAD, str(path)], capture_output=True, text=True,
                           timeout=60, cwd=str(tmp_path), env=run_env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])
    return load


def test_class_style(load):
    d = load("""
        class WordCount(Topology):
            config = {"topology.reliability.mode": "ATLEAST_ONCE", "topology.message.timeout.secs": "12"}
            words = Words.spec(par=2)
            two = Two.spec(name="both", optional_outputs=[Stream(fields=["z"], name="extra")])
            count = Count.spec(par=3, inputs={words: Grouping.fields("word"), two["pairs"]: Grouping.LOWEST},
                               config={"topology.tick.tuple.freq.secs": 2})
            sink = Sink.spec(inputs=[count, two])
        """)
    assert d["name"] == "topo"  # class style: the file's name, as Bittern's own class style
    assert d["config"] == {"topology.max.spout.pending": 100, "topology.reliability.mode": "ATLEAST_ONCE",
                           "topology.message.timeout.secs": 12}
    c = d["components"]
    assert list(c) == ["words", "both", "count", "sink"]
    assert c["words"]["class"] == "bittern.compat.heron_runtime:HeronSpout" and c["words"]["par"] == 2
    assert c["words"]["config"] == {"heronpy.class": "bittern_topology:Words"}
    assert c["both"]["outputs"] == {"default": {"fields": ["a", "b"], "direct": False},  # names + default Stream
                                    "pairs": {"fields": ["x", "y"], "direct": False},
                                    "extra": {"fields": ["z"], "direct": False}}
    assert c["count"]["class"] == "bittern.compat.heron_runtime:HeronBolt" and c["count"]["par"] == 3
    assert c["count"]["config"] == {"topology.tick.tuple.freq.secs": 2, "heronpy.class": "bittern_topology:Count"}
    assert c["count"]["inputs"] == [
        {"component": "words", "stream": "default", "grouping": {"type": "fields", "fields": ["word"]}},
        {"component": "both", "stream": "pairs", "grouping": {"type": "global"}}]
    assert c["sink"]["outputs"] == {}
    assert [(i["component"], i["grouping"]["type"]) for i in c["sink"]["inputs"]] == [("count", "shuffle"),
                                                                                    ("both", "shuffle")]


def test_class_style_imports_without_heron_options(load):
    """heronpy's TopologyType wants HERON_OPTIONS when the class is defined; the loader
    gives it one, and one the user set is left alone."""
    body = """
        class T(Topology):
            words = Words.spec()
        """
    assert "error" not in load(body)
    assert "error" not in load(body, env={"HERON_OPTIONS": "cmdline.topologydefn.tmpdirectory=/tmp"})


def test_builder_in_main_block_config_and_groupings(load):
    d = load("""
        import sys
        if __name__ == "__main__":
            builder = TopologyBuilder(name=sys.argv[1] + "_x")
            words = builder.add_spout("words", Words, par=1)
            two = builder.add_spout("two", Two, par=1)
            builder.add_bolt("count", Count, par=1, inputs={words: Grouping.ALL, two["pairs"]: Grouping.NONE},
                             config={"topology.component.parallelism": "4", "my.key": [1, 2]})
            builder.add_bolt("first", Sink, par=2, inputs={words: Grouping.custom(FirstTask())})
            builder.add_bolt("named", Sink, par=2, inputs={words: Grouping.custom("topo.FirstTask")})
            builder.set_config({"topology.reliability.mode": "ATLEAST_ONCE",
                                "topology.max.spout.pending": "7", "topology.enable.message.timeouts": "false",
                                "topology.tick.tuple.freq.secs": "0.5", "topology.container.ram": 2 * 2 ** 30,
                                "topology.team.name": "streams"})
            builder.build_and_submit()
            raise AssertionError("not reached: build_and_submit stops the block")
        """)
    assert d["name"] == "topo_x"  # sys.argv[1] is the file's name
    assert d["argv_restored"] and d["submit_restored"]
    assert d["config"] == {"topology.reliability.mode": "ATLEAST_ONCE", "topology.max.spout.pending": 7,
                           "topology.enable.message.timeouts": False, "topology.tick.tuple.freq.secs": 0.5,
                           "topology.container.ram.mb": 2048.0, "topology.team.name": "streams"}
    c = d["components"]
    assert c["words"]["config"]["heronpy.class"] == "bittern_topology:Words"  # __main__ -> the module
    assert c["count"]["par"] == 4  # topology.component.parallelism overrides par, as in Heron
    assert c["count"]["config"] == {"my.key": [1, 2], "heronpy.class": "bittern_topology:Count"}
    assert [i["grouping"]["type"] for i in c["count"]["inputs"]] == ["all", "none"]
    custom = c["first"]["inputs"][0]["grouping"]
    assert custom["type"] == "custom" and "pickle" in custom["custom"]  # heronpy's cloudpickled object
    assert c["named"]["inputs"][0]["grouping"]["custom"] == {"class": "topo:FirstTask"}


def test_module_level_builder_keeps_its_name(load):
    d = load("""
        builder = TopologyBuilder("my_topology")
        words = builder.add_spout("words", Words, par=2)
        builder.add_bolt("count", Count, par=1, inputs=[words])
        """)
    assert d["name"] == "my_topology" and d["components"]["words"]["par"] == 2


@pytest.mark.parametrize("body, error", [
    ("""
     if __name__ == "__main__":
         class Local(Words):
             pass
         b = TopologyBuilder("t")
         b.add_spout("local", Local, par=1)
         b.build_and_submit()
     """, "component 'local': class Local is defined inside the topology file's __main__ block"),
    ("""
     if __name__ == "__main__":
         b = TopologyBuilder("t")
         w = b.add_spout("words", Words, par=1)
         b.add_bolt("count", Count, par=1, inputs={w: Grouping.DIRECT})
         b.build_and_submit()
     """, "component 'count': input 'words' stream 'default': Grouping.DIRECT is not supported"),
    ("""
     if __name__ == "__main__":
         b = TopologyBuilder("t")
         b.add_spout("quiet", Sink, par=1)
         b.build_and_submit()
     """, "component 'quiet': a heronpy bolt needs at least one input"),  # Sink.spec made a bolt
    ("""
     from heronpy.api.component.component_spec import HeronComponentSpec
     if __name__ == "__main__":
         b = TopologyBuilder("t")
         b.add_spec(HeronComponentSpec("odd", "topo.Count", True, 1, outputs=["word"]))
         b.build_and_submit()
     """, "component 'odd': topo.Count is not a heronpy Spout"),
    ("""
     if __name__ == "__main__":
         b = TopologyBuilder("t")
         b.add_spout("mute", type("Mute", (Spout,), {"__module__": "topo"}), par=1)
         b.build_and_submit()
     """, "component 'mute': cannot import class 'topo.Mute'"),
    ("""
     if __name__ == "__main__":
         b = TopologyBuilder("t")
         b.add_spout("words", Words, par=1)
         b.add_bolt("count", Count, par=1, inputs=[])
         b.build_and_submit()
     """, "component 'count': a heronpy bolt needs at least one input"),
    ("""
     if __name__ == "__main__":
         b = TopologyBuilder("t")
         w = b.add_spout("words", Words, par=1)
         b.add_bolt("count", Count, par=1, inputs={w: Grouping.fields("nope")})
         b.build_and_submit()
     """, "component 'count': input 'words' stream 'default' has no field 'nope'"),
    ("""
     if __name__ == "__main__":
         b = TopologyBuilder("t")
         w = b.add_spout("words", Words, par=1)
         b.add_bolt("count", Count, par=1, inputs={("words", "default"): Grouping.SHUFFLE})
         b.build_and_submit()
     """, "component 'count': cannot use ('words', 'default') as an input"),
    ("""
     import sys
     if __name__ == "__main__":
         if len(sys.argv) != 3:
             sys.exit(1)
     """, "its __main__ block exited (code 1) before build_and_submit()"),
    ("""
     if __name__ == "__main__":
         pass
     """, "defines no topology"),
])
def test_bad_input_names_the_component(load, body, error):
    d = load(body)
    assert "error" in d, d
    assert error in d["error"] and "\n" not in d["error"], d["error"]


def test_a_failing_main_block_shows_the_users_traceback(load):
    d = load("""
        def build():
            raise ValueError("no words today")
        if __name__ == "__main__":
            build()
        """)
    assert "its __main__ block failed: ValueError: no words today" in d["error"]
    assert 'raise ValueError("no words today")' in d["traceback"]
