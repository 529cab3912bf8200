"""Storm Flux YAML -> Bittern definitions (bittern/compat/flux.py): every grouping,
configMethods, includes (override or not, resources), property and environment
substitution, Java pieces and other mistakes refused in one line naming the file and
the component."""
from __future__ import annotations

import os
import textwrap

import pytest

from bittern.compat import flux
from bittern.errors import BitternError, TopologyError

SPOUT = "org.apache.storm.flux.wrappers.spouts.FluxShellSpout"
BOLT = "org.apache.storm.flux.wrappers.bolts.FluxShellBolt"

HEAD = f"""
name: "t"
spouts:
  - id: "src"
    className: "{SPOUT}"
    constructorArgs:
      - ["python3", "spout.py"]
      - ["word", "n"]
    parallelism: 2
"""


def write(dirpath, name, text):
    path = os.path.join(str(dirpath), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


def bolt(bid, command='["python3", "bolt.py"]', fields='["x"]', extra=""):
    return textwrap.indent(textwrap.dedent(f"""
        - id: "{bid}"
          className: "{BOLT}"
          constructorArgs:
            - {command}
            - {fields}
        """) + textwrap.indent(textwrap.dedent(extra), "  "), "  ")


def stream(src, dst, grouping="type: SHUFFLE"):
    return textwrap.indent(textwrap.dedent(f"""
        - from: "{src}"
          to: "{dst}"
          grouping:
        """) + textwrap.indent(textwrap.dedent(grouping), "    "), "  ")


def topology(tmp_path, bolts, streams, head=HEAD, name="t.yaml", **kw):
    path = write(tmp_path, name, head + "bolts:\n" + "".join(bolts) + "streams:\n" + "".join(streams))
    return flux.load(path, **kw)


def error(tmp_path, text, name="t.yaml", **kw):
    path = write(tmp_path, name, text)
    with pytest.raises(TopologyError) as e:
        flux.load(path, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# -- what runs -------------------------------------------------------------------------

@pytest.mark.parametrize("flux_type, kind", [("SHUFFLE", "shuffle"), ("ALL", "all"), ("GLOBAL", "global"),
                                            ("NONE", "none"), ("LOCAL_OR_SHUFFLE", "local_or_shuffle")])
def test_each_plain_grouping(tmp_path, flux_type, kind):
    tdef = topology(tmp_path, [bolt("b")], [stream("src", "b", f"type: {flux_type}")])
    (inp,) = tdef.components["b"].inputs
    assert (inp.component, inp.stream, inp.grouping.kind) == ("src", "default", kind)


def test_fields_grouping_and_named_streams(tmp_path):
    extra = """
      configMethods:
        - name: "setNamedStream"
          args: ["pairs", ["a", "b"]]
    """
    tdef = topology(tmp_path, [bolt("b", extra=extra), bolt("c")],
                    [stream("src", "b", 'type: FIELDS\nargs: ["word"]'),
                     stream("b", "c", 'type: FIELDS\nargs: ["b", "a"]\nstreamId: "pairs"')])
    assert tdef.components["b"].outputs == {"default": {"fields": ["x"], "direct": False},
                                            "pairs": {"fields": ["a", "b"], "direct": False}}
    (inp,) = tdef.components["c"].inputs
    assert (inp.component, inp.stream, inp.grouping.kind, inp.grouping.fields) == ("b", "pairs", "fields", ("b", "a"))


def test_direct_grouping_declares_the_stream_direct(tmp_path):
    tdef = topology(tmp_path, [bolt("b")], [stream("src", "b", "type: DIRECT")])
    assert tdef.components["src"].outputs["default"]["direct"] is True
    assert tdef.components["b"].inputs[0].grouping.kind == "direct"


def test_components_commands_config_and_parallelism(tmp_path):
    write(tmp_path, "resources/bolt.py", "")
    write(tmp_path, "spout.py", "")
    extra = """
      parallelism: 3
      numTasks: 6
      cpuLoad: 50
      configMethods:
        - name: "addComponentConfig"
          args: ["rabbitmq.configfile", "etc/rabbit.yml"]
        - name: "addComponentConfig"
          args: ["publisher.data_paths", ["actions"]]
        - name: "addComponentConfig"
          args: ["both", "from the method"]
        - name: "changeChildCWD"
          args: [true]
      config:
        both: "from config"
        topology.tick.tuple.freq.secs: 2
    """
    tdef = topology(tmp_path, [bolt("b", extra=extra), bolt("c", command='["node", "-e", "x()"]', fields="[]")],
                    [stream("src", "b"), stream("b", "c")])
    b, c, src = tdef.components["b"], tdef.components["c"], tdef.components["src"]
    assert (src.par, b.par, c.par) == (2, 3, 1)  # numTasks: accepted, unused
    assert b.class_path == "instance.shell:ShellBolt" and src.class_path == "instance.shell:ShellSpout"
    assert (b.config["multilang.command"], b.config["multilang.script"]) == (["python3"], "bolt.py")  # resources/
    assert (src.config["multilang.command"], src.config["multilang.script"]) == (["python3"], "spout.py")
    assert (c.config["multilang.command"], c.config["multilang.script"]) == (["node", "-e", "x()"], "")
    assert b.config["rabbitmq.configfile"] == "etc/rabbit.yml" and b.config["publisher.data_paths"] == ["actions"]
    assert b.config["both"] == "from config"  # the YAML's config wins over addComponentConfig, as in Storm
    assert b.config["topology.tick.tuple.freq.secs"] == 2
    assert c.outputs == {"default": {"fields": [], "direct": False}}
    assert tdef.source == {"file": os.path.join(str(tmp_path), "t.yaml"), "module": None,
                           "sys_path": [str(tmp_path)]}


def test_topology_config_name_and_storm_defaults(tmp_path):
    head = HEAD.replace('name: "t"', 'name: "flux-topo"\nconfig:\n  topology.workers: 2\n  my.key: [1, 2]')
    tdef = topology(tmp_path, [bolt("b")], [stream("src", "b")], head=head)
    assert tdef.name == "flux-topo"
    assert tdef.config == {"topology.workers": 2, "my.key": [1, 2], "topology.reliability.mode": "ATLEAST_ONCE"}
    renamed = flux.load(os.path.join(str(tmp_path), "t.yaml"), "other")
    assert renamed.name == "other"
    unnamed = topology(tmp_path, [bolt("b")], [stream("src", "b")], head=HEAD.replace('name: "t"', ""),
                       name="no-name.yaml")
    assert unnamed.name == "no-name"  # the file's name, as Bittern's own class style
    acks_off = HEAD.replace('name: "t"', 'name: "t"\nconfig:\n  topology.acker.executors: 0')
    assert "topology.reliability.mode" not in topology(tmp_path, [bolt("b")], [stream("src", "b")],
                                                       head=acks_off, name="a.yaml").config


def test_a_bolt_no_stream_feeds_is_left_out_as_flux_does(tmp_path):
    tdef = topology(tmp_path, [bolt("b"), bolt("orphan")], [stream("src", "b")])
    assert list(tdef.components) == ["src", "b"]
    java = '  - id: "log"\n    className: "org.apache.storm.flux.wrappers.bolts.LogInfoBolt"\n'
    with pytest.raises(TopologyError, match="bolt 'log': className org.apache.storm.flux.wrappers.bolts.LogInfoBolt "
                                            "is a Java bolt"):
        topology(tmp_path, [bolt("b"), java], [stream("src", "b")], name="j.yaml")  # (Flux builds it all the same)


def test_names_starting_with_underscores_are_accepted(tmp_path):
    head = HEAD.replace('id: "src"', 'id: "__src"')
    tdef = topology(tmp_path, [bolt("__integration_test_bolt")], [stream("__src", "__integration_test_bolt")],
                    head=head)
    assert list(tdef.components) == ["__src", "__integration_test_bolt"]


# -- includes --------------------------------------------------------------------------

INCLUDED = f"""
name: "included-name"
config:
  shared: "from the include"
  only.included: 1
spouts:
  - id: "src"
    className: "{SPOUT}"
    constructorArgs: [["python3", "included.py"], ["word", "n"]]
    parallelism: 5
bolts:
{bolt("b", fields='["y"]')}
{bolt("extra")}
streams:
{stream("b", "extra")}
"""


@pytest.mark.parametrize("override", [False, True])
def test_includes_merge_as_flux_does(tmp_path, override):
    write(tmp_path, "inc/included.yaml", INCLUDED)
    head = HEAD.replace('name: "t"', f'name: "t"\nconfig:\n  shared: "mine"\nincludes:\n  - file: "inc/included.yaml"'
                                     f'\n    override: {str(override).lower()}')
    tdef = topology(tmp_path, [bolt("b")], [stream("src", "b")], head=head)
    assert tdef.config["only.included"] == 1  # keys the file lacks always come in
    assert list(tdef.components) == ["src", "b", "extra"]  # streams add up: extra is fed by b
    if override:
        assert tdef.name == "included-name" and tdef.config["shared"] == "from the include"
        assert tdef.components["src"].par == 5 and tdef.components["b"].outputs["default"]["fields"] == ["y"]
    else:
        assert tdef.name == "t" and tdef.config["shared"] == "mine"
        assert tdef.components["src"].par == 2 and tdef.components["b"].outputs["default"]["fields"] == ["x"]


def test_resource_includes_are_found_beside_the_file_or_in_resources(tmp_path):
    write(tmp_path, "resources/configs/included.yaml", INCLUDED)
    head = HEAD + 'includes:\n  - resource: true\n    file: "/configs/included.yaml"\n'
    tdef = topology(tmp_path, [bolt("b")], [stream("src", "b")], head=head)
    assert "extra" in tdef.components and tdef.name == "t"


def test_an_included_files_includes_are_not_followed(tmp_path):
    write(tmp_path, "deeper.yaml", "config:\n  deeper: 1\n")
    write(tmp_path, "inc.yaml", 'config:\n  inc: 1\nincludes:\n  - file: "deeper.yaml"\n')
    head = HEAD + 'includes:\n  - file: "inc.yaml"\n'
    tdef = topology(tmp_path, [bolt("b")], [stream("src", "b")], head=head)
    assert tdef.config["inc"] == 1 and "deeper" not in tdef.config


# -- substitution ----------------------------------------------------------------------

def test_properties_file_forms(tmp_path):
    path = write(tmp_path, "p.properties", r"""
        # a comment
        ! another
        plain=value
        colon: with spaces  
        spaced   value with = sign
        escaped\=key=x
        tab=a\tb
        unicode=\u00e9t\u00e9
        multi=one, \
              two
        list=["A string list", "second"]
        empty=
        """)
    assert flux.read_properties(path) == {
        "plain": "value", "colon": "with spaces  ", "spaced": "value with = sign", "escaped=key": "x",
        "tab": "a\tb", "unicode": "été", "multi": "one, two", "list": '["A string list", "second"]', "empty": ""}


def test_property_and_environment_substitution(tmp_path, monkeypatch):
    props = write(tmp_path, "p.properties", 'python=/usr/bin/python3\npar=3\nwords=["alpha", "beta"]\n'
                                             'name=subst-topology\n')
    monkeypatch.setenv("FLUX_TEST_OUT", "/tmp/out")
    head = HEAD.replace('name: "t"', 'name: "${name}"\nconfig:\n  out: "${ENV-FLUX_TEST_OUT}"\n'
                                     '  all: ${words}\n  second: "${words[1]}"\n'
                                     '# ${not.a.property} in a comment is left alone')
    extra = "  parallelism: ${par}\n"
    tdef = topology(tmp_path, [bolt("b", command='["${python}", "b.py"]', extra=extra)], [stream("src", "b")],
                    head=head, filter_file=props, env_filter=True)
    assert tdef.name == "subst-topology"
    assert tdef.config["out"] == "/tmp/out" and tdef.config["all"] == ["alpha", "beta"]
    assert tdef.config["second"] == "beta"
    assert tdef.components["b"].par == 3 and tdef.components["b"].config["multilang.command"] == \
        ["/usr/bin/python3", "b.py"]


@pytest.mark.parametrize("text, kw, message", [
    ("name: ${missing}", {}, "t.yaml line 1: ${missing} has no value: give its properties with --filter FILE"),
    ("name: ${missing}", {"filter": True}, "t.yaml line 1: ${missing}: no property 'missing' in the --filter file"),
    ("x: 1\nname: ${ENV-FLUX_NOT_SET}", {}, "t.yaml line 2: ${ENV-FLUX_NOT_SET} is an environment variable: "
                                            "add --env-filter to substitute it"),
    ("name: ${ENV-FLUX_NOT_SET}", {"env_filter": True},
     "t.yaml line 1: ${ENV-FLUX_NOT_SET}: the environment variable 'FLUX_NOT_SET' is not set"),
    ("name: ${words[5]}", {"filter": True}, "t.yaml line 1: ${words[5]}: property 'words' has 2 element(s)"),
])
def test_substitution_errors(tmp_path, monkeypatch, text, kw, message):
    monkeypatch.delenv("FLUX_NOT_SET", raising=False)
    if kw.pop("filter", False):
        kw["filter_file"] = write(tmp_path, "p.properties", 'words=["a", "b"]\n')
    assert error(tmp_path, text, **kw) == message


def test_filter_options_are_for_flux_files_only():
    with pytest.raises(BitternError, match="--filter and --env-filter are for Flux YAML files"):
        flux.configure("topology.py", "p.properties", False)
    flux.configure("t.yaml", None, False)


# -- refused, one line -----------------------------------------------------------------

def vertex(kind, vid, cls, more=""):
    return textwrap.dedent(f"""
        {kind}s:
          - id: "{vid}"
            className: "{cls}"
            constructorArgs: [["python3", "x.py"], ["x"]]
        """) + textwrap.indent(textwrap.dedent(more), "    ")


@pytest.mark.parametrize("body, message", [
    (HEAD + "bolts:\n  - id: \"count\"\n    className: \"org.apache.storm.testing.TestWordCounter\"\n"
            "streams:\n" + stream("src", "count"),
     "t.yaml: bolt 'count': className org.apache.storm.testing.TestWordCounter is a Java bolt; Bittern runs Flux's "
     "shell components only (org.apache.storm.flux.wrappers.bolts.FluxShellBolt)"),
    (vertex("spout", "kafka", "org.apache.storm.kafka.spout.KafkaSpout"),
     "t.yaml: spout 'kafka': className org.apache.storm.kafka.spout.KafkaSpout is a Java spout; Bittern runs "
     "Flux's shell components only (org.apache.storm.flux.wrappers.spouts.FluxShellSpout)"),
    (vertex("spout", "s", BOLT), f"t.yaml: spout 's': {BOLT} is a bolt, listed under spouts"),
    (HEAD + "bolts:\n" + bolt("b") + "streams:\n" + stream("src", "b", "type: CUSTOM\ncustomClass:\n"
                                                                       "  className: com.example.MyGrouping"),
     "t.yaml: stream 'src --> b': custom grouping com.example.MyGrouping is a Java class; Bittern cannot run "
     "Java groupings"),
    (HEAD + "components:\n  - id: \"scheme\"\n    className: \"org.apache.storm.kafka.StringScheme\"\n",
     "t.yaml: components: bean 'scheme' (org.apache.storm.kafka.StringScheme) is a Java object; Bittern runs "
     "Flux's shell components (FluxShellSpout, FluxShellBolt) only"),
    ("topologySource:\n  className: \"org.apache.storm.flux.test.SimpleTopology\"\n",
     "t.yaml: topologySource org.apache.storm.flux.test.SimpleTopology is a Java topology; Bittern runs Flux's "
     "shell components (FluxShellSpout, FluxShellBolt) only"),
    (HEAD + "workerHooks:\n  - id: \"h\"\n    className: \"org.example.Hook\"\n",
     "t.yaml: workerHooks: org.example.Hook is a Java worker hook; Bittern runs Flux's shell components "
     "(FluxShellSpout, FluxShellBolt) only"),
    (vertex("spout", "s", "org.apache.storm.spout.ShellSpout"),
     "t.yaml: spout 's': org.apache.storm.spout.ShellSpout declares no outputs and Flux cannot place it; use "
     "org.apache.storm.flux.wrappers.spouts.FluxShellSpout"),
    (vertex("spout", "s", SPOUT, "configMethods:\n  - name: \"setEnv\"\n    args: [{PATH: /x}]\n"),
     "t.yaml: spout 's': configMethod setEnv: the command's environment cannot be set per component here; set it "
     "for the topology's processes instead"),
    (vertex("spout", "s", SPOUT, "configMethods:\n  - name: \"changeChildCWD\"\n    args: [false]\n"),
     "t.yaml: spout 's': configMethod changeChildCWD(false): the command always runs in the Flux file's directory "
     "here"),
    (vertex("spout", "s", SPOUT, "configMethods:\n  - name: \"withTimeout\"\n    args: [3]\n"),
     "t.yaml: spout 's': configMethod withTimeout is not a method of Flux's shell wrappers (setDefaultStream, "
     "setNamedStream, addComponentConfig, changeChildCWD)"),
    (vertex("spout", "s", SPOUT, "configMethods:\n  - name: \"addComponentConfig\"\n    args: [{ref: \"x\"}, 1]\n"),
     "t.yaml: spout 's': argument {'ref': 'x'} refers to a Java component bean; Bittern cannot build it"),
    (vertex("spout", "s", SPOUT, "properties:\n  - name: \"timeout\"\n    value: 3\n"),
     "t.yaml: spout 's': properties set Java fields or call a Java factory; "
     "org.apache.storm.flux.wrappers.spouts.FluxShellSpout takes constructorArgs and configMethods"),
    (vertex("spout", "s", SPOUT, "paralelism: 2\n"), "t.yaml: spout 's': unknown key 'paralelism'"),
    ("spouts:\n  - id: s\n    className: " + SPOUT + "\n    constructorArgs: [[]]\n",
     "t.yaml: spout 's': the command (constructorArgs[0]) is empty"),
    ("spouts:\n  - id: s\n    className: " + SPOUT + "\n    constructorArgs: [[\"\", \"x.py\"]]\n",
     "t.yaml: spout 's': the command (constructorArgs[0]) is empty"),
    ("spouts:\n  - id: s\n    className: " + SPOUT + "\n    constructorArgs: \"python3 x.py\"\n",
     "t.yaml: spout 's': constructorArgs must be [command] or [command, output fields], got 'python3 x.py'"),
    ("spouts:\n  - id: s\n    className: " + SPOUT + "\n    constructorArgs: [[\"python3\", 3]]\n",
     "t.yaml: spout 's': the command (constructorArgs[0]) must be a list of strings, got ['python3', 3]"),
    (HEAD.replace("parallelism: 2", "parallelism: 0"), "t.yaml: component 'src': parallelism must be an integer >= 1, "
                                                       "got 0"),
    (HEAD + "toplogy: x\n", "t.yaml: unknown key 'toplogy' (Flux knows bolts, components, config, includes, name, "
                            "spouts, streams, topologySource, workerHooks)"),
    (HEAD + "bolts:\n" + bolt("b") + "streams:\n" + stream("nope", "b"),
     "t.yaml: stream 'nope --> b': from 'nope' is not a spout or bolt of this file (b, src)"),
    (HEAD + "bolts:\n" + bolt("b") + "streams:\n" + stream("src", "src"),
     "t.yaml: stream 'src --> src': to 'src' is not a bolt of this file (b)"),
    (HEAD + "bolts:\n" + bolt("b") + "streams:\n  - name: \"s1\"\n    from: src\n    to: b\n",
     "t.yaml: stream 's1': needs a grouping (type: SHUFFLE, FIELDS, ...)"),
    (HEAD + "bolts:\n" + bolt("b") + "streams:\n" + stream("src", "b", "type: shuffle"),
     "t.yaml: stream 'src --> b': grouping type 'shuffle' is not one of SHUFFLE, ALL, GLOBAL, NONE, DIRECT, "
     "LOCAL_OR_SHUFFLE, FIELDS, CUSTOM"),
    (HEAD + "bolts:\n" + bolt("b") + "streams:\n" + stream("src", "b", "type: FIELDS"),
     "t.yaml: stream 'src --> b': a FIELDS grouping needs args: [field, ...], got None"),
    (HEAD + "bolts:\n" + bolt("b") + "streams:\n" + stream("src", "b", 'type: FIELDS\nargs: ["nope"]'),
     "t.yaml: component 'b': input 'src' stream 'default' has no field 'nope' to group on (fields: ['word', 'n'])"),
    (HEAD + "bolts:\n" + bolt("b") + "streams:\n" + stream("src", "b", 'type: SHUFFLE\nstreamId: "other"'),
     "t.yaml: component 'b': input 'src' has no stream 'other' (streams: default)"),
    (HEAD + "bolts:\n" + bolt("b") + bolt("c") + "streams:\n" + stream("b", "c"),
     "t.yaml: bolt 'c' reads bolt 'b', which no stream feeds: Flux leaves 'b' out of the topology"),
    (HEAD + "bolts:\n" + bolt("b") + bolt("b") + "streams:\n" + stream("src", "b"), "t.yaml: bolt 'b' is defined twice"),
    (HEAD + "bolts:\n" + bolt("stmgr") + "streams:\n" + stream("src", "stmgr"),
     "t.yaml: component 'stmgr': the name 'stmgr' is reserved by Bittern (the stream managers' logs stmgr-C.log); "
     "choose another"),
    (HEAD + "includes:\n  - file: \"missing.yaml\"\n", "t.yaml: include 'missing.yaml' not found (looked at "),
    (HEAD + "includes:\n  - file: \"x.yaml\"\n    overide: true\n", "t.yaml: include 'x.yaml': unknown key 'overide'"),
    ("name: [unclosed\n", "t.yaml line 2: not valid YAML: "),
    ("- just\n- a list\n", "t.yaml: a Flux file is a mapping (name, config, spouts, bolts, streams), got a list"),
    ("name: t\n", "t.yaml: Flux topology 't' has no components"),
])
def test_refused_in_one_line(tmp_path, body, message):
    msg = error(tmp_path, body)
    assert msg.startswith(message), msg


def test_a_missing_file_and_filter(tmp_path):
    with pytest.raises(TopologyError, match="does not exist"):
        flux.load(os.path.join(str(tmp_path), "nope.yaml"))
    path = write(tmp_path, "t.yaml", HEAD)
    with pytest.raises(TopologyError, match=r"--filter '.*nope.properties': cannot read it: No such file"):
        flux.load(path, filter_file=os.path.join(str(tmp_path), "nope.properties"))
