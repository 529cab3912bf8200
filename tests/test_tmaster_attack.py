"""An attacker on the topology master's port of a running local topology (issue 18,
hole 1): forged and malformed control messages, as the findings sent them. The topology
keeps running and active, its counts stay exact, the topology master is the same
process, and every message is counted as malformed, exactly.

The forged stream manager messages come from ``s0@1`` and ``s1@1``: identities of
containers 0 and 1, as the checks see them (a container speaks only for itself and its
own tasks), but not the live ``s0``/``s1`` of local mode: the topology master's ROUTER
hands a live identity to any later connection presenting it (ROUTER_HANDOVER), which
cuts the real stream manager off (a hole of identity, closed by authentication, not by
what a message may say)."""
from __future__ import annotations

import os
import textwrap
import time
import uuid

import msgpack
import zmq

from bittern.wire import CTRL, Op

from conftest import processes_of, wait_for

N = 4000
TOPOLOGY = """
import os
from bittern import EXHAUSTED, Bolt, Grouping, ReliableSpout, Topology
from bittern.api.metrics import AssignableMetric


class Paced(ReliableSpout):
    '''0..N-1: the first half at once, the rest once the file test.go exists.'''
    outputs = ["n"]
    def initialize(self, config, context):
        self.i, self.n, self.go = 0, int(config["test.count"]), config["test.go"]
    def next_item(self):
        if self.i >= self.n:
            return EXHAUSTED
        if self.i >= self.n // 2 and not os.path.exists(self.go):
            return None
        self.i += 1
        return self.i - 1, [self.i - 1]


class Sink(Bolt):
    outputs = []
    def initialize(self, config, context):
        self.total = 0
        self.seen = context.register_metric("seen", AssignableMetric(0))
    def process(self, tup):
        self.total += 1
        self.seen.update(self.total)


class Attacked(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE", "topology.stmgrs": 2,
              "topology.metrics.interval.secs": 1}
    paced = Paced.spec()
    sink = Sink.spec(par=2, inputs={paced: Grouping.SHUFFLE})
"""


def pack(value):
    return msgpack.packb(value, use_bin_type=True)


def forged(own, other):
    """(identity, frames) of every finding; ``own[c]``/``other[c]``: a task of container c
    and one of another container."""
    s0, s1 = b"s0@1", b"s1@1"
    out = [
        (s0, [CTRL, pack([1, 2, 3])]),  # not a map
        (s0, [CTRL, pack({"op": Op.REGISTER, "container": 0, "ok": True, "pid": 1})]),  # no task
        (s0, [CTRL, pack({"op": Op.REGISTER, "container": 0, "task": "x", "ok": True})]),  # task "x"
        (s0, [CTRL, pack({"op": Op.HEARTBEAT, "container": [0]})]),  # a list as container
        # the one message that failed the topology: another container's task, as not started
        (s0, [CTRL, pack({"op": Op.STMGR_REGISTER, "container": 0, "pid": 1,
                          "tasks": {str(other[0]): {"ok": False}}})]),
        (s1, [CTRL, pack({"op": Op.STMGR_REGISTER, "container": 1, "pid": 1,
                          "tasks": {str(other[1]): {"ok": False}}})]),
        (s1, [CTRL, pack({"op": Op.ERROR, "container": 1, "task": other[1], "error": "forged", "fatal": True})]),
        (s0, [CTRL, pack({"op": Op.METRICS, "container": 0, "task": other[0], "metrics": {"__emit-count": 10 ** 9}})]),
        (s0, [CTRL, pack({"op": Op.HEARTBEAT, "container": 1, "counters": {"dropped": 10 ** 6}})]),
        (b"s7", [CTRL, pack({"op": Op.HEARTBEAT, "container": 7})]),
        (b"junk", [CTRL, pack({"op": Op.HEARTBEAT, "container": 0})]),
        (s0, [CTRL, b"\xc1\xc1"]),  # undecodable
        (s0, [b"D", b"\x00\x00\x00\x01", b"x"]),  # not a control message
    ]
    # 2,000 errors with distinct component names (the finding: 50 MB that stayed)
    out += [(s0, [CTRL, pack({"op": Op.ERROR, "container": 0, "task": own[0], "component": f"bogus-{i}",
                              "error": "x" * 25000, "traceback": "y" * 25000})]) for i in range(2000)]
    return out


REQUESTS = [  # (request, the error it is answered)
    ({"op": Op.ERRORS, "limit": "abc"}, "errors: limit: 'abc' is not an int"),
    ({"op": Op.GET_METRICS, "window": [1, 2]}, "get_metrics: window: [1, 2] is not one of interval"),
    ({"op": Op.STMGR_REGISTER, "container": 0, "pid": 1, "tasks": {}}, "unknown request 'stmgr_register'"),
]


def attack(endpoint, own, other):
    """Send everything; returns how many messages were sent."""
    ctx = zmq.Context()
    socks = {}
    try:
        def sock(identity):
            if identity not in socks:
                s = socks[identity] = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.IDENTITY, identity)
                s.setsockopt(zmq.LINGER, 2000)
                s.setsockopt(zmq.SNDHWM, 0)
                s.connect(endpoint)
            return socks[identity]
        sent = 0
        for identity, frames in forged(own, other):
            sock(identity).send_multipart(frames)
            sent += 1
        q = sock(b"q" + uuid.uuid4().hex[:12].encode())
        q.send_multipart([CTRL, pack(["status"])])  # not a map: no req to answer
        sent += 1
        for i, (req, why) in enumerate(REQUESTS):
            q.send_multipart([CTRL, pack(dict(req, req=100 + i))])
            sent += 1
            assert q.poll(10000), f"no answer to {req}"
            ans = msgpack.unpackb(q.recv_multipart()[1])
            assert ans["req"] == 100 + i and ans["error"].startswith("malformed request: ") and why in ans["error"], ans
        q.send_multipart([CTRL, pack({"op": Op.STATUS, "req": 7})])  # a good one, answered
        assert q.poll(10000)
        ans = msgpack.unpackb(q.recv_multipart()[1])
        assert ans["req"] == 7 and ans["phase"] == "RUNNING" and ans["active"] is True and ans["error"] is None
        return sent
    finally:
        for s in socks.values():
            s.close()
        ctx.term()


def test_forged_and_malformed_messages_are_dropped_and_counted(bittern, home, tmp_path):
    src = tmp_path / "attacked.py"
    src.write_text(textwrap.dedent(TOPOLOGY))
    go = tmp_path / "go"
    bittern("submit", str(src), "--name", "att", "--config", f"test.count={N}", "--config", f"test.go={go}",
            check=True)
    try:
        doc = wait_for(lambda: (lambda d: d if d["components"]["paced"]["acked"] == N // 2 else None)(
            bittern.json("metrics", "att", "--json")), timeout=30, what="the first half acked")
        pid = doc["tmaster"]["pid"]
        assert doc["tmaster"]["malformed"] == 0 and doc["tmaster"]["denied"] == 0
        asg = bittern.state("assignments", "att")
        tasks = {int(c): ts for c, ts in asg["packing"]["containers"].items()}
        own = {c: ts[0] for c, ts in tasks.items()}
        other = {0: tasks[1][0], 1: tasks[0][0]}
        errors_before = bittern.json("errors", "att", "--json", "-n", "100")

        t0 = time.monotonic()
        sent = attack(asg["tmaster"], own, other)
        doc = wait_for(lambda: (lambda d: d if d["tmaster"]["malformed"] >= sent else None)(
            bittern.json("metrics", "att", "--json")), timeout=30, what="every message counted")
        attacked_in = time.monotonic() - t0
        assert doc["tmaster"]["malformed"] == sent, (doc["tmaster"], sent)
        assert doc["phase"] == "RUNNING" and doc["active"] is True and doc["tmaster"]["pid"] == pid
        assert doc["components"]["paced"]["emitted"] == N // 2

        # the topology goes on, its counts exact: every tuple once, nothing failed, nothing forged
        go.write_text("")
        def finished():
            d = bittern.json("metrics", "att", "--json", "--window", "all")
            p, k = d["components"]["paced"], d["components"]["sink"]
            return d if p["exhausted"] == 1 and p["pending"] == 0 and p["acked"] == N and k["executed"] >= N \
                else None
        doc = wait_for(finished, timeout=60, what="all tuples acked and reported")
        spout, sink = doc["components"]["paced"], doc["components"]["sink"]
        assert (spout["emitted"], spout["acked"], spout["failed"], spout["timed_out"]) == (N, N, 0, 0)
        assert (sink["executed"], sink["acked"], sink["failed"], sink["errors"]) == (N, N, 0, 0)
        wait_for(lambda: sum(t["user"].get("seen", 0) for t in bittern.json(
            "metrics", "att", "--json")["tasks"].values()) == N, what="the user metric's final value")
        assert doc["phase"] == "RUNNING" and doc["active"] is True and doc["tmaster"]["pid"] == pid
        assert doc["tmaster"]["malformed"] == sent and doc["tmaster"]["denied"] == 0
        assert all(s["alive"] and s["malformed"] == 0 and s["denied"] == 0 and s["dropped"] == 0
                   for s in doc["stmgrs"].values()), doc["stmgrs"]
        assert bittern.json("errors", "att", "--json", "-n", "100") == errors_before == []
        row = [r for r in bittern.json("list", "--json") if r["name"] == "att"][0]
        assert row["state"] == "RUNNING", row
        assert bittern.state("topologies", "att")["state"] == "RUNNING"
        # what users see
        line = f"stream managers: refused 0, malformed 0; topology master: refused 0, malformed {sent}"
        assert line in bittern("metrics", "att", check=True).stdout.splitlines()
        shown = bittern("top", "att", "--once", check=True).stdout  # (top may wrap it at the terminal's width)
        assert line in " ".join(shown.split()), shown
        log = open(os.path.join(home, "logs", "att", "tmaster.log")).read()
        assert log.count("dropped a control message") <= attacked_in + 3  # at most a line a second
    finally:
        bittern("kill", "att", check=True)
    wait_for(lambda: not processes_of(home), timeout=20, what="the topology's processes to exit")
