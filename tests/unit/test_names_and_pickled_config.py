"""Names Bittern reserves (only its own, in every style) and config values carried
pickled (bittern/api/topology.py): encoded where the definition is built, shown as
``<pickled: TYPE>``, unpickled only from the definition by the instance."""
from __future__ import annotations

import base64
import json
import pickle

import pytest

from bittern import Bolt, Grouping, Spout, Stream, TopologyBuilder
from bittern.api.topology import (PICKLED_SHOWN, RESERVED_COMPONENTS, RESERVED_STREAMS, TopologyDef, encode_config,
                                  unpickle_config)
from bittern.errors import TopologyError


class Words(Spout):
    outputs = ["word"]


class Sink(Bolt):
    pass


def triple(n):
    return 3 * n


class Box:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, Box) and other.v == self.v


def build(spout="words", bolt="sink", spout_cls=Words, config=None, topo_config=None):
    b = TopologyBuilder("t")
    w = b.add_spout(spout, spout_cls)
    b.add_bolt(bolt, Sink, inputs={w: Grouping.SHUFFLE}, config=config)
    if topo_config:
        b.set_config(topo_config)
    return b.build()


def build_error(**kw):
    with pytest.raises(TopologyError) as e:
        build(**kw)
    return str(e.value)


class Results(Spout):
    outputs = [Stream(["n"], name="__results"), Stream(["m"], name="__late")]


def test_underscore_names_are_the_users():
    b = TopologyBuilder("t")
    spout = b.add_spout("__integration_test_spout", Results)
    b.add_bolt("__integration_test_aggregator_bolt", Sink, inputs={spout["__results"]: Grouping.SHUFFLE})
    tdef = b.build()
    assert list(tdef.components) == ["__integration_test_spout", "__integration_test_aggregator_bolt"]
    assert set(tdef.components["__integration_test_spout"].outputs) == {"__results", "__late"}


@pytest.mark.parametrize("name", sorted(RESERVED_COMPONENTS))
def test_each_reserved_component_name_is_refused(name):
    assert build_error(bolt=name) == (f"component {name!r}: the name {name!r} is reserved by Bittern "
                                      f"({RESERVED_COMPONENTS[name]}); choose another")


@pytest.mark.parametrize("stream", sorted(RESERVED_STREAMS))
def test_each_reserved_stream_name_is_refused(stream):
    Bad = type("Bad", (Spout,), {"outputs": [Stream(["x"], name=stream)], "__module__": __name__})
    assert build_error(spout_cls=Bad) == (f"component 'words': the stream name {stream!r} is reserved by Bittern "
                                          f"({RESERVED_STREAMS[stream]}); choose another")


@pytest.mark.parametrize("name", ["a/b", "tab\there", "x" * 129])
def test_names_that_cannot_name_a_log_file(name):
    assert build_error(bolt=name) == (f"component {name[:128]!r}: a component name is 1-128 characters, "
                                      "without '/' or control characters")


def test_plain_values_stay_json_others_are_pickled():
    conf, pickled = encode_config({"s": "x", "n": 1, "f": 1.5, "b": True, "none": None, "l": [1, {"a": [2]}],
                                   "fn": triple, "t": (1, 2), "set": {3}, "box": Box(4), "it": iter([5, 6]),
                                   "intkeys": {1: "a"}}, "component 'c'")
    assert conf == {"s": "x", "n": 1, "f": 1.5, "b": True, "none": None, "l": [1, {"a": [2]}],
                    "fn": "<pickled: function>", "t": "<pickled: tuple>", "set": "<pickled: set>",
                    "box": "<pickled: Box>", "it": "<pickled: list_iterator>", "intkeys": "<pickled: dict>"}
    assert set(pickled) == {"fn", "t", "set", "box", "it", "intkeys"}
    assert pickled["t"]["type"] == "tuple"
    assert pickle.loads(base64.b64decode(pickled["box"]["pickle"])) == Box(4)


def test_bittern_settings_must_be_plain():
    conf, pickled = encode_config({"spout.files": ("a", "b")}, "component 'c'")
    assert conf == {"spout.files": ["a", "b"]} and not pickled  # read outside the instance: plain JSON
    with pytest.raises(TopologyError) as e:
        encode_config({"topology.message.timeout.secs": triple}, "topology 't'")
    assert str(e.value) == ("topology 't': config key 'topology.message.timeout.secs' is a Bittern setting and takes "
                            "a plain value (string, number, boolean, list, dict), got a function")


def test_a_value_that_cannot_be_pickled_names_the_component_and_key():
    with pytest.raises(TopologyError) as e:
        build(config={"numbers": (n for n in range(3))})
    assert str(e.value).startswith("component 'sink': config key 'numbers': a generator cannot be pickled "
                                   "(TypeError: cannot pickle 'generator' object)")
    assert "\n" not in str(e.value)


def test_bad_values_of_bittern_settings_are_refused_where_the_topology_is_built():
    assert build_error(config={"topology.tick.tuple.freq.secs": "often"}) == \
        "component 'sink' config: topology.tick.tuple.freq.secs must be a number, got 'often'"


def roundtrip(tdef):
    """What every process gets: the definition through JSON (state, plan, ZooKeeper, HTTP)."""
    return TopologyDef.from_dict(json.loads(json.dumps(tdef.to_dict())))


def merged(tdef, component, overrides=None):
    """As the run plan does: topology config, then the component's, then --config."""
    conf = dict(tdef.config)
    conf.update(tdef.components[component].config)
    conf.update(overrides or {})
    return conf


def test_the_instance_gets_equal_objects_back_from_the_definition():
    it = iter(["a", "b", "c"])
    next(it)
    tdef = roundtrip(build(config={"fn": triple, "it": it, "box": Box(1), "plain": 2, "shared": (1,)},
                           topo_config={"topo.box": Box(2), "shared": (9,)}))
    assert tdef.components["sink"].config["fn"] == PICKLED_SHOWN.format("function")
    assert tdef.config["topo.box"] == "<pickled: Box>"
    conf = unpickle_config(merged(tdef, "sink"), tdef, "sink")
    assert conf["fn"](2) == 6 and list(conf["it"]) == ["b", "c"] and conf["box"] == Box(1)
    assert conf["topo.box"] == Box(2) and conf["plain"] == 2
    assert conf["shared"] == (1,)  # the component's own value wins over the topology's, as in every layer
    words = unpickle_config(merged(tdef, "words"), tdef, "words")
    assert words["topo.box"] == Box(2) and words["shared"] == (9,) and "fn" not in words


def test_a_later_layer_replaces_a_pickled_value():
    tdef = roundtrip(build(config={"box": Box(1)}))
    conf = unpickle_config(merged(tdef, "sink", {"box": "from --config"}), tdef, "sink")
    assert conf["box"] == "from --config"


def test_a_value_that_does_not_unpickle_names_the_component_and_key():
    tdef = roundtrip(build(config={"box": Box(1)}))
    tdef.components["sink"].pickled["box"]["pickle"] = base64.b64encode(b"not a pickle").decode()
    with pytest.raises(TopologyError) as e:
        unpickle_config(merged(tdef, "sink"), tdef, "sink")
    assert str(e.value).startswith("component 'sink': config key 'box': its Box cannot be unpickled here: ")


def test_a_definition_without_pickles_is_unchanged():
    tdef = roundtrip(build(config={"plain": [1, 2]}))
    assert "pickled" not in tdef.to_dict() and "pickled" not in tdef.to_dict()["components"][1]
    conf = merged(tdef, "sink")
    assert unpickle_config(conf, tdef, "sink") is conf


def test_multilang_components_get_json_as_before():
    from bittern import ShellBolt
    b = TopologyBuilder("t")
    w = b.add_spout("words", Words)
    b.add_bolt("split", ShellBolt.spec(command="python3", script="split.py", outputs=["w"]),
               inputs={w: Grouping.SHUFFLE}, config={"pair": (1, (2, 3)), "fn": triple})
    split = b.build().components["split"]
    assert split.config["pair"] == [1, [2, 3]]  # the child gets JSON, tuples as lists
    assert split.config["fn"] == "<pickled: function>" and set(split.pickled) == {"fn"}
