"""The stream manager's tcp port, with real stream manager processes.

Three containers are planned; stream managers run for containers 0 and 1 only.
Container 2 never starts, so its identities (``s2``, ``c2``) are free for a test
to claim: that is how a sender that *looks* like a peer stream manager but sends
garbage is made. Instances are fake: DEALER sockets of this process that connect
to a stream manager's ipc endpoints with an instance's identity and register
(the protocol of instance/runtime.py). The topology master is fake too: a ROUTER
bound on the plan's endpoint that reads the stream managers' heartbeats, which
carry their counters (``malformed``, ``denied``, ``from_peers``, ...).

* with CURVE keys in the plan, batches flow between the two stream managers; a
  client with an unknown key, without CURVE, or with the wrong server key gets
  nothing through, is counted as ``denied``, and legit traffic keeps flowing;
* fencing (streammgr/fencing.py): with assignment versions in the plan, batches of an
  older copy of a container are dropped and counted (``fenced``) once a newer copy
  spoke; an instance that registers with an older placement is told ``FENCED``; a
  stream manager the topology master tells ``FENCED`` tells its instances and exits
  with ``EXIT_FENCED``;
* without keys (local mode), garbage on the tcp port (random bytes, wrong frame
  counts, unknown kinds, undecodable control, batches for tasks that are not
  there, unknown identities, a flood) is dropped, counted as ``malformed`` exactly,
  logged at most about once a second, and legit traffic keeps flowing.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import msgpack
import psutil
import pytest
import zmq

from bittern import curve, wire
from bittern.api.topology import ComponentDef, TopologyDef
from bittern.config import defaults
from bittern.packing import round_robin
from bittern.proc import EXIT_FENCED, pid_alive, spawn
from bittern.runplan import RunPlan
from bittern.wire import ACK, CTRL, DATA, Op
from conftest import wait_for
from zkfixture import free_port

pytestmark = pytest.mark.skipif(not curve.available(), reason="libzmq without CURVE")

CONTAINERS = 3  # tasks 1,4 -> container 0; 2,5 -> 1; 3,6 -> 2 (never started)
RUNNING = (0, 1)


def make_plan(home, ipc, with_keys, placed=None):
    outputs = {"default": {"fields": ["x"], "direct": False}}
    comps = {"b": ComponentDef("b", "bolt", "nowhere:Bolt", 6, outputs)}  # never loaded: no instances
    packing = round_robin({"b": 6}, CONTAINERS)
    stmgrs = {c: {"tcp": f"tcp://127.0.0.1:{free_port()}", "ipc": f"ipc://{ipc}/c{c}",
                  "ctl": f"ipc://{ipc}/k{c}"} for c in range(CONTAINERS)}
    keys = None
    if with_keys:
        keys = {c: dict(zip(("public", "secret"), curve.generate())) for c in range(CONTAINERS)}
    plan = RunPlan("sec", home, TopologyDef("sec", comps, {}), packing, f"tcp://127.0.0.1:{free_port()}",
                   stmgrs, defaults(), placed=placed)
    doc = plan.to_dict()
    if keys is not None:
        doc["keys"] = {str(c): k for c, k in keys.items()}
    return plan, doc, keys


def write_plan(home, c, doc, keys):
    """One plan file per container, with only that container's secret (as a supervisor writes it)."""
    d = dict(doc)
    if keys is not None:
        d["keys"] = {str(k): {"public": v["public"], "secret": v["secret"] if k == c else None}
                     for k, v in keys.items()}
    path = os.path.join(home, f"plan-{c}.json")
    with open(path, "w") as f:
        json.dump(d, f)
    return path


# Until RunPlan carries ``keys`` itself, hand them to the stream manager as an attribute.
SHIM = """import json, sys
from bittern import logs
from bittern.runplan import RunPlan
from streammgr.stmgr import StreamManager
path, c = sys.argv[1], int(sys.argv[2])
plan = RunPlan.load(path)
if getattr(plan, "keys", None) is None and "keys" in json.load(open(path)):
    plan.keys = json.load(open(path))["keys"]
logs.setup(f"{plan.name} stmgr-{c}")
StreamManager(plan, c).run()
"""


class Cluster:
    """Two real stream managers, a fake topology master, fake instances."""

    def __init__(self, home, with_keys, placed=None):
        self.home = home
        self.ipc = tempfile.mkdtemp(prefix="bsec-", dir="/tmp")  # ipc paths must stay short
        self.plan, self.doc, self.keys = make_plan(home, self.ipc, with_keys, placed)
        self.ctx = zmq.Context()
        self.sockets = []
        self.procs = {}
        self.logs = {}
        self.inst = {}  # task -> (data DEALER, control DEALER)
        self.received = {}
        self.counters = {}  # container -> latest heartbeat counters
        self.heartbeats = {}  # container -> heartbeats read
        self.registered = set()

    def start(self):
        doc = self.doc
        home = self.home
        self.started = time.monotonic()
        self.tm = self.socket(zmq.ROUTER)
        if self.keys is not None:  # the topology master is a CURVE server with container 0's key
            curve.server_options(self.tm, self.keys[0]["secret"], self.keys[0]["public"])
        self.tm.bind(self.plan.tmaster)
        # the pid the fake instances register with (a fenced stream manager SIGTERMs its instances)
        self.dummy = subprocess.Popen(["sleep", "300"])
        for c in RUNNING:
            path = write_plan(home, c, doc, self.keys)
            self.logs[c] = os.path.join(home, f"stmgr-{c}.log")
            if getattr(RunPlan.load(path), "keys", None) is not None or self.keys is None:
                cmd = [sys.executable, "-m", "streammgr", "--plan", path, "--container", str(c)]
            else:
                cmd = [sys.executable, "-c", SHIM, path, str(c)]
            self.procs[c] = spawn(cmd, self.logs[c])
        for c in RUNNING:
            for t in self.plan.packing.containers[c]:
                data, ctl = self.socket(zmq.DEALER), self.socket(zmq.DEALER)
                for s in (data, ctl):
                    s.setsockopt(zmq.IDENTITY, wire.instance_identity(t))
                ctl.connect(self.plan.stmgrs[c]["ctl"])
                data.connect(self.plan.stmgrs[c]["ipc"])
                self.inst[t] = (data, ctl)
        for t, (data, _) in self.inst.items():
            c = self.plan.packing.task_container[t]
            data.send_multipart(wire.ctrl(Op.REGISTER, task=t, component="b", pid=self.dummy.pid, ok=True,
                                          container=c, placed=self.plan.placed_at(c)))
        # a stream manager relays a registration once it has read it: from then on,
        # the instance's data connection is known to it
        wait_for(lambda: self.read_tm() or self.registered >= set(self.inst), timeout=20,
                 what="the fake instances registered")
        self.received = {t: [] for t in self.inst}

    def socket(self, kind):
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        self.sockets.append(s)
        return s

    def read_tm(self):
        while self.tm.poll(0):
            ident, kind, body = self.tm.recv_multipart()[:3]
            if kind != CTRL:
                continue
            msg = msgpack.unpackb(body, raw=False, strict_map_key=False)
            if msg.get("op") == Op.REGISTER:
                self.registered.add(msg["task"])
            elif msg.get("op") == Op.HEARTBEAT:
                self.counters[msg["container"]] = msg["counters"]
                self.heartbeats[msg["container"]] = self.heartbeats.get(msg["container"], 0) + 1
        return False

    def wait_heartbeats(self, containers=(0, 1)):
        """Until each of ``containers`` sent two more heartbeats: the second was sent
        after everything done before this call (their counters include it)."""
        self.read_tm()
        want = {c: self.heartbeats.get(c, 0) + 2 for c in containers}
        wait_for(lambda: self.read_tm() or all(self.heartbeats.get(c, 0) >= n for c, n in want.items()),
                 timeout=10, what=f"two more heartbeats of containers {list(containers)}")

    def counter(self, c, name):
        self.read_tm()
        return self.counters.get(c, {}).get(name, 0)

    def wait_counter(self, c, name, pred, what, timeout=10):
        wait_for(lambda: pred(self.counter(c, name)), timeout=timeout, interval=0.2,
                 what=f"{what} (container {c} {name}={self.counter(c, name)})")
        return self.counter(c, name)

    def send(self, src, dest, payload, kind=DATA):
        self.inst[src][0].send_multipart([kind, wire.task_bytes(dest), payload])

    def collect(self):
        for t, (data, ctl) in self.inst.items():
            n = 0
            while data.poll(0):
                frames = data.recv_multipart()
                if frames[0] in (DATA, ACK):
                    self.received[t].append((frames[0], frames[1]))
                    n += 1
            if n:
                ctl.send_multipart(wire.ctrl(Op.CREDIT, task=t, n=n))

    def wait_received(self, task, payloads, timeout=10, kind=DATA):
        want = [(kind, p) for p in payloads]

        def arrived():
            self.collect()
            return all(w in self.received[task] for w in want)
        wait_for(arrived, timeout=timeout, interval=0.05, what=f"{len(want)} batches at task {task}")

    def log_lines(self, c, pattern):
        with open(self.logs[c], errors="replace") as f:
            return [line for line in f if re.search(pattern, line)]

    def alive(self):
        return all(p.poll() is None for p in self.procs.values())

    def close(self):
        pids = [p.pid for p in self.procs.values()]
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = {}
        for c, p in self.procs.items():
            try:
                codes[c] = p.wait(timeout=10)
            except Exception:  # noqa: BLE001 - it must go whatever happens
                p.kill()
                codes[c] = p.wait(timeout=5)
        for s in self.sockets:
            s.close(linger=0)
        self.ctx.term()
        if self.dummy.poll() is None:
            self.dummy.kill()
        self.dummy.wait(timeout=5)
        shutil.rmtree(self.ipc, ignore_errors=True)
        gone = [pid for pid in pids if pid_alive(pid) or psutil.pid_exists(pid)]
        assert not gone, f"stream managers still running: {gone}"
        return codes


@pytest.fixture
def cluster_factory(home):
    made = []

    def make(with_keys, placed=None):
        cl = Cluster(home, with_keys, placed)
        made.append(cl)
        cl.start()
        return cl
    yield make
    for cl in made:
        if cl.ctx is not None and not cl.ctx.closed:
            cl.close()


def legit_round(cl, tag, n=20):
    """Batches both ways between the two stream managers, data and acks; all must arrive."""
    to1 = [b"%s-0to1-%d" % (tag, i) for i in range(n)]
    to0 = [b"%s-1to0-%d" % (tag, i) for i in range(n)]
    for p in to1:
        cl.send(1, 2, p)  # task 1 (container 0) -> task 2 (container 1)
    for p in to0:
        cl.send(5, 4, p)  # task 5 (container 1) -> task 4 (container 0)
    cl.send(4, 5, tag + b"-ack", kind=ACK)
    cl.wait_received(2, to1)
    cl.wait_received(4, to0)
    cl.wait_received(5, [tag + b"-ack"], kind=ACK)
    return 2 * n + 1


def test_curve_peers_exchange_data_and_strangers_are_denied(cluster_factory):
    cl = cluster_factory(with_keys=True)
    sent = legit_round(cl, b"first")
    assert "with CURVE" in "".join(cl.log_lines(1, "up \\(pid"))
    tcp1 = cl.plan.stmgrs[1]["tcp"]
    server_public = cl.keys[1]["public"]

    def stranger(setup, identity):
        s = cl.socket(zmq.DEALER)
        s.setsockopt(zmq.IDENTITY, identity)
        setup(s)
        s.connect(tcp1)
        for i in range(5):  # a batch for a real task, and a backpressure claim
            s.send_multipart([DATA, wire.task_bytes(2), b"stolen-%d" % i], zmq.NOBLOCK)
        s.send_multipart(wire.ctrl(Op.BACKPRESSURE, container=2, on=True), zmq.NOBLOCK)
        return s

    # a client key that is not in the plan (it knows the server's public key: that is no secret)
    pub, sec = curve.generate()
    stranger(lambda s: curve.client_options(s, server_public, pub, sec), b"s2")
    cl.wait_counter(1, "denied", lambda n: n >= 1, "the unknown key refused")
    assert cl.log_lines(1, "refused a connection: its CURVE key is not one of this topology's")
    # no CURVE at all, and a client that has its own keys but the wrong server key
    stranger(lambda s: None, b"c2")
    other_pub, _ = curve.generate()
    stranger(lambda s: curve.client_options(s, other_pub, pub, sec), b"s9")
    before = cl.counter(1, "denied")
    cl.wait_counter(1, "denied", lambda n: n >= before + 2, "the clients without the right keys refused")

    sent += legit_round(cl, b"second")
    cl.wait_heartbeats()  # a heartbeat after the last batch
    cl.collect()
    everything = [p for t in cl.received for _, p in cl.received[t]]
    assert not [p for p in everything if p.startswith(b"stolen")], "a stranger's batch was delivered"
    assert cl.counter(1, "malformed") == 0, "nothing of a stranger may even reach the message checks"
    assert cl.counter(0, "from_peers") + cl.counter(1, "from_peers") == sent
    assert cl.counter(0, "denied") == 0
    assert cl.alive()
    # refusals are logged at most about once a second, however fast the strangers retry
    denied_lines = cl.log_lines(1, "refused a connection")
    uptime = time.monotonic() - cl.started
    assert cl.counter(1, "denied") > len(denied_lines), "strangers retry: refused more often than logged"
    assert len(denied_lines) <= uptime + 2, (len(denied_lines), uptime)
    codes = cl.close()
    assert codes == {0: 0, 1: 0}, f"the stream managers must stop cleanly on SIGTERM: {codes}"


def test_garbage_on_the_tcp_port_is_dropped_counted_and_harmless(cluster_factory):
    cl = cluster_factory(with_keys=False)
    sent = legit_round(cl, b"first")
    assert "(no CURVE)" in "".join(cl.log_lines(1, "up \\(pid"))
    tcp1 = cl.plan.stmgrs[1]["tcp"]
    rnd = random.Random(7)

    def junk(n=64):
        return bytes(rnd.randrange(256) for _ in range(n))

    def dealer(identity=None):
        s = cl.socket(zmq.DEALER)
        if identity:
            s.setsockopt(zmq.IDENTITY, identity)
        s.connect(tcp1)
        return s

    anon, data2, ctrl2 = dealer(), dealer(b"s2"), dealer(b"c2")
    msgs = [
        (anon, [junk()]),  # an identity that no stream manager has
        (anon, [DATA, wire.task_bytes(2), b"anon-batch"]),  # well-formed, but from a stranger
        (data2, [junk()]),  # random bytes: an unknown kind
        (data2, [DATA]),  # one frame
        (data2, [DATA, wire.task_bytes(2), b"a", b"b", b"c", b"d", b"e"]),  # seven frames
        (data2, [DATA, wire.task_bytes(999), b"x999"]),  # a task that is not in the plan
        (data2, [DATA, wire.task_bytes(1), b"x1"]),  # a task of another container
        (data2, [ACK, b"\x00\x02", b"short-dest"]),  # a destination that is not 4 bytes
        (data2, [b"Z", wire.task_bytes(2), b"zz"]),  # an unknown kind
        (data2, wire.ctrl(Op.BACKPRESSURE, container=2, on=True)),  # control on the data connection
        (ctrl2, [CTRL, b"\xc1\xc1\xc1 not msgpack"]),  # undecodable control
        (ctrl2, [CTRL, msgpack.packb(5)]),  # decodes, but not a map
        (ctrl2, [CTRL, msgpack.packb({"op": "start"})]),  # an op peers do not send
        (ctrl2, wire.ctrl(Op.BACKPRESSURE, container=0, on=True)),  # container 2 speaking for 0
        (ctrl2, [CTRL]),  # too few frames
        (ctrl2, [CTRL, b"a", b"b"]),  # too many
        (ctrl2, [DATA, wire.task_bytes(2), b"data-on-ctrl"]),  # data on the control connection
    ]
    for s, frames in msgs:
        s.send_multipart(frames)
    expected = len(msgs)
    cl.wait_counter(1, "malformed", lambda n: n >= expected, "every malformed message counted")
    sent += legit_round(cl, b"second")

    # a flood from a stranger while legit traffic flows: it neither blocks nor kills anything
    flood = dealer()
    for i in range(3000):
        flood.send_multipart([DATA, wire.task_bytes(2), b"flood-%d" % i])
        if i % 500 == 0:
            cl.send(1, 2, b"during-flood-%d" % i)
    expected += 3000
    cl.wait_received(2, [b"during-flood-%d" % i for i in range(0, 3000, 500)])
    sent += 6
    cl.wait_counter(1, "malformed", lambda n: n >= expected, "the flood counted", timeout=20)
    cl.wait_heartbeats((1,))  # a heartbeat after the last message: nothing counted twice
    assert cl.counter(1, "malformed") == expected, "each malformed message counted exactly once"

    # not even ZeroMQ: raw bytes on the port. libzmq takes what does not start like a
    # ZMTP 3 greeting for ZMTP 1.0, so some of it may come out as messages (then they
    # are malformed ones), or the connection is closed; either way nothing gets through.
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", int(tcp1.rsplit(":", 1)[1]))) as raw:
            raw.sendall(junk(2048))
    sent += legit_round(cl, b"third")
    cl.wait_heartbeats()  # a heartbeat after the last batch
    cl.collect()
    assert cl.counter(1, "malformed") >= expected
    assert cl.counter(0, "malformed") == 0 and cl.counter(0, "dropped") == 0 and cl.counter(1, "dropped") == 0
    assert cl.counter(0, "from_peers") + cl.counter(1, "from_peers") == sent
    got = {p for _, p in cl.received[2]}
    assert not [p for p in got if not re.match(rb"(first|second|third|during-flood)", p)], \
        "garbage reached an instance"
    assert cl.alive()
    # the causes are in the log, at most about one line a second
    lines = cl.log_lines(1, "tcp port: dropped")
    assert lines and all(re.search(r"dropped (from an unknown peer identity|an? .* from b'[sc]2')", line)
                         for line in lines), lines
    assert len(lines) <= time.monotonic() - cl.started + 2, f"{len(lines)} lines: not rate-limited"
    assert len(cl.log_lines(1, "Traceback")) == 0
    codes = cl.close()
    assert codes == {0: 0, 1: 0}, f"the stream managers must stop cleanly on SIGTERM: {codes}"


def test_an_older_copy_of_a_container_is_fenced_and_a_fenced_stream_manager_stops(cluster_factory):
    cl = cluster_factory(with_keys=False, placed={0: 1, 1: 1, 2: 1})
    sent = legit_round(cl, b"first")
    tcp1 = cl.plan.stmgrs[1]["tcp"]

    def dealer(identity):
        s = cl.socket(zmq.DEALER)
        s.setsockopt(zmq.IDENTITY, identity)
        s.connect(tcp1)
        return s

    # container 2 never started here: its copy at version 1 (the plan's) gets through...
    old = dealer(b"s2@1")
    old.send_multipart([DATA, wire.task_bytes(2), b"old-before"])
    cl.wait_received(2, [b"old-before"])
    # ...until a newer copy (version 3, placed after a move) speaks: from then on the
    # old copy is fenced, its batches dropped and counted, the new one's delivered
    new = dealer(b"s2@3")
    new.send_multipart([DATA, wire.task_bytes(2), b"new-1"])
    cl.wait_received(2, [b"new-1"])
    for i in range(5):
        old.send_multipart([DATA, wire.task_bytes(2), b"old-after-%d" % i])
    dealer(b"c2@1").send_multipart(wire.ctrl(Op.BACKPRESSURE, container=2, on=True))
    cl.wait_counter(1, "fenced", lambda n: n >= 6, "the old copy's messages counted as fenced")
    new.send_multipart([DATA, wire.task_bytes(2), b"new-2"])
    cl.wait_received(2, [b"new-2"])
    sent += legit_round(cl, b"second")
    cl.collect()
    got = [p for _, p in cl.received[2]]
    assert not [p for p in got if p.startswith(b"old-after")], "an older copy's batch reached an instance"
    assert cl.counter(1, "fenced") == 6 and cl.counter(1, "malformed") == 0
    assert cl.log_lines(1, r"older copy of a moved container")

    # an instance of an older placement of container 1 registering: told it is fenced
    stale = cl.socket(zmq.DEALER)
    stale.setsockopt(zmq.IDENTITY, wire.instance_identity(5))
    stale_ctl = cl.socket(zmq.DEALER)
    stale_ctl.setsockopt(zmq.IDENTITY, wire.instance_identity(5))
    stale_ctl.connect(cl.plan.stmgrs[1]["ctl"])  # (the newest connection of t5 gets t5's messages)
    stale.connect(cl.plan.stmgrs[1]["ipc"])
    stale.send_multipart(wire.ctrl(Op.REGISTER, task=5, component="b", pid=cl.dummy.pid, ok=True, container=1,
                                   placed=0))
    assert stale_ctl.poll(10000), "no answer to an instance of an older placement"
    msg = msgpack.unpackb(stale_ctl.recv_multipart()[-1], raw=False)
    assert msg["op"] == Op.FENCED and msg["placed"] == 0 and msg["newer"] == 1
    assert cl.log_lines(1, r"task 5 registered with placement version 0 .* told it is fenced")

    # the topology master fences container 1 (a newer copy runs elsewhere): its stream
    # manager tells its instances and exits with EXIT_FENCED
    cl.read_tm()
    cl.tm.send_multipart([wire.stmgr_identity(1, 1)] + wire.ctrl(Op.FENCED, container=1, placed=1, newer=4))
    told = {}

    def instances_told():
        for t in (2,):
            ctl = cl.inst[t][1]
            while ctl.poll(0):
                msg = msgpack.unpackb(ctl.recv_multipart()[-1], raw=False)
                if msg.get("op") == Op.FENCED:
                    told[t] = msg
        return 2 in told
    wait_for(instances_told, timeout=10, what="container 1's instance told FENCED")
    assert told[2]["newer"] == 4
    wait_for(lambda: cl.procs[1].poll() is not None, timeout=10, what="the fenced stream manager exited")
    assert cl.procs[1].returncode == EXIT_FENCED
    assert cl.dummy.wait(timeout=10) == -signal.SIGTERM, "the fenced stream manager SIGTERMs its instances"
    assert cl.log_lines(1, r"container 1 was moved: this copy .* is fenced")
    codes = cl.close()
    assert codes == {0: 0, 1: EXIT_FENCED}
