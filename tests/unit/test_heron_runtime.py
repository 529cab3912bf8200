"""HeronSpout / HeronBolt (bittern/compat/heron_runtime.py) host real heronpy components:
the adapter is heronpy's delegate, so the user's ``emit``/``ack``/``fail``/``log`` reach
what the instance binds, with heronpy's argument order; the runtime's calls reach the
user's methods; the context answers heronpy's questions; state and close are forwarded.

heronpy lives in a throwaway venv (see test_heron_translate.py), so one script drives
both adapters there the way ``instance/spout.py`` and ``instance/bolt.py`` do (bind,
initialize, call) and prints what happened as JSON for the tests below.
"""
from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from foreignvenv import heron_python  # noqa: F401 - the heronpy venv fixture

TOPOLOGY = """
from heronpy.api.bolt.bolt import Bolt
from heronpy.api.metrics import CountMetric
from heronpy.api.spout.spout import Spout
from heronpy.api.state.stateful_component import StatefulComponent
from heronpy.api.stream import Grouping
from heronpy.api.topology import Topology

EVENTS = []

class Words(Spout):
    outputs = ["word"]

    def initialize(self, config, context):
        EVENTS.append(["spout.initialize", config["my.key"], context.get_task_id()])

    def next_tuple(self):
        EVENTS.append(["tasks", self.emit(["w"], tup_id=7, stream="default", need_task_ids=True)])
        self.emit(["u"])

    def ack(self, tup_id):
        EVENTS.append(["ack", tup_id])

    def fail(self, tup_id):
        EVENTS.append(["fail", tup_id])

    def activate(self):
        EVENTS.append(["activate"])

    def deactivate(self):
        EVENTS.append(["deactivate"])

    def close(self):
        EVENTS.append(["spout.close"])


class Count(Bolt, StatefulComponent):
    outputs = ["word", "count"]

    def init_state(self, stateful_state):
        self.state = stateful_state
        self.state.put("seen", 0)
        self.state["window"] = [1, 2]  # as heronpy's window bolts do
        EVENTS.append(["dict", "window" in self.state, self.state["window"], "nope" in self.state,
                       sorted(k for k, _ in self.state.enumerate())])

    def pre_save(self, checkpoint_id):
        EVENTS.append(["pre_save", checkpoint_id])

    def initialize(self, config, context):
        self.metric = context.register_metric("words", CountMetric(), 10)
        EVENTS.append(["bolt.initialize", context.get_component_id(), context.get_topology_name(),
                       sorted([s.component_name, s.id, g] for s, g in context.get_this_sources().items()),
                       context.get_cluster_config()["my.key"]])
        try:
            context.add_task_hook(object())
        except TypeError as e:  # not an ITaskHook (bittern/compat/heron_hooks.py)
            EVENTS.append(["hook", str(e)])
        config["topology.tick.tuple.freq.secs"] = "3"  # as heronpy's window bolts do

    def process(self, tup):
        self.metric.incr()
        self.state.put("seen", self.state.get("seen") + 1)
        self.emit([tup.values[0], 1], anchors=[tup])
        self.emit([tup.values[0], 2], stream="default")
        if tup.values[0] == "bad":
            self.fail(tup)
        else:
            self.ack(tup)
        self.log("processed " + tup.values[0], "warn")

    def process_tick(self, tup):
        EVENTS.append(["tick", self.is_tick(tup), tup.component])


class T(Topology):
    config = {"my.key": "topology"}
    words = Words.spec()
    count = Count.spec(par=2, inputs={words: Grouping.fields("word")})
"""

DRIVE = """
import json, logging, sys
from bittern.api.context import TopologyContext
from bittern.api.state import State
from bittern.api.tuple import Tuple, tick_tuple
from bittern.loader import load_topology
from bittern.compat.heron_runtime import HeronBolt, HeronSpout

tdef = load_topology(sys.argv[1])
import bittern_topology as user

tasks = {"words": [3], "count": [1, 2]}
def context(comp, task, conf):
    return TopologyContext(tdef.name, task, comp, tasks[comp].index(task), 0, conf, tasks,
                           {1: "count", 2: "count", 3: "words"}, tdef)

class Capture(logging.Handler):
    records = []
    def emit(self, record):
        self.records.append([record.name, record.levelname, record.getMessage()])
logging.getLogger().addHandler(Capture())
logging.getLogger().setLevel(logging.DEBUG)
out = {}

calls = []
spout = HeronSpout()  # bound as SpoutInstance.bind does, before initialize
spout.emit = lambda *a: calls.append(["emit", *a]) or [1, 2]
spout.logger = logging.getLogger("words[3]")
conf = dict(tdef.config, **tdef.components["words"].config)
spout.initialize(conf, context("words", 3, conf))
spout.activate(); spout.next_tuple(); spout.ack(7); spout.fail(8); spout.deactivate(); spout.close()
out["spout_calls"] = calls

calls = []
bolt = HeronBolt()  # bound as BoltInstance.bind does
bolt.emit = lambda *a: calls.append(["emit", a[0], a[1], [t.values for t in a[2]] if a[2] else a[2], *a[3:]])
bolt.ack = lambda tup: calls.append(["ack", tup.values])
bolt.fail = lambda tup: calls.append(["fail", tup.values])
bolt.logger = logging.getLogger("count[1]")
conf = dict(tdef.config, **tdef.components["count"].config)
ctx = context("count", 1, conf)
bolt.initialize(conf, ctx)
out["flags"] = [bolt.auto_ack, bolt.auto_anchor, bolt.auto_fail]
state = State.for_task(0, 2)
bolt.init_state(state)  # as the instance does for a stateful component
for w in ("good", "bad"):
    bolt.process(Tuple(None, "words", "default", 3, [w]))
bolt.process_tick(tick_tuple(3.0))
bolt.pre_save(4)
out["bolt_calls"] = calls
out["state"] = state.get("seen")
out["metric"] = ctx.user_metrics["words"].get_value_and_reset()
out["tick_conf"] = conf["topology.tick.tuple.freq.secs"]
out["events"] = user.EVENTS
out["logs"] = [r for r in Capture.records if r[0] in ("count[1]", "words[3]")]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def driven(heron_python, tmp_path_factory):  # noqa: F811 - (heron_python: the fixture imported above)
    d = tmp_path_factory.mktemp("heron_runtime")
    (d / "topo.py").write_text(textwrap.dedent(TOPOLOGY))
    r = subprocess.run([heron_python, "-c", DRIVE, str(d / "topo.py")], capture_output=True, text=True, timeout=60,
                       cwd=str(d))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_spout_delegate_and_callbacks(driven):
    # heronpy's BaseSpout.emit(tup, tup_id, stream, direct_task, need_task_ids), positionally
    assert driven["spout_calls"] == [["emit", ["w"], 7, "default", None, True],
                                     ["emit", ["u"], None, "default", None, False]]
    events = driven["events"]
    assert events[0] == ["spout.initialize", "topology", 3]
    assert events[1:7] == [["activate"], ["tasks", [1, 2]], ["ack", 7], ["fail", 8], ["deactivate"],
                           ["spout.close"]]


def test_bolt_delegate_acks_and_anchors_only_when_told(driven):
    assert driven["flags"] == [False, False, True]  # no auto-ack / auto-anchor; a raise fails
    assert driven["bolt_calls"] == [
        ["emit", ["good", 1], "default", [["good"]], None, False],  # anchors=[tup]
        ["emit", ["good", 2], "default", None, None, False],  # unanchored
        ["ack", ["good"]],
        ["emit", ["bad", 1], "default", [["bad"]], None, False],
        ["emit", ["bad", 2], "default", None, None, False],
        ["fail", ["bad"]]]
    assert ["tick", True, "__system"] in driven["events"]
    assert driven["tick_conf"] == "3"  # the live config: the instance reads its tick period after initialize


def test_bolt_context_metrics_log_and_state(driven):
    init = next(e for e in driven["events"] if e[0] == "bolt.initialize")
    assert init[1:] == ["count", "topo", [["words", "default", 2]], "topology"]  # 2: heronpy's FIELDS
    hook = next(e for e in driven["events"] if e[0] == "hook")
    assert hook[1] == "component 'count': add_task_hook() takes an ITaskHook (heronpy.api.task_hook), got object"
    assert driven["metric"] == 2
    assert ["count[1]", "WARNING", "processed good"] in driven["logs"]
    assert driven["state"] == 2  # heronpy State.put/get on Bittern's State
    assert ["pre_save", 4] in driven["events"]
    assert ["dict", True, [1, 2], False, ["seen", "window"]] in driven["events"]
