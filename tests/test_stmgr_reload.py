"""SIGHUP: a running stream manager re-reads its plan and follows peers that moved.

In cluster mode, when a supervisor dies its containers are restarted elsewhere on
new tcp endpoints; the containers that did not move keep running, and their
supervisor rewrites their plan file in place and sends SIGHUP to their stream
manager. These tests do that by hand with real stream manager processes, a fake
topology master (a ROUTER on the plan's endpoint) and fake instances (DEALERs with
an instance's identity, as in tests/test_stmgr_security.py).

Three containers are planned (tasks 1,4 in container 0; 2,5 in 1; 3,6 in 2, which
never starts). "Moving" a container here means: kill -9 its stream manager and
start a new one on another port (and other ipc paths), from a new plan file with
the same packing and, with CURVE, the same keys.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
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
from bittern.proc import pid_alive, spawn
from bittern.runplan import RunPlan
from bittern.wire import CTRL, DATA, Op
from conftest import wait_for
from zkfixture import free_port
from streammgr.planfile import load_plan, plan_conflicts
from streammgr.stmgr import SNDHWM, StreamManager

CONTAINERS = 3
RUNNING = (0, 1)


def plan_doc(home, ipc, with_keys):
    outputs = {"default": {"fields": ["x"], "direct": False}}
    comps = {"b": ComponentDef("b", "bolt", "nowhere:Bolt", 6, outputs)}  # never loaded
    packing = round_robin({"b": 6}, CONTAINERS)
    stmgrs = {c: endpoints(ipc, c, 0) for c in range(CONTAINERS)}
    plan = RunPlan("reload", home, TopologyDef("reload", comps, {}), packing,
                   f"tcp://127.0.0.1:{free_port()}", stmgrs, defaults())
    doc = plan.to_dict()
    if with_keys:
        doc["keys"] = {str(c): dict(zip(("public", "secret"), curve.generate())) for c in range(CONTAINERS)}
    return doc


def endpoints(ipc, c, n):
    """Container ``c``'s endpoints in its ``n``-th place: a new tcp port, new ipc paths."""
    return {"tcp": f"tcp://127.0.0.1:{free_port()}", "ipc": f"ipc://{ipc}/d{c}-{n}",
            "ctl": f"ipc://{ipc}/k{c}-{n}"}


def container_doc(doc, c):
    """The plan as container ``c``'s supervisor writes it: only its own CURVE secret."""
    d = copy.deepcopy(doc)
    if "keys" in d:
        d["keys"] = {k: {"public": v["public"], "secret": v["secret"] if int(k) == c else None}
                     for k, v in d["keys"].items()}
    return d


def write_atomically(path, d):
    """As the supervisor does (RunPlan.save): a temporary file renamed over the plan."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".plan-")
    with os.fdopen(fd, "w") as f:
        json.dump(d, f)
    os.replace(tmp, path)


class FakeTM:
    def __init__(self, cl, endpoint):
        self.sock = cl.socket(zmq.ROUTER)
        tm_key = (cl.doc.get("keys") or {}).get("0")
        if tm_key:  # with CURVE keys, the topology master is a CURVE server with container 0's key
            curve.server_options(self.sock, tm_key["secret"], tm_key["public"])
        self.sock.bind(endpoint)
        self.stmgr_regs = {}  # container -> [STMGR_REGISTER messages]
        self.heartbeats = {}  # container -> count
        self.counters = {}  # container -> latest counters

    def read(self, cl):
        while self.sock.poll(0):
            frames = self.sock.recv_multipart()
            if len(frames) < 3 or frames[1] != CTRL:
                continue
            msg = msgpack.unpackb(frames[2], raw=False, strict_map_key=False)
            op, c = msg.get("op"), msg.get("container")
            if op == Op.REGISTER:
                cl.registered.add(msg["task"])
            elif op == Op.STMGR_REGISTER:
                self.stmgr_regs.setdefault(c, []).append(msg)
            elif op == Op.HEARTBEAT:
                self.heartbeats[c] = self.heartbeats.get(c, 0) + 1
                self.counters[c] = msg["counters"]


class Cluster:
    def __init__(self, home, with_keys):
        self.home = home
        self.ipc = tempfile.mkdtemp(prefix="brl-", dir="/tmp")  # ipc paths must stay short
        self.doc = plan_doc(home, self.ipc, with_keys)
        self.ctx = zmq.Context()
        self.sockets = []
        self.tms = [FakeTM(self, self.doc["tmaster"])]
        self.procs = {}  # container -> the running stream manager's Popen
        self.paths = {}  # container -> its plan file
        self.logs = {}  # container -> its log file
        self.started = []  # every Popen, killed ones included
        self.inst = {}  # task -> (data DEALER, control DEALER)
        self.received = {}
        self.registered = set()
        self.tasks = {c: RunPlan.from_dict(self.doc).packing.containers[c] for c in range(CONTAINERS)}

    def socket(self, kind):
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        self.sockets.append(s)
        return s

    @property
    def tm(self):
        return self.tms[-1]

    def read_tm(self):
        for tm in self.tms:
            tm.read(self)
        return False

    def start(self, c):
        """A stream manager for container ``c`` from the current plan, in a place of its own
        (plan file and log), and fake instances for its tasks, registered through it."""
        n = len([p for p in self.started if p.args[-1] == str(c)])
        self.paths[c] = os.path.join(self.home, f"c{c}-{n}", "plan.json")
        self.logs[c] = os.path.join(self.home, f"stmgr-{c}-{n}.log")
        write_atomically(self.paths[c], container_doc(self.doc, c))
        p = spawn([sys.executable, "-m", "streammgr", "--plan", self.paths[c], "--container", str(c)],
                  self.logs[c])
        self.procs[c] = p
        self.started.append(p)
        ep = self.doc["stmgrs"][str(c)]
        for t in self.tasks[c]:
            for s in self.inst.pop(t, ()):
                s.close(linger=0)
            self.registered.discard(t)
            data, ctl = self.socket(zmq.DEALER), self.socket(zmq.DEALER)
            for s in (data, ctl):
                s.setsockopt(zmq.IDENTITY, wire.instance_identity(t))
            ctl.connect(ep["ctl"])
            data.connect(ep["ipc"])
            self.inst[t] = (data, ctl)
            self.received[t] = []
            data.send_multipart(wire.ctrl(Op.REGISTER, task=t, component="b", pid=os.getpid(), ok=True,
                                          container=c))
        wait_for(lambda: self.read_tm() or self.registered >= set(self.tasks[c]), timeout=20,
                 what=f"the fake instances of container {c} registered")

    def kill9(self, c):
        p = self.procs.pop(c)
        p.kill()
        p.wait(timeout=10)

    def move(self, c):
        """Container ``c`` restarts elsewhere: kill -9, new endpoints, a new process (and,
        for container 0, a new topology master)."""
        if c in self.procs:
            self.kill9(c)
        self.doc["stmgrs"][str(c)] = endpoints(self.ipc, c, len(self.started))
        if c == 0:
            self.doc["tmaster"] = f"tcp://127.0.0.1:{free_port()}"
            self.tms.append(FakeTM(self, self.doc["tmaster"]))
        self.start(c)

    def rewrite(self, c, doc=None):
        """Rewrite container ``c``'s plan file in place (the current plan, or ``doc``)."""
        write_atomically(self.paths[c], container_doc(doc or self.doc, c))

    def hup(self, c):
        self.procs[c].send_signal(signal.SIGHUP)

    def send(self, src, dest, payload):
        self.inst[src][0].send_multipart([DATA, wire.task_bytes(dest), payload])

    def collect(self):
        for t, (data, ctl) in self.inst.items():
            n = 0
            while data.poll(0):
                frames = data.recv_multipart()
                if frames[0] == DATA:
                    self.received[t].append(frames[1])
                    n += 1
            if n:
                ctl.send_multipart(wire.ctrl(Op.CREDIT, task=t, n=n))

    def wait_received(self, task, payloads, timeout=15):
        want = set(payloads)

        def arrived():
            self.collect()
            return want <= set(self.received[task])
        wait_for(arrived, timeout=timeout, interval=0.05,
                 what=f"{len(want)} batches at task {task} "
                      f"(missing {len(want - set(self.received[task]))})")

    def round(self, tag, n=10):
        """Batches both ways between containers 0 and 1: all must arrive."""
        to1 = [b"%s-0to1-%d" % (tag, i) for i in range(n)]
        to0 = [b"%s-1to0-%d" % (tag, i) for i in range(n)]
        for p in to1:
            self.send(1, 2, p)  # task 1 (container 0) -> task 2 (container 1)
        for p in to0:
            self.send(5, 4, p)  # task 5 (container 1) -> task 4 (container 0)
        self.wait_received(2, to1)
        self.wait_received(4, to0)

    def log_lines(self, c, pattern, path=None):
        with open(path or self.logs[c], errors="replace") as f:
            return [line for line in f if re.search(pattern, line)]

    def wait_log(self, c, pattern, what, timeout=10):
        return wait_for(lambda: self.log_lines(c, pattern), timeout=timeout, interval=0.05, what=what)

    def close(self):
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
        for p in self.started:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=5)
        for s in self.sockets:
            s.close(linger=0)
        self.ctx.term()
        shutil.rmtree(self.ipc, ignore_errors=True)
        pids = [p.pid for p in self.started]
        gone = [pid for pid in pids if pid_alive(pid) or psutil.pid_exists(pid)]
        assert not gone, f"stream managers still running: {gone}"
        return codes


@pytest.fixture
def make_cluster(home):
    made = []

    def make(with_keys):
        cl = Cluster(home, with_keys)
        made.append(cl)
        for c in RUNNING:
            cl.start(c)
        return cl
    yield make
    for cl in made:
        if not cl.ctx.closed:
            cl.close()


def peer_1_moves_and_0_follows(cl):
    """Container 1 moves; container 0's stream manager learns it from SIGHUP alone."""
    pid0 = cl.procs[0].pid
    cl.round(b"before")
    cl.kill9(1)
    # while container 1 is down, task 1 keeps sending to task 2: part of it sits in the
    # old socket toward container 1 (lost on the reload), the rest in the stream
    # manager's own queue (which must follow the peer to its new endpoint)
    outage = [b"outage-%d" % i for i in range(400)]
    for p in outage:
        cl.send(1, 2, p)
    old_tcp = cl.doc["stmgrs"]["1"]["tcp"]
    cl.move(1)
    new_tcp = cl.doc["stmgrs"]["1"]["tcp"]
    assert new_tcp != old_tcp
    # not yet told: container 0 still knocks at the old port, nothing gets through
    cl.send(1, 2, b"unheard")
    time.sleep(1.0)
    cl.collect()
    assert cl.received[2] == [], "container 0 reached the moved container before its plan changed"

    hb_before = cl.tm.heartbeats.get(0, 0)
    cl.rewrite(0)
    cl.hup(0)
    cl.wait_log(0, re.escape(f"peer container 1 now at {new_tcp}"), "container 0 reconnected to 1")
    cl.round(b"after")
    cl.wait_received(2, [b"unheard"])  # queued in container 0 behind the outage batches
    got = set(cl.received[2])
    arrived = [p for p in outage if p in got]
    # at most about SNDHWM batches were in the old socket (and a few, perhaps, in the dead
    # connection before it was seen to die); the rest was queued and must arrive
    assert len(arrived) >= len(outage) - SNDHWM - 50, \
        f"only {len(arrived)} of {len(outage)} queued batches arrived"
    # the same process all along, never restarted, still heartbeating
    assert cl.procs[0].pid == pid0 and cl.procs[0].poll() is None
    assert len(cl.log_lines(0, r"stream manager of container 0 up")) == 1
    wait_for(lambda: cl.read_tm() or cl.tm.heartbeats.get(0, 0) > hb_before, timeout=5,
             what="heartbeats of container 0 after the reload")
    assert not cl.log_lines(0, "Traceback|ERROR")
    return pid0


def test_sighup_follows_a_moved_peer_and_refuses_a_new_packing(make_cluster):
    cl = make_cluster(with_keys=False)
    pid0 = peer_1_moves_and_0_follows(cl)

    # the same plan again: nothing to do, nothing reconnected
    cl.hup(0)
    cl.wait_log(0, "SIGHUP: plan .* reloaded, nothing to change", "the no-op reload")
    assert len(cl.log_lines(0, "now at")) == 1

    # another packing (tasks 2 and 3 swap containers 1 and 2) or another set of
    # containers: refused, logged, and traffic keeps flowing on the old plan
    swapped = copy.deepcopy(cl.doc)
    swapped["packing"]["containers"] = {"0": [1, 4], "1": [3, 5], "2": [2, 6]}
    swapped["stmgrs"]["1"] = endpoints(cl.ipc, 1, 99)  # would be applied if the packing were not checked
    cl.rewrite(0, swapped)
    cl.hup(0)
    lines = cl.wait_log(0, "SIGHUP: refused the plan", "the refused packing")
    assert "packing (task: container) 2: 1->2, 3: 2->1" in lines[0], lines[0]
    cl.round(b"after-refused-packing")
    grown = copy.deepcopy(cl.doc)
    grown["packing"]["containers"] = {"0": [1], "1": [2, 5], "2": [3, 6], "3": [4]}
    grown["stmgrs"]["3"] = endpoints(cl.ipc, 3, 0)
    cl.rewrite(0, grown)
    cl.hup(0)
    wait_for(lambda: len(cl.log_lines(0, "SIGHUP: refused the plan")) == 2, timeout=10,
             what="the refused set of containers")
    line = cl.log_lines(0, "SIGHUP: refused the plan")[1]
    assert "containers [0, 1, 2] -> [0, 1, 2, 3]" in line and "4: 0->3" in line, line
    cl.round(b"after-refused-containers")
    assert len(cl.log_lines(0, "now at")) == 1, "a refused plan changed connections"
    assert cl.procs[0].pid == pid0
    assert cl.log_lines(0, "ERROR") and not cl.log_lines(0, "Traceback")
    cl.read_tm()
    hb = cl.tm.heartbeats.get(0, 0)  # the second heartbeat from now was sent after the last batch
    wait_for(lambda: cl.read_tm() or cl.tm.heartbeats.get(0, 0) >= hb + 2, timeout=10,
             what="two more heartbeats of container 0")
    assert cl.tm.counters[0]["dropped"] == 0 and cl.tm.counters[0]["malformed"] == 0
    codes = cl.close()
    assert codes == {0: 0, 1: 0}, f"the stream managers must stop cleanly on SIGTERM: {codes}"


@pytest.mark.skipif(not curve.available(), reason="libzmq without CURVE")
def test_sighup_with_curve_follows_moved_peers_and_a_moved_topology_master(make_cluster):
    cl = make_cluster(with_keys=True)
    assert "with CURVE" in "".join(cl.log_lines(0, r"up \(pid"))
    peer_1_moves_and_0_follows(cl)

    # now container 0 moves (with the topology master): container 1's stream manager,
    # the second one of its own, follows both
    pid1 = cl.procs[1].pid
    old_tm = cl.tm
    cl.move(0)
    assert cl.tm is not old_tm
    cl.rewrite(1)
    cl.hup(1)
    cl.wait_log(1, re.escape(f"topology master now at {cl.doc['tmaster']}"), "container 1 found the new tmaster")
    wait_for(lambda: cl.read_tm() or 1 in cl.tm.stmgr_regs, timeout=10,
             what="container 1 registered with the new topology master")
    reg = cl.tm.stmgr_regs[1][-1]
    assert reg["pid"] == pid1
    assert set(reg["tasks"]) == {"2", "5"}, "its instances' registrations travel with it"
    cl.round(b"after-tm-move")
    wait_for(lambda: cl.read_tm() or cl.tm.heartbeats.get(1, 0) >= 2, timeout=5,
             what="heartbeats of container 1 at the new topology master")
    assert cl.procs[1].pid == pid1 and len(cl.log_lines(1, r"stream manager of container 1 up")) == 1
    cl.read_tm()
    assert cl.tm.counters[0]["denied"] == 0 and cl.tm.counters[1]["denied"] == 0
    assert not cl.log_lines(1, "Traceback|ERROR")
    codes = cl.close()
    assert codes == {0: 0, 1: 0}, f"the stream managers must stop cleanly on SIGTERM: {codes}"


# -- in process: what reload() compares and what it replaces -------------------------------

@pytest.mark.skipif(not curve.available(), reason="libzmq without CURVE")
def test_reload_in_process_keys_endpoints_and_refusals(home):
    ipc = tempfile.mkdtemp(prefix="brl-", dir="/tmp")
    doc = plan_doc(home, ipc, with_keys=True)
    path = os.path.join(home, "c0", "plan.json")
    write_atomically(path, container_doc(doc, 0))
    sm = StreamManager(load_plan(path), 0, plan_path=path)
    ctx = zmq.Context()
    tm2 = ctx.socket(zmq.ROUTER)
    try:
        assert sm.auth.allowed == {doc["keys"][c]["public"] for c in ("1", "2")}
        peers, ctrl, tm_sock = dict(sm.peers), dict(sm.peer_ctrl), sm.tm
        assert sm.reload() is False  # unchanged: the same sockets
        assert sm.peers == peers and sm.peer_ctrl == ctrl and sm.tm is tm_sock

        # container 2 gets a new key (and stays where it is), container 1 a new port
        new = copy.deepcopy(doc)
        pub2, sec2 = curve.generate()
        new["keys"]["2"] = {"public": pub2, "secret": sec2}
        new["stmgrs"]["1"] = endpoints(ipc, 1, 1)
        new["tmaster"] = f"tcp://127.0.0.1:{free_port()}"
        curve.server_options(tm2, doc["keys"]["0"]["secret"], doc["keys"]["0"]["public"])
        tm2.bind(new["tmaster"])
        write_atomically(path, container_doc(new, 0))
        assert sm.reload() is True  # the topology master moved
        assert sm.auth.allowed == {doc["keys"]["1"]["public"], pub2}
        assert sm.peers[1] is not peers[1] and sm.peer_ctrl[1] is not ctrl[1]
        assert sm.peers[2] is not peers[2] and sm.peer_ctrl[2] is not ctrl[2]
        # the new socket toward container 2 knows its new key: a server with it takes its batches
        server2 = ctx.socket(zmq.ROUTER)
        curve.server_options(server2, sec2, pub2)
        server2.bind(new["stmgrs"]["2"]["tcp"])
        sm.peers[2].send_multipart([DATA, wire.task_bytes(3), b"to-2"])
        assert server2.poll(5000), "container 2's new key was not used"
        assert server2.recv_multipart()[1:] == [DATA, wire.task_bytes(3), b"to-2"]
        server2.close(linger=0)
        assert sm.peers[1].getsockopt_string(zmq.LAST_ENDPOINT) == new["stmgrs"]["1"]["tcp"]
        assert sm.tm is not tm_sock and sm.tm.getsockopt_string(zmq.LAST_ENDPOINT) == new["tmaster"]
        assert tm2.poll(5000), "no registration at the new topology master"
        frames = tm2.recv_multipart()
        assert msgpack.unpackb(frames[2], raw=False)["op"] == Op.STMGR_REGISTER
        assert sm.plan.tmaster == new["tmaster"] and sm.keys[2]["public"] == pub2

        # what a running stream manager cannot take
        base = RunPlan.from_dict(container_doc(new, 0))
        plan0 = load_plan(path)
        assert plan_conflicts(plan0, base, 0) == []

        def conflicts(change):
            d = container_doc(new, 0)
            change(d)
            write_atomically(path, d)
            return plan_conflicts(plan0, load_plan(path), 0)
        assert conflicts(lambda d: d["stmgrs"]["0"].update(tcp="tcp://127.0.0.1:1")) == [
            f"this container's own tcp endpoint {new['stmgrs']['0']['tcp']} -> tcp://127.0.0.1:1"]
        assert conflicts(lambda d: d["keys"]["0"].update(public=pub2)) == ["this container's own CURVE keys"]
        assert conflicts(lambda d: d.pop("keys")) == ["CURVE on -> off"]
        assert conflicts(lambda d: d["keys"]["1"].update(public=None)) == [
            "no CURVE public key for container(s) [1]"]
        assert conflicts(lambda d: d["packing"]["tasks"].update({"7": ["b", 6]})
                         or d["packing"]["containers"]["2"].append(7)) == [
            "tasks [1, 2, 3, 4, 5, 6] -> [1, 2, 3, 4, 5, 6, 7]"]
        # a refused plan leaves everything as it was
        sockets = (dict(sm.peers), sm.tm, sm.auth.allowed)
        assert sm.reload() is False
        assert (dict(sm.peers), sm.tm, sm.auth.allowed) == sockets
        # a peer key that is no CURVE key, a peer without a tcp endpoint: refused as well
        for change in (lambda d: d["keys"]["1"].update(public="too-short"),
                       lambda d: d["stmgrs"]["1"].pop("tcp")):
            d = container_doc(new, 0)
            change(d)
            write_atomically(path, d)
            assert sm.reload() is False and (dict(sm.peers), sm.tm, sm.auth.allowed) == sockets
        # a file that cannot be read: logged, nothing changes
        with open(path, "w") as f:
            f.write("{not json")
        assert sm.reload() is False and (dict(sm.peers), sm.tm, sm.auth.allowed) == sockets
    finally:
        sm._close()
        tm2.close(linger=0)
        ctx.term()
        shutil.rmtree(ipc, ignore_errors=True)


@pytest.mark.skipif(not curve.available(), reason="libzmq without CURVE")
def test_a_refused_handshake_with_the_topology_master_is_tried_again(home):
    """A topology master that does not admit this container's key yet (it was placed anew,
    and the topology master has not read the new assignment): ZeroMQ never retries a
    handshake the server refused, so the stream manager connects anew once its topology
    master took nothing for TM_RECONNECT_SECS, and registers as soon as its key is admitted."""
    from streammgr.stmgr import TM_RECONNECT_SECS
    ipc = tempfile.mkdtemp(prefix="brl-", dir="/tmp")
    doc = plan_doc(home, ipc, with_keys=True)
    path = os.path.join(home, "c0", "plan.json")
    write_atomically(path, container_doc(doc, 1))
    ctx = zmq.Context()
    tm = ctx.socket(zmq.ROUTER)
    auth = curve.KeyAuthenticator(ctx, []).start()  # admits nobody yet
    curve.server_options(tm, doc["keys"]["0"]["secret"], doc["keys"]["0"]["public"])
    tm.bind(doc["tmaster"])
    sm = StreamManager(load_plan(path), 1, plan_path=path)
    try:
        sm.register_with_tm()
        refused = time.monotonic()
        wait_for(lambda: auth.denied >= 1, 10, 0.05, "the first handshake refused")
        auth.allow([doc["keys"]["1"]["public"]])
        ops = []
        deadline = refused + TM_RECONNECT_SECS + 15
        while time.monotonic() < deadline and Op.STMGR_REGISTER not in ops:
            sm.to_tm(Op.HEARTBEAT)  # as its loop does every second
            while tm.poll(200):
                ops.append(wire.decode_ctrl(tm.recv_multipart()[2])["op"])
        assert Op.STMGR_REGISTER in ops, f"never registered after the refusal (got {ops})"
    finally:
        sm._close()
        tm.close(linger=0)
        auth.stop()
        ctx.term()
        shutil.rmtree(ipc, ignore_errors=True)
