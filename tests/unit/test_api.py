"""The topology API: class style and builder style, validation, groupings, tuples, context."""
from __future__ import annotations

import json

import pytest

from bittern import Bolt, Grouping, Spout, Stream, Topology, TopologyBuilder, TopologyDef, Tuple
from bittern.api.component import ComponentSpec, StreamRef, declared_streams
from bittern.api.context import TopologyContext
from bittern.api.stream import GroupingSpec
from bittern.api.tuple import register_schema, tick_tuple
from bittern.errors import TopologyError
from bittern.packing import round_robin

MOD = __name__


# -- components (module level: a class defined in a function cannot be imported) ---------

class WordSpout(Spout):
    outputs = ["word"]


class MultiSpout(Spout):
    outputs = [Stream(fields=["word", "n"]),
               Stream(fields=["msg"], name="errors"),
               Stream(fields=["x"], name="pointed", direct=True)]


class CountBolt(Bolt):
    outputs = ["word", "count"]


class SinkBolt(Bolt):
    outputs = []


class EvenGrouping:
    def prepare(self, context, component, stream, target_tasks):
        self.tasks = target_tasks

    def choose_tasks(self, values):
        return [self.tasks[0]]


class NoChooseGrouping:
    def prepare(self, context, component, stream, target_tasks):
        pass


def build_error(builder_or_topo):
    with pytest.raises(TopologyError) as ei:
        builder_or_topo.build()
    return str(ei.value)


# -- class style and builder style ------------------------------------------------------

class ClassStyle(Topology):
    config = {"topology.stmgrs": 2, "user.key": "v"}
    word = MultiSpout.spec(par=2)
    count = CountBolt.spec(par=3, inputs={word: Grouping.fields("word"),
                                          word["errors"]: Grouping.SHUFFLE})
    sink = SinkBolt.spec(inputs=[count])
    pointed = SinkBolt.spec(name="directsink", inputs={word["pointed"]: Grouping.DIRECT},
                            config={"topology.tick.tuple.freq.secs": 5})


def builder_style():
    b = TopologyBuilder("wc")
    word = b.add_spout("word", MultiSpout, par=2)
    count = b.add_bolt("count", CountBolt, par=3, inputs={word: Grouping.fields("word"),
                                                          word["errors"]: Grouping.SHUFFLE})
    b.add_bolt("sink", SinkBolt, inputs=[count])
    b.add_bolt("directsink", SinkBolt, inputs={word["pointed"]: Grouping.DIRECT},
               config={"topology.tick.tuple.freq.secs": 5})
    b.set_config({"topology.stmgrs": 2})
    b.set_config({"user.key": "v"})
    return b


def test_class_style_and_builder_produce_the_same_definition():
    a = ClassStyle.build("wc")
    b = builder_style().build()
    assert a == b
    assert a.to_dict() == b.to_dict()


def test_class_style_definition_contents():
    t = ClassStyle.build()
    assert t.name == "ClassStyle"
    assert list(t.components) == ["word", "count", "sink", "directsink"]
    assert [c.name for c in t.spouts] == ["word"]
    assert [c.name for c in t.bolts] == ["count", "sink", "directsink"]
    word = t.components["word"]
    assert word.kind == "spout"
    assert word.class_path == f"{MOD}:MultiSpout"
    assert word.par == 2
    assert word.outputs == {"default": {"fields": ["word", "n"], "direct": False},
                            "errors": {"fields": ["msg"], "direct": False},
                            "pointed": {"fields": ["x"], "direct": True}}
    count = t.components["count"]
    assert [(i.component, i.stream, i.grouping) for i in count.inputs] == [
        ("word", "default", GroupingSpec("fields", ("word",))),
        ("word", "errors", GroupingSpec("shuffle"))]
    assert t.components["sink"].inputs[0].grouping == Grouping.SHUFFLE  # list inputs = shuffle
    assert t.components["directsink"].config == {"topology.tick.tuple.freq.secs": 5}
    assert t.config == {"topology.stmgrs": 2, "user.key": "v"}
    assert t.subscribers("word", "default") == [("count", Grouping.fields("word"))]
    assert t.subscribers("word", "pointed") == [("directsink", Grouping.DIRECT)]
    assert t.subscribers("count", "default") == [("sink", Grouping.SHUFFLE)]
    assert t.subscribers("sink", "default") == []


def test_builder_name_is_the_default_and_build_can_rename():
    assert builder_style().build().name == "wc"
    assert builder_style().build("other").name == "other"


def test_builder_needs_a_name_and_dict_config():
    with pytest.raises(TopologyError, match="non-empty name"):
        TopologyBuilder("")
    with pytest.raises(TopologyError, match="set_config takes a dict, got list"):
        TopologyBuilder("x").set_config([("a", 1)])


def test_class_style_inherits_specs_from_a_base_topology():
    class Base(Topology):
        word = WordSpout.spec()

    class Child(Base):
        count = CountBolt.spec(inputs={Base.word: Grouping.fields("word")})

    t = Child.build()
    assert list(t.components) == ["word", "count"]
    assert t.components["count"].inputs[0].component == "word"


def test_inputs_by_name_and_by_component_stream_tuple():
    b = TopologyBuilder("t")
    b.add_spout("word", MultiSpout)
    b.add_bolt("a", SinkBolt, inputs={"word": Grouping.ALL, ("word", "errors"): Grouping.GLOBAL})
    t = b.build()
    assert [(i.component, i.stream, i.grouping.kind) for i in t.components["a"].inputs] == [
        ("word", "default", "all"), ("word", "errors", "global")]


def test_spec_getitem_gives_a_stream_ref():
    spec = MultiSpout.spec(name="w")
    ref = spec["errors"]
    assert isinstance(ref, StreamRef)
    assert ref.spec is spec and ref.stream == "errors"
    with pytest.raises(TypeError):
        spec[0]


# -- validation errors ------------------------------------------------------------------

def test_unknown_input_component_is_named():
    b = TopologyBuilder("t")
    b.add_spout("word", WordSpout)
    b.add_bolt("count", CountBolt, inputs={"wrod": Grouping.SHUFFLE})
    msg = build_error(b)
    assert msg == ("component 'count': input 'wrod' is not a component of this topology "
                   "(components: word, count)")


def test_unknown_input_stream_is_named():
    b = TopologyBuilder("t")
    word = b.add_spout("word", MultiSpout)
    b.add_bolt("count", CountBolt, inputs={word["eros"]: Grouping.SHUFFLE})
    msg = build_error(b)
    assert msg == ("component 'count': input 'word' has no stream 'eros' "
                   "(streams: default, errors, pointed)")


def test_unknown_input_stream_in_class_style():
    class T(Topology):
        word = WordSpout.spec()
        count = CountBolt.spec(inputs=[word["errors"]])

    assert build_error(T) == "component 'count': input 'word' has no stream 'errors' (streams: default)"


def test_fields_grouping_on_undeclared_field():
    class T(Topology):
        word = WordSpout.spec()
        count = CountBolt.spec(inputs={word: Grouping.fields("wrd")})

    msg = build_error(T)
    assert msg == ("component 'count': input 'word' stream 'default' has no field 'wrd' to group on "
                   "(fields: ['word'])")


def test_partial_key_grouping_on_undeclared_field():
    class T(Topology):
        word = MultiSpout.spec()
        count = CountBolt.spec(inputs={word: Grouping.partial_key("word", "m")})

    assert "has no field 'm' to group on (fields: ['word', 'n'])" in build_error(T)
    assert build_error(T).startswith("component 'count': input 'word' stream 'default'")


def test_duplicate_component_name_builder():
    b = TopologyBuilder("t")
    b.add_spout("word", WordSpout)
    b.add_bolt("word", CountBolt, inputs=["word"])
    assert build_error(b) == "component 'word' is defined twice"


def test_duplicate_component_name_class_style():
    class T(Topology):
        a = WordSpout.spec(name="same")
        b = WordSpout.spec(name="same")

    assert build_error(T) == "component 'same' is defined twice"


def test_same_spec_object_twice():
    class T(Topology):
        a = WordSpout.spec()
        b = a

    # the metaclass names a spec after its first attribute; the second use is a duplicate
    assert build_error(T) == "component 'a' is defined twice"


def test_reserved_component_name():
    b = TopologyBuilder("t")
    b.add_spout("__system", WordSpout)
    assert build_error(b) == ("component '__system': the name '__system' is reserved by Bittern (the source of "
                              "tick tuples); choose another")


@pytest.mark.parametrize("par", [0, -1, 1.5, "2", True, None])
def test_bad_parallelism(par):
    b = TopologyBuilder("t")
    b.add_spout("word", WordSpout, par=par)
    assert build_error(b) == f"component 'word': parallelism must be an integer >= 1, got {par!r}"


def test_bad_parallelism_of_a_bolt_class_style():
    class T(Topology):
        word = WordSpout.spec()
        count = CountBolt.spec(par=0, inputs=[word])

    assert build_error(T) == "component 'count': parallelism must be an integer >= 1, got 0"


def test_no_spout():
    b = TopologyBuilder("nospout")
    b.add_bolt("lonely", SinkBolt)
    assert build_error(b) == "topology 'nospout' has no spout"


def test_no_components():
    class Empty(Topology):
        pass

    assert build_error(Empty) == "topology Empty has no components"


def test_spout_with_inputs():
    word = WordSpout.spec(name="word")
    other = ComponentSpec(WordSpout, "spout", name="other", inputs=[word])

    class T(Topology):
        a = word
        b = other

    assert build_error(T) == "component 'other': a spout takes no inputs"


def test_spout_class_as_a_bolt_and_bolt_class_as_a_spout():
    b = TopologyBuilder("t")
    b.add_spout("word", CountBolt)
    assert build_error(b) == "component 'word': CountBolt is not a Spout subclass"
    b = TopologyBuilder("t")
    b.add_spout("word", WordSpout)
    b.add_bolt("count", WordSpout, inputs=["word"])
    assert build_error(b) == "component 'count': WordSpout is not a Bolt subclass"


def test_instance_instead_of_class():
    b = TopologyBuilder("t")
    b.add_spout("word", WordSpout())
    msg = build_error(b)
    assert msg.startswith("component 'word': expected a Spout or Bolt class, got <")


def test_direct_grouping_on_non_direct_stream():
    class T(Topology):
        word = MultiSpout.spec()
        count = CountBolt.spec(inputs={word["errors"]: Grouping.DIRECT})

    assert build_error(T) == ("component 'count': direct grouping on 'word' stream 'errors', which is "
                              "not declared direct (Stream(..., direct=True))")


def test_non_direct_grouping_on_direct_stream():
    class T(Topology):
        word = MultiSpout.spec()
        count = CountBolt.spec(inputs={word["pointed"]: Grouping.SHUFFLE})

    assert build_error(T) == ("component 'count': stream 'pointed' of 'word' is direct; "
                              "subscribe to it with Grouping.DIRECT")


def test_class_instead_of_spec():
    class T(Topology):
        word = WordSpout.spec()
        count = CountBolt.spec(inputs={WordSpout: Grouping.SHUFFLE})

    assert build_error(T) == ("component 'count': input WordSpout is a class, not a spec "
                              "(did you forget to call .spec()?)")


def test_class_instead_of_spec_in_a_list():
    class T(Topology):
        word = WordSpout.spec()
        count = CountBolt.spec(inputs=[WordSpout])

    assert "did you forget to call .spec()?" in build_error(T)


def test_class_defined_inside_a_function():
    class LocalSpout(Spout):
        outputs = ["x"]

    b = TopologyBuilder("t")
    b.add_spout("local", LocalSpout)
    msg = build_error(b)
    assert "test_class_defined_inside_a_function.<locals>.LocalSpout" in msg
    assert "is defined inside a function" in msg
    assert "define it at module level" in msg


def test_grouping_value_that_is_not_a_grouping():
    class T(Topology):
        word = WordSpout.spec()
        count = CountBolt.spec(inputs={word: "shuffle"})

    assert build_error(T) == "component 'count': input 'word': 'shuffle' is not a Grouping"


def test_inputs_of_a_bad_type():
    class T(Topology):
        word = WordSpout.spec()
        count = CountBolt.spec(inputs="word")

    assert build_error(T) == "component 'count': inputs must be a dict or a list, got str"


def test_subscribing_twice_to_the_same_stream():
    b = TopologyBuilder("t")
    word = b.add_spout("word", WordSpout)
    b.add_bolt("count", CountBolt, inputs={word: Grouping.SHUFFLE, "word": Grouping.ALL})
    assert build_error(b) == "component 'count' subscribes to 'word' stream 'default' twice"


def test_custom_grouping_without_choose_tasks_is_refused():
    with pytest.raises(TopologyError, match="custom grouping NoChooseGrouping has no method choose_tasks"):
        Grouping.custom(NoChooseGrouping)
    with pytest.raises(TopologyError, match="custom grouping NoChooseGrouping has no method choose_tasks"):
        Grouping.custom(NoChooseGrouping())


def test_unimportable_custom_grouping_names_the_component():
    class T(Topology):
        word = WordSpout.spec()
        count = CountBolt.spec(inputs={word: Grouping.custom("no_such_module_xyz.Grouper")})

    msg = build_error(T)
    assert "no_such_module_xyz" in msg
    assert "component 'count'" in msg


def test_custom_grouping_whose_constructor_raises_names_the_component():
    class T(Topology):
        word = WordSpout.spec()
        count = CountBolt.spec(inputs={word: Grouping.custom(f"{MOD}.Exploding")})

    assert build_error(T) == ("component 'count': cannot load custom grouping: "
                              "RuntimeError: no grouping today")


class Exploding:
    def __init__(self):
        raise RuntimeError("no grouping today")

    def choose_tasks(self, values):
        return []


# -- streams and groupings --------------------------------------------------------------

def test_stream_declaration():
    s = Stream("word")
    assert (s.fields, s.name, s.direct) == (("word",), "default", False)
    s = Stream(fields=["a", "b"], name="errors", direct=1)
    assert (s.fields, s.name, s.direct) == (("a", "b"), "errors", True)
    assert s.to_dict() == {"fields": ["a", "b"], "direct": True}
    with pytest.raises(TopologyError, match=r"stream 'x': duplicate field names in \['a', 'a'\]"):
        Stream(["a", "a"], name="x")
    with pytest.raises(TopologyError, match="stream 'x': field names must be non-empty strings, got 3"):
        Stream(["a", 3], name="x")
    with pytest.raises(TopologyError, match="stream name must be a non-empty string, got ''"):
        Stream(["a"], name="")


def test_declared_streams():
    class Mixed(Bolt):
        outputs = ["a", "b", Stream(["e"], name="errors")]

    streams = declared_streams(Mixed)
    assert {k: v.fields for k, v in streams.items()} == {"errors": ("e",), "default": ("a", "b")}
    assert Mixed.declared_streams().keys() == streams.keys()

    class Twice(Bolt):
        outputs = ["a", Stream(["b"])]

    with pytest.raises(TopologyError, match="default stream is declared twice"):
        declared_streams(Twice)

    class Bad(Bolt):
        outputs = [1]

    with pytest.raises(TopologyError, match="outputs entries must be field names or Stream objects, got 1"):
        declared_streams(Bad)


def test_stream_declared_twice_names_the_component():
    class Twice(Bolt):
        outputs = [Stream(["a"], name="s"), Stream(["b"], name="s")]

    b = TopologyBuilder("t")
    b.add_spout("word", WordSpout)
    b.add_bolt("tw", Twice, inputs=["word"])
    msg = build_error(b)
    assert msg.startswith("component 'tw': component class ")
    assert msg.endswith("Twice: stream 's' declared twice")


def test_heronpy_grouping_names():
    assert Grouping.SHUFFLE == GroupingSpec("shuffle")
    assert Grouping.ALL == GroupingSpec("all")
    assert Grouping.GLOBAL == GroupingSpec("global")
    assert Grouping.LOWEST is Grouping.GLOBAL
    assert Grouping.NONE == GroupingSpec("none")
    assert Grouping.DIRECT == GroupingSpec("direct")
    assert Grouping.LOCAL_OR_SHUFFLE == GroupingSpec("local_or_shuffle")
    assert Grouping.fields("a", "b") == GroupingSpec("fields", ("a", "b"))
    assert Grouping.fields(["a", "b"]) == Grouping.fields("a", "b")
    assert Grouping.partial_key("a") == GroupingSpec("partial_key", ("a",))
    assert Grouping.is_grouping(Grouping.ALL) and not Grouping.is_grouping("all")
    assert repr(Grouping.SHUFFLE) == "Grouping.SHUFFLE"
    assert repr(Grouping.fields("a", "b")) == "Grouping.fields('a', 'b')"


def test_fields_grouping_needs_field_names():
    with pytest.raises(TopologyError, match="needs at least one field name"):
        Grouping.fields()
    with pytest.raises(TopologyError, match="non-empty strings, got ''"):
        Grouping.fields("")
    with pytest.raises(TopologyError, match="non-empty strings, got 3"):
        Grouping.partial_key("a", 3)


def test_custom_grouping_descriptions():
    assert Grouping.custom(EvenGrouping).custom == {"class": f"{MOD}:EvenGrouping"}
    assert Grouping.custom("pkg.mod.Cls").custom == {"class": "pkg.mod:Cls"}
    assert Grouping.custom("pkg.mod:Outer.Inner").custom == {"class": "pkg.mod:Outer.Inner"}
    g = Grouping.custom(EvenGrouping())
    assert g.kind == "custom" and set(g.custom) == {"pickle"}
    with pytest.raises(TopologyError, match="custom grouping 'Nodots' must be 'module.Class'"):
        Grouping.custom("Nodots")


def test_custom_grouping_in_a_topology_round_trips():
    class T(Topology):
        word = WordSpout.spec()
        a = CountBolt.spec(inputs={word: Grouping.custom(EvenGrouping)})
        b = CountBolt.spec(inputs={word: Grouping.custom(EvenGrouping())})

    t = T.build()
    back = TopologyDef.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back.to_dict() == t.to_dict()
    assert back.components["a"].inputs[0].grouping.custom == {"class": f"{MOD}:EvenGrouping"}
    assert "pickle" in back.components["b"].inputs[0].grouping.custom


def test_grouping_spec_dict_round_trip():
    for g in (Grouping.SHUFFLE, Grouping.fields("a", "b"), Grouping.partial_key("k"),
              Grouping.custom("m.C")):
        d = g.to_dict()
        assert GroupingSpec.from_dict(json.loads(json.dumps(d))) == g
    assert Grouping.fields("a", "b").to_dict() == {"type": "fields", "fields": ["a", "b"]}
    assert Grouping.ALL.to_dict() == {"type": "all"}


# -- the serialisable definition ---------------------------------------------------------

def test_topology_def_round_trip():
    t = ClassStyle.build("wc")
    t.source = {"file": "/x/wc.py", "module": "bittern_topology", "sys_path": ["/x"]}
    d = t.to_dict()
    assert d["name"] == "wc"
    assert [c["name"] for c in d["components"]] == ["word", "count", "sink", "directsink"]
    assert d["components"][1]["inputs"][0] == {"component": "word", "stream": "default",
                                               "grouping": {"type": "fields", "fields": ["word"]}}
    back = TopologyDef.from_dict(json.loads(json.dumps(d)))
    assert back == t
    assert back.to_dict() == d
    assert list(back.components) == list(t.components)
    assert back.source == t.source


# -- tuples -------------------------------------------------------------------------------

def test_tuple_field_access_by_name():
    register_schema("unit_counter", "default", ["word", "count"])
    t = Tuple(17, "unit_counter", "default", 4, ["fox", 3])
    assert t["word"] == "fox"
    assert t["count"] == 3
    assert t.values == ["fox", 3]
    assert t[0] == 17 and t[3] == 4 and t[4] == ["fox", 3]
    tid, comp, stream, task, values = t
    assert (tid, comp, stream, task, values) == (17, "unit_counter", "default", 4, ["fox", 3])
    assert not t.is_tick and not t.is_heartbeat


def test_tuple_unknown_field_names_the_fields():
    register_schema("unit_counter2", "errs", ["msg", "code"])
    t = Tuple(None, "unit_counter2", "errs", 1, ["boom", 2])
    with pytest.raises(KeyError) as ei:
        t["mesage"]
    assert ei.value.args[0] == ("tuple from 'unit_counter2' stream 'errs' has no field 'mesage' "
                                "(fields: ['msg', 'code'])")


def test_tuple_without_a_registered_schema():
    t = Tuple(None, "unit_never_registered", "default", 1, ["x"])
    with pytest.raises(KeyError) as ei:
        t["x"]
    assert ei.value.args[0] == ("tuple from 'unit_never_registered' stream 'default' has no field 'x' "
                                "(fields: [])")


def test_tick_tuple():
    t = tick_tuple(5)
    assert t.is_tick
    assert (t.component, t.stream, t.task, t.values) == ("__system", "__tick", -1, [5])


# -- context ----------------------------------------------------------------------------

def test_topology_context():
    t = ClassStyle.build("wc")
    packing = round_robin({c.name: c.par for c in t.components.values()}, 2)
    task = packing.component_tasks["count"][2]
    ctx = TopologyContext("wc", task, "count", 2, packing.task_container[task], {"k": 1},
                          packing.component_tasks, packing.task_component, t)
    assert ctx.get_task_id() == task == 3  # count: tasks 1..3 (sorted: count, directsink, sink, word)
    assert ctx.get_component_id() == "count"
    assert ctx.get_topology_name() == "wc"
    assert ctx.get_cluster_config() == {"k": 1}
    assert ctx.get_component_tasks("word") == [6, 7]
    ctx.get_component_tasks("word").append(99)
    assert ctx.get_component_tasks("word") == [6, 7]
    assert ctx.get_component_tasks("nope") == []
    assert ctx.get_task_component(6) == "word" and ctx.get_task_component(4) == "directsink"
    assert ctx.get_this_sources() == {("word", "default"): Grouping.fields("word"),
                                      ("word", "errors"): Grouping.SHUFFLE}
    assert ctx.get_sources("nope") == {}
    assert ctx.get_component_outputs() == {"default": ["word", "count"]}
    assert ctx.get_component_outputs("word")["errors"] == ["msg"]
    assert ctx.get_targets() == {"sink": Grouping.SHUFFLE}
    assert repr(ctx) == "<TopologyContext wc count[2] task 3>"


# -- component base classes ---------------------------------------------------------------

def test_emit_outside_a_running_topology_is_a_clear_error():
    with pytest.raises(RuntimeError, match="only be called inside a running topology"):
        WordSpout().emit(["x"])


def test_bolt_process_not_implemented_names_the_class():
    with pytest.raises(NotImplementedError, match=r"SinkBolt.process\(tup\) is not implemented"):
        SinkBolt().process(None)


def test_builder_optional_outputs_streams():
    b = TopologyBuilder("t")
    b.add_spout("word", WordSpout, optional_outputs=[Stream(["e"], name="errors")])
    t = b.build()
    assert t.components["word"].outputs == {"default": {"fields": ["word"], "direct": False},
                                            "errors": {"fields": ["e"], "direct": False}}


def test_builder_optional_output_fields_extend_the_default_stream():
    b = TopologyBuilder("t")
    b.add_spout("word", WordSpout, optional_outputs=["extra"])
    t = b.build()
    assert t.components["word"].outputs["default"]["fields"] == ["word", "extra"]
