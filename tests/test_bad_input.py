"""Bad input gets a one-line error naming the file / component / field, a non-zero
exit, and leaves no process or state behind (the ``home`` fixture checks processes)."""
from __future__ import annotations

import os
import textwrap

import pytest

HEADER = """
from bittern import Bolt, Grouping, Spout, Stream, Topology, TopologyBuilder

class S(Spout):
    outputs = ["n"]
    def initialize(self, config, context):
        self.i = 0
    def next_tuple(self):
        if self.i < 100:
            self.emit([self.i]); self.i += 1

class B(Bolt):
    outputs = ["n"]
    def process(self, tup):
        self.emit([tup.values[0]])
"""


def write(tmp_path, body, name="topo.py"):
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return str(path)


def assert_clean_failure(bittern, home, r, *needles):
    assert r.returncode != 0, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert errors, r.stderr
    first = errors[0]
    # nothing but the start-up notice may come before the error
    assert all(ln.startswith("topology ") for ln in lines[:lines.index(first)]), r.stderr
    for n in needles:
        assert n in first, f"{n!r} not in {first!r}"
    topo_dir = os.path.join(home, "state", "topologies")
    assert not os.path.isdir(topo_dir) or os.listdir(topo_dir) == [], os.listdir(topo_dir)


@pytest.mark.parametrize("verb", ["run", "submit"])
def test_missing_file(bittern, home, tmp_path, verb):
    r = bittern(verb, tmp_path / "nope.py")
    assert_clean_failure(bittern, home, r, "nope.py", "does not exist")


CASES = {
    "no_topology": ("x = 1\n", ["defines no topology"]),
    "two_topologies": ("""
        class A(Topology):
            s = S.spec()
        class C(Topology):
            s = S.spec()
        """, ["defines 2 topologies", "A", "C"]),
    "unknown_input": ("""
        class T(Topology):
            s = S.spec()
            b = B.spec(inputs={"nope": Grouping.SHUFFLE})
        """, ["component 'b'", "input 'nope' is not a component"]),
    "unknown_stream": ("""
        class T(Topology):
            s = S.spec()
            b = B.spec(inputs={s["errors"]: Grouping.SHUFFLE})
        """, ["component 'b'", "has no stream 'errors'"]),
    "unknown_field": ("""
        class T(Topology):
            s = S.spec()
            b = B.spec(inputs={s: Grouping.fields("word")})
        """, ["component 'b'", "no field 'word'", "['n']"]),
    "duplicate_name": ("""
        b = TopologyBuilder("dup")
        s = b.add_spout("s", S)
        b.add_bolt("s", B, inputs=[s])
        """, ["component 's' is defined twice"]),
    "zero_parallelism": ("""
        class T(Topology):
            s = S.spec(par=0)
        """, ["component 's'", "parallelism must be an integer >= 1, got 0"]),
    "no_spout": ("""
        class T(Topology):
            b = B.spec()
        """, ["has no spout"]),
    "not_a_spec": ("""
        class T(Topology):
            s = S.spec()
            b = B.spec(inputs={S: Grouping.SHUFFLE})
        """, ["component 'b'", "did you forget to call .spec()"]),
    "local_class": ("""
        def make():
            class Inner(Spout):
                outputs = ["n"]
            return Inner
        class T(Topology):
            s = make().spec()
        """, ["defined inside a function"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_topology(bittern, home, tmp_path, case):
    body, needles = CASES[case]
    path = write(tmp_path, body)
    r = bittern("run", path, "--duration", 1)
    assert_clean_failure(bittern, home, r, *needles)
    assert "topo.py" in r.stderr.splitlines()[0]


def test_import_error_shows_user_traceback(bittern, home, tmp_path):
    path = write(tmp_path, """
        def helper():
            raise ValueError("boom in the user's module")
        helper()
        """)
    r = bittern("submit", path)
    assert_clean_failure(bittern, home, r, "topo.py", "failed to import", "ValueError: boom in the user's module")
    assert "Traceback" in r.stderr and "in helper" in r.stderr and "topo.py" in r.stderr


def test_exception_in_initialize_fails_submit_with_traceback(bittern, home, tmp_path):
    path = write(tmp_path, """
        class Bad(Bolt):
            def initialize(self, config, context):
                raise RuntimeError("cannot reach the database")
            def process(self, tup):
                pass
        class T(Topology):
            config = {"topology.stmgrs": 2}
            s = S.spec()
            bad = Bad.spec(par=2, inputs=[s])
        """)
    r = bittern("submit", path)
    assert_clean_failure(bittern, home, r, "component 'bad'", "failed to start",
                         "RuntimeError: cannot reach the database")
    assert "Traceback" in r.stderr and "in initialize" in r.stderr


def test_emit_arity_mismatch(bittern, home, tmp_path):
    path = write(tmp_path, """
        class Wide(Spout):
            outputs = ["n"]
            def next_tuple(self):
                self.emit([1, 2])
        class T(Topology):
            s = Wide.spec()
            b = B.spec(inputs=[s])
        """)
    r = bittern("run", path, "--duration", 10)
    assert_clean_failure(bittern, home, r, "component 's'", "stream 'default'", "emitted 2 values", "['n']")


def test_exception_in_process_is_logged_and_instance_keeps_serving(bittern, home, tmp_path):
    path = write(tmp_path, """
        class Odd(Bolt):
            outputs = ["n"]
            def process(self, tup):
                if tup.values[0] % 2:
                    raise KeyError("odd number %d" % tup.values[0])
                self.emit([tup.values[0]])
        class Sink(Bolt):
            def process(self, tup):
                pass
        class T(Topology):
            s = S.spec()
            odd = Odd.spec(inputs=[s])
            sink = Sink.spec(inputs=[odd])
        """)
    r = bittern("run", path, "--duration", 2, "--json", check=True)
    import json
    comps = {c["component"]: c for c in json.loads(r.stdout.strip().splitlines()[-1])["components"]}
    assert comps["odd"]["executed"] == 100
    assert comps["odd"]["errors"] == 50 and comps["odd"]["failed"] == 50
    assert comps["sink"]["executed"] == 50
    log = open(os.path.join(home, "logs", "topo", "odd-1.log")).read()
    assert "odd[task 1] raised in process" in log and "KeyError: 'odd number 1'" in log


def test_unknown_config_key_is_reported(bittern, home, tmp_path):
    path = write(tmp_path, """
        class T(Topology):
            s = S.spec()
        """)
    r = bittern("run", path, "--duration", 0.5, "--config", "topology.mesage.timeout.secs=5", check=True)
    assert "unknown config key 'topology.mesage.timeout.secs' (did you mean 'topology.message.timeout.secs'?)" \
        in r.stderr


@pytest.mark.parametrize("kv, needle", [
    ("topology.stmgrs=0", "topology.stmgrs must be >= 1, got 0"),
    ("topology.reliability.mode=SOMETIMES", "topology.reliability.mode must be one of"),
    ("topology.debug=3", "topology.debug must be true or false"),
    ("novalue", "expected key=value"),
    ("bittern.state.backend=rocks", "component 's': bittern.state.backend must be one of memory, disk, got 'rocks'"),
    ("bittern.state.disk.cache.entries=0", "bittern.state.disk.cache.entries must be a whole number >= 1, got 0"),
])
def test_bad_config_value(bittern, home, tmp_path, kv, needle):
    path = write(tmp_path, """
        class T(Topology):
            s = S.spec()
        """)
    r = bittern("run", path, "--duration", 1, "--config", kv)
    assert_clean_failure(bittern, home, r, needle)


def test_bad_topology_name(bittern, home, tmp_path):
    path = write(tmp_path, """
        class T(Topology):
            s = S.spec()
        """)
    r = bittern("submit", path, "--name", "../etc")
    assert_clean_failure(bittern, home, r, "topology name '../etc'")


@pytest.mark.parametrize("verb", ["activate", "deactivate", "restart"])
def test_verbs_on_unknown_topology(bittern, home, verb):
    r = bittern(verb, "ghost")
    assert_clean_failure(bittern, home, r, "no topology named 'ghost'")
