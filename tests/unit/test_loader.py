"""Loading a topology file: found, missing, empty, ambiguous, broken."""
from __future__ import annotations

import os
import sys
import textwrap

import pytest

from bittern import loader
from bittern.errors import TopologyError

COMPONENTS = """
from bittern import Bolt, Grouping, Spout, Topology, TopologyBuilder

class WordSpout(Spout):
    outputs = ["word"]

class CountBolt(Bolt):
    outputs = ["word", "count"]
"""


@pytest.fixture(autouse=True)
def clean_import_state(monkeypatch):
    """The loader inserts into sys.path and sys.modules; undo both after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    sys.modules.pop(loader.MODULE_NAME, None)
    yield
    sys.modules.pop(loader.MODULE_NAME, None)
    sys.modules.pop("unit_loader_helper", None)


def write(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def test_class_style_file(tmp_path):
    p = write(tmp_path, "wordy.py", COMPONENTS + """
class WordCount(Topology):
    config = {"topology.stmgrs": 2}
    word = WordSpout.spec(par=2)
    count = CountBolt.spec(inputs={word: Grouping.fields("word")})
""")
    t = loader.load_topology(str(p))
    assert t.name == "wordy"  # the file's name for a class-style topology
    assert list(t.components) == ["word", "count"]
    assert t.components["word"].class_path == "bittern_topology:WordSpout"
    assert t.components["word"].par == 2
    assert t.config == {"topology.stmgrs": 2}
    assert t.source == {"file": str(p), "module": "bittern_topology", "sys_path": [str(tmp_path)]}
    assert load_named(p, "renamed").name == "renamed"


def load_named(p, name):
    sys.modules.pop(loader.MODULE_NAME, None)
    return loader.load_topology(str(p), name=name)


def test_builder_file_uses_the_builder_name(tmp_path):
    p = write(tmp_path, "b.py", COMPONENTS + """
builder = TopologyBuilder("from_builder")
w = builder.add_spout("w", WordSpout)
builder.add_bolt("c", CountBolt, inputs=[w])
""")
    t = loader.load_topology(str(p))
    assert t.name == "from_builder"
    assert [(c.name, c.kind) for c in t.components.values()] == [("w", "spout"), ("c", "bolt")]


def test_missing_file(tmp_path):
    p = tmp_path / "nope.py"
    with pytest.raises(TopologyError) as ei:
        loader.load_topology(str(p))
    assert str(ei.value) == f"topology file {str(p)!r} does not exist"


def test_directory_is_not_a_file(tmp_path):
    with pytest.raises(TopologyError) as ei:
        loader.load_topology(str(tmp_path))
    assert str(ei.value) == f"topology file {str(tmp_path)!r} is not a file"


def test_file_without_a_topology(tmp_path):
    p = write(tmp_path, "empty.py", COMPONENTS)
    with pytest.raises(TopologyError) as ei:
        loader.load_topology(str(p))
    assert str(ei.value) == (f"topology file {str(p)!r} defines no topology "
                             "(a Topology subclass or a TopologyBuilder)")


def test_file_with_two_topologies(tmp_path):
    p = write(tmp_path, "two.py", COMPONENTS + """
class First(Topology):
    word = WordSpout.spec()

second = TopologyBuilder("second")
second.add_spout("w", WordSpout)
""")
    with pytest.raises(TopologyError) as ei:
        loader.load_topology(str(p))
    assert str(ei.value) == (f"topology file {str(p)!r} defines 2 topologies (First, second); "
                             "keep one per file")


def test_imported_topology_classes_do_not_count(tmp_path):
    write(tmp_path, "unit_loader_helper.py", COMPONENTS + """
class HelperTopology(Topology):
    word = WordSpout.spec()
""")
    p = write(tmp_path, "main.py", """
from unit_loader_helper import HelperTopology, WordSpout
from bittern import Topology

class Mine(Topology):
    w = WordSpout.spec(par=3)
""")
    t = loader.load_topology(str(p))
    assert list(t.components) == ["w"]
    assert t.components["w"].class_path == "unit_loader_helper:WordSpout"


def test_file_raising_at_import_carries_the_user_traceback(tmp_path):
    p = write(tmp_path, "broken.py", """
import os

def helper():
    return {}["missing key"]

helper()
""")
    with pytest.raises(TopologyError) as ei:
        loader.load_topology(str(p))
    err = ei.value
    assert str(err) == f"topology file {str(p)!r} failed to import: KeyError: 'missing key'"
    tb = err.user_traceback
    assert tb.startswith("Traceback (most recent call last):")
    assert f'File "{p}", line 7, in <module>' in tb
    assert f'File "{p}", line 5, in helper' in tb
    assert 'return {}["missing key"]' in tb
    assert tb.rstrip().endswith("KeyError: 'missing key'")
    assert "bittern/loader.py" not in tb  # the loader's own frame is cut
    assert loader.MODULE_NAME not in sys.modules  # a half-imported module is not left behind


def test_syntax_error_in_the_file(tmp_path):
    p = write(tmp_path, "syn.py", "def f(:\n    pass\n")
    with pytest.raises(TopologyError) as ei:
        loader.load_topology(str(p))
    assert str(ei.value).startswith(f"topology file {str(p)!r} failed to import: SyntaxError: ")
    assert f'File "{p}", line 1' in ei.value.user_traceback


def test_validation_error_is_prefixed_with_the_file_name(tmp_path):
    p = write(tmp_path, "invalid.py", COMPONENTS + """
class Bad(Topology):
    word = WordSpout.spec()
    count = CountBolt.spec(inputs={word: Grouping.fields("wrod")})
""")
    with pytest.raises(TopologyError) as ei:
        loader.load_topology(str(p))
    assert str(ei.value) == ("invalid.py: component 'count': input 'word' stream 'default' has no field "
                             "'wrod' to group on (fields: ['word'])")


def test_code_paths_include_src_beside_or_above(tmp_path):
    proj = tmp_path / "proj"
    (proj / "topologies").mkdir(parents=True)
    (proj / "src").mkdir()
    f = proj / "topologies" / "t.py"
    f.write_text("")
    assert loader.code_paths(str(f)) == [str(proj / "topologies"), str(proj / "src")]
    (proj / "topologies" / "src").mkdir()
    assert loader.code_paths(str(f)) == [str(proj / "topologies"), str(proj / "topologies" / "src"),
                                         str(proj / "src")]


def test_components_from_src_dir_and_load_class(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "unit_loader_helper.py").write_text(textwrap.dedent(COMPONENTS))
    p = write(tmp_path, "t.py", """
from bittern import Topology
from unit_loader_helper import WordSpout

class T(Topology):
    w = WordSpout.spec()
""")
    t = loader.load_topology(str(p))
    assert t.source["sys_path"] == [str(tmp_path), str(tmp_path / "src")]
    # in an instance process: the topology module is imported again on demand
    sys.modules.pop(loader.MODULE_NAME, None)
    cls = loader.load_class(t, t.components["w"].class_path)
    assert cls.__name__ == "WordSpout" and cls.outputs == ["word"]
    assert loader.MODULE_NAME in sys.modules


def test_load_class_of_a_class_in_the_topology_file(tmp_path):
    p = write(tmp_path, "own.py", COMPONENTS + """
class T(Topology):
    w = WordSpout.spec()
""")
    t = loader.load_topology(str(p))
    sys.modules.pop(loader.MODULE_NAME, None)
    cls = loader.load_class(t, "bittern_topology:WordSpout")
    assert cls.__module__ == "bittern_topology" and cls.outputs == ["word"]
    with pytest.raises(TopologyError, match="module 'bittern_topology' has no attribute 'Nope'"):
        loader.load_class(t, "bittern_topology:Nope")
