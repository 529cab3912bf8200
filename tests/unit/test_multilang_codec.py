"""Storm multilang framing (bittern/multilang/codec.py) on byte streams, and the
ShellBolt/ShellSpout spec API."""
import json
import os

import msgpack
import pytest

from bittern import Grouping, ShellBolt, ShellSpout, Spout, Topology
from bittern.errors import TopologyError
from bittern.multilang import JsonCodec, MsgpackCodec, ProtocolError, codec

MSGS = [{"command": "emit", "anchors": ["1"], "tuple": ["a b", 3, 2.5, None, True]},
        [4, 7], {"command": "sync"}, {"pid": 1234}, {"command": "log", "msg": "héllo\nworld"}]


def test_json_encode_is_json_then_end_line():
    assert JsonCodec.encode({"command": "sync"}) == b'{"command":"sync"}\nend\n'
    assert JsonCodec.encode([1, 2]) == b"[1,2]\nend\n"


@pytest.mark.parametrize("name", ["json", "msgpack"])
def test_round_trip_in_any_chunking(name):
    stream = b"".join(codec(name).encode(m) for m in MSGS)
    for size in (1, 2, 3, 7, 64, len(stream)):
        dec = codec(name)
        got = []
        for i in range(0, len(stream), size):
            got += dec.feed(stream[i:i + size])
        assert got == MSGS, size
        assert dec.pending() == b""


def test_json_reads_storm_py_framing_multiline_and_crlf():
    dec = JsonCodec()
    assert dec.feed(b'{"command":\r\n "sync"}\r\nend\r\n\n{"pid": 5}\nend\n') == [{"command": "sync"}, {"pid": 5}]


def test_json_partial_message_waits():
    dec = JsonCodec()
    assert dec.feed(b'{"command": "sync"}\n') == []
    assert dec.feed(b"en") == []
    assert dec.feed(b"d\n") == [{"command": "sync"}]


def test_json_stray_print_is_named_at_once():
    dec = JsonCodec()
    with pytest.raises(ProtocolError) as e:
        dec.feed(b"hello from a print\n")
    assert e.value.offending == "hello from a print"
    # even before its newline arrives
    with pytest.raises(ProtocolError) as e:
        JsonCodec().feed(b"Traceback (most")
    assert "Traceback" in e.value.offending


def test_json_bad_json_before_end():
    dec = JsonCodec()
    with pytest.raises(ProtocolError) as e:
        dec.feed(b'{"command": "emit", oops}\nend\n')
    assert "invalid JSON" in str(e.value) and "oops" in e.value.offending


def test_json_invalid_utf8():
    with pytest.raises(ProtocolError):
        JsonCodec().feed(b'{"msg": "\xff\xfe"}\nend\n')


def test_msgpack_is_pystorm_framing():
    # pystorm writes msgpack.packb(msg) back to back, no delimiter
    raw = msgpack.packb({"command": "sync"}) + msgpack.packb({"pid": 9})
    assert MsgpackCodec().feed(raw) == [{"command": "sync"}, {"pid": 9}]
    assert MsgpackCodec.encode({"a": "b"}) == msgpack.packb({"a": "b"}, use_bin_type=True)


def test_msgpack_stray_print_is_an_error():
    with pytest.raises(ProtocolError) as e:
        MsgpackCodec().feed(b"hello\n")
    assert "hello" in e.value.offending


def test_unknown_serializer():
    with pytest.raises(ValueError, match="json, msgpack"):
        codec("xml")


def test_long_offending_output_is_cut():
    with pytest.raises(ProtocolError) as e:
        JsonCodec().feed(b"x" * 5000 + b"\n")
    assert len(e.value.offending) < 400


# -- the spec API ---------------------------------------------------------------------------

class Sentences(Spout):
    outputs = ["sentence"]


def test_shell_bolt_spec_builds_into_a_topology():
    class T(Topology):
        sentences = Sentences.spec()
        split = ShellBolt.spec(command="python3", script="splitsentence.py", outputs=["word"],
                               inputs=[sentences], par=3)
        count = ShellBolt.spec(command=["node", "--max-old-space-size=64"], script="count.js",
                               inputs={split: Grouping.fields("word")}, serializer="msgpack")

    tdef = T.build()
    split, count = tdef.components["split"], tdef.components["count"]
    assert split.class_path == "instance.shell:ShellBolt" and split.par == 3
    assert split.outputs == {"default": {"fields": ["word"], "direct": False}}
    assert split.config["multilang.command"] == ["python3"]
    assert split.config["multilang.script"] == "splitsentence.py"
    assert count.config["multilang.command"] == ["node", "--max-old-space-size=64"]
    assert count.config["topology.multilang.serializer"] == "msgpack"
    assert count.outputs == {} and count.inputs[0].grouping.fields == ("word",)
    json.dumps(tdef.to_dict())  # it travels in the plan


def test_shell_components_in_a_topology_builder():
    from bittern import TopologyBuilder
    b = TopologyBuilder("ml")
    words = b.add_spout("words", ShellSpout.spec(command="ruby", script="words.rb", outputs=["word"]), par=2)
    b.add_bolt("count", ShellBolt.spec(command="python3", script="count.py"), par=3,
               inputs={words: Grouping.fields("word")}, config={"x.y": 1})
    tdef = b.build()
    assert tdef.components["words"].class_path == "instance.shell:ShellSpout" and tdef.components["words"].par == 2
    count = tdef.components["count"]
    assert count.par == 3 and count.config["x.y"] == 1 and count.config["multilang.script"] == "count.py"
    assert count.inputs[0].component == "words" and count.inputs[0].grouping.fields == ("word",)
    with pytest.raises(TopologyError, match="component 'bad': add_bolt was given a spout spec"):
        TopologyBuilder("x").add_bolt("bad", ShellSpout.spec(command="ruby"))


def test_shell_spout_spec():
    class T(Topology):
        words = ShellSpout.spec(command="ruby words.rb", outputs=["word"], par=2)

    c = T.build().components["words"]
    assert c.kind == "spout" and c.class_path == "instance.shell:ShellSpout"
    assert c.config["multilang.command"] == ["ruby", "words.rb"] and c.config["multilang.script"] == ""


def test_spec_errors():
    with pytest.raises(TopologyError, match="command"):
        ShellBolt.spec(command=3)
    with pytest.raises(TopologyError, match="empty"):
        ShellBolt.spec(command="")
    with pytest.raises(TopologyError, match="serializer"):
        ShellBolt.spec(command="x", serializer="xml")


def test_script_resolves_beside_the_topology_file_or_in_resources(tmp_path):
    from instance.shell import ShellError, resolve_command
    topo = tmp_path / "topo.py"
    topo.write_text("")
    (tmp_path / "resources").mkdir()
    (tmp_path / "resources" / "split.py").write_text("")
    (tmp_path / "here.py").write_text("")
    conf = {"multilang.command": ["python3"], "multilang.script": "split.py"}
    assert resolve_command(conf, str(topo)) == (["python3", str(tmp_path / "resources" / "split.py")],
                                                str(tmp_path))
    conf["multilang.script"] = "here.py"
    assert resolve_command(conf, str(topo))[0] == ["python3", str(tmp_path / "here.py")]
    conf["multilang.script"] = "missing.py"
    with pytest.raises(ShellError, match="missing.py"):
        resolve_command(conf, str(topo))
    assert os.path.isabs(resolve_command({"multilang.command": ["x"], "multilang.script": ""}, str(topo))[1])
