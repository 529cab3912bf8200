"""Configuration: packaged defaults, type checks, unknown keys, aliases, overrides,
and a guard that keeps ``bittern/defaults.toml`` in sync with the keys the code reads."""
from __future__ import annotations

import os
import re
import tomllib

import pytest

from bittern import config
from bittern.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULTS_TOML = os.path.join(ROOT, "bittern", "defaults.toml")
SOURCE_DIRS = ("bittern", "instance", "streammgr", "supervisor", "nimbus")


def test_defaults_load():
    d = config.defaults()
    assert d["topology.reliability.mode"] == "ATMOST_ONCE"
    assert d["topology.message.timeout.secs"] == 30
    assert d["topology.max.spout.pending"] == 0
    assert d["topology.stmgrs"] == 1
    assert d["topology.serializer"] == "msgpack"
    assert d["topology.producer.batch.size"] == 1024
    assert d["topology.debug"] is False
    assert d["bittern.restart.backoff.max.secs"] == 10.0


def test_defaults_are_a_fresh_copy():
    d = config.defaults()
    d["topology.stmgrs"] = 99
    assert config.defaults()["topology.stmgrs"] == 1


def test_defaults_file_is_what_the_code_loads():
    with open(DEFAULTS_TOML, "rb") as f:
        assert config.defaults() == tomllib.load(f)


def test_valid_values_pass_and_are_normalised():
    out, warnings = config.check({"topology.stmgrs": 3, "topology.reliability.mode": "atleast_once",
                                  "topology.serializer": "PICKLE", "topology.debug": True,
                                  "topology.message.timeout.secs": 12.0,
                                  "bittern.restart.backoff.initial.secs": 1})
    assert warnings == []
    assert out == {"topology.stmgrs": 3, "topology.reliability.mode": "ATLEAST_ONCE",
                   "topology.serializer": "pickle", "topology.debug": True,
                   "topology.message.timeout.secs": 12, "bittern.restart.backoff.initial.secs": 1}
    assert type(out["topology.message.timeout.secs"]) is int


@pytest.mark.parametrize("key,val,msg", [
    ("topology.stmgrs", "2", "topo: topology.stmgrs must be a number, got '2'"),
    ("topology.stmgrs", True, "topo: topology.stmgrs must be a number, got True"),
    ("topology.stmgrs", 0, "topo: topology.stmgrs must be >= 1, got 0"),
    ("topology.producer.batch.size", 0, "topo: topology.producer.batch.size must be >= 1, got 0"),
    ("topology.max.spout.pending", -1, "topo: topology.max.spout.pending must be >= 0, got -1"),
    ("topology.message.timeout.secs", 2.5,
     "topo: topology.message.timeout.secs must be a whole number, got 2.5"),
    ("topology.debug", 1, "topo: topology.debug must be true or false, got 1"),
    ("topology.debug", "yes", "topo: topology.debug must be true or false, got 'yes'"),
    ("topology.serializer", 5, "topo: topology.serializer must be a string, got 5"),
    ("topology.serializer", "json", "topo: topology.serializer must be one of msgpack, pickle, got 'json'"),
    ("topology.reliability.mode", "SOMETIMES",
     "topo: topology.reliability.mode must be one of ATMOST_ONCE, ATLEAST_ONCE, EFFECTIVELY_ONCE, "
     "got 'SOMETIMES'"),
    ("bittern.restart.backoff.max.secs", "10", "topo: bittern.restart.backoff.max.secs must be a number, "
                                               "got '10'"),
])
def test_type_checks_with_clear_errors(key, val, msg):
    with pytest.raises(ConfigError) as ei:
        config.check({key: val}, where="topo")
    assert str(ei.value) == msg


def test_non_string_key():
    with pytest.raises(ConfigError, match="config: config keys must be strings, got 3"):
        config.check({3: "x"})


def test_unknown_topology_key_with_did_you_mean():
    out, warnings = config.check({"topology.message.timout.secs": 5}, where="wc")
    assert warnings == ["wc: unknown config key 'topology.message.timout.secs' "
                        "(did you mean 'topology.message.timeout.secs'?)"]
    assert out == {"topology.message.timout.secs": 5}  # reported, kept, not type-checked


def test_unknown_bittern_key_is_reported_too():
    out, warnings = config.check({"bittern.startup.timeout.sec": 5})
    assert warnings == ["config: unknown config key 'bittern.startup.timeout.sec' "
                        "(did you mean 'bittern.startup.timeout.secs'?)"]


def test_unknown_key_without_a_close_match_has_no_hint():
    _, warnings = config.check({"topology.zzzzzzzzzzzzzz": 1})
    assert warnings == ["config: unknown config key 'topology.zzzzzzzzzzzzzz'"]


def test_user_keys_pass_silently():
    conf = {"wordcount.sentences": 100, "my_key": [1, 2], "db.url": "sqlite://"}
    out, warnings = config.check(conf)
    assert warnings == []
    assert out == conf


def test_alias_workers_is_stmgrs():
    out, warnings = config.check({"topology.workers": 3})
    assert out == {"topology.stmgrs": 3}
    assert warnings == []
    with pytest.raises(ConfigError, match="topology.stmgrs must be >= 1, got 0"):
        config.check({"topology.workers": 0})


@pytest.mark.parametrize("conf, want", [
    ({"topology.acker.executors": 0}, {"topology.reliability.mode": "ATMOST_ONCE"}),
    ({"topology.acker.executors": 4}, {"topology.reliability.mode": "ATLEAST_ONCE"}),
    ({"topology.acker.executors": None}, {"topology.reliability.mode": "ATLEAST_ONCE"}),
    # an explicit Bittern/Heron key in the same layer wins
    ({"topology.acker.executors": 0, "topology.reliability.mode": "atleast_once"},
     {"topology.reliability.mode": "ATLEAST_ONCE"}),
    ({"topology.tick.tuple.freq.ms": 1500}, {"topology.tick.tuple.freq.secs": 1.5}),
    ({"topology.multilang.serializer": "org.apache.storm.multilang.JsonSerializer"},
     {"topology.multilang.serializer": "json"}),
    ({"topology.multilang.serializer": "com.example.MsgpackSerializer"},
     {"topology.multilang.serializer": "msgpack"}),
])
def test_storm_and_heron_keys_carry_over(conf, want):
    out, warnings = config.check(conf, where="wc")
    assert (out, warnings) == (want, [])


def test_storm_and_heron_keys_without_a_meaning_here_pass_quietly():
    conf = {"topology.debug": True, "topology.worker.childopts": "-Xmx2g", "topology.kryo.register": ["x"],
            "topology.container.cpu": 2, "topology.team.name": "data", "topology.component.rammap": "a:1"}
    assert config.check(conf) == (conf, [])


@pytest.mark.parametrize("key, val, msg", [
    ("topology.acker.executors", -1, "topology.acker.executors must be a whole number >= 0, got -1"),
    ("topology.acker.executors", "two", "topology.acker.executors must be a whole number >= 0, got 'two'"),
    ("topology.tick.tuple.freq.ms", "x", "topology.tick.tuple.freq.ms must be a number >= 0, got 'x'"),
])
def test_translated_keys_check_their_values(key, val, msg):
    with pytest.raises(ConfigError, match=f"wc: {msg}"):
        config.check({key: val}, where="wc")


def test_parse_overrides():
    assert config.parse_overrides(["topology.stmgrs=2", "topology.debug=true", "a.b=hello",
                                   "l=[1, 2]", "f=0.5", " spaced = x y ", "eq=a=b", "empty="]) == {
        "topology.stmgrs": 2, "topology.debug": True, "a.b": "hello", "l": [1, 2], "f": 0.5,
        "spaced": "x y", "eq": "a=b", "empty": ""}
    assert config.parse_overrides(None) == {}
    with pytest.raises(ConfigError, match="--config 'novalue': expected key=value"):
        config.parse_overrides(["novalue"])
    with pytest.raises(ConfigError, match="--config '=3': expected key=value"):
        config.parse_overrides(["=3"])


def test_parse_value():
    assert config.parse_value("30") == 30
    assert config.parse_value("false") is False
    assert config.parse_value('"quoted"') == "quoted"
    assert config.parse_value("ATLEAST_ONCE") == "ATLEAST_ONCE"


def test_merge_layers_in_order():
    m = config.merge({"topology.stmgrs": 2, "x": 1}, None, {"x": 2})
    assert m["topology.stmgrs"] == 2
    assert m["x"] == 2
    assert m["topology.message.timeout.secs"] == 30


def test_constants_name_known_keys():
    known = config.defaults()
    for key in list(config.CHOICES) + list(config.POSITIVE) + list(config.ALIASES.values()):
        assert key in known, f"config.py names {key!r}, which defaults.toml does not define"
    for key, choices in config.CHOICES.items():
        assert known[key] in choices
    assert (config.ATMOST_ONCE, config.ATLEAST_ONCE, config.EFFECTIVELY_ONCE) == (
        "ATMOST_ONCE", "ATLEAST_ONCE", "EFFECTIVELY_ONCE")


# -- defaults.toml stays in sync with the code --------------------------------------------

# conf["k"], self.conf["k"], plan.config["k"], conf.get("k"), config.get('k', ...)
_READ = re.compile(r"""\b(?:conf|config)\s*(?:\[|\.get\(|\.setdefault\()\s*(["'])([^"'\s]+)\1""")


def config_reads():
    """``{key: ["file:line", ...]}`` for every dotted key read from a conf/config mapping."""
    found = {}
    for d in SOURCE_DIRS:
        base = os.path.join(ROOT, d)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [n for n in dirnames if not n.startswith((".", "__pycache__"))]
            for fn in filenames:
                if not fn.endswith(".py"):
                    continue
                path = os.path.join(dirpath, fn)
                with open(path, encoding="utf-8") as f:
                    for lineno, line in enumerate(f, 1):
                        for m in _READ.finditer(line):
                            key = m.group(2)
                            # engine keys are dotted; topologies' own keys ("wordcount.x") live
                            # in topologies/, which is not scanned
                            if "." in key:
                                found.setdefault(key, []).append(f"{os.path.relpath(path, ROOT)}:{lineno}")
    return found


def test_config_reads_are_found():
    reads = config_reads()
    # a few reads known to exist: if none is found the scan itself is broken
    assert "topology.producer.batch.size" in reads
    assert "topology.stmgrs" in reads
    assert "bittern.restart.backoff.initial.secs" in reads


def test_every_key_the_code_reads_is_in_defaults_toml():
    known = config.defaults()
    missing = {k: where for k, where in config_reads().items() if k not in known}
    assert not missing, "config keys read by the code but missing from bittern/defaults.toml: " + \
        "; ".join(f"{k} (read at {', '.join(w)})" for k, w in sorted(missing.items()))
