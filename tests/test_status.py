"""Status that tells the truth (issue 17): a topology whose checkpoints keep failing is
DEGRADED in `bittern list`, `bittern metrics` and `bittern errors`, and RUNNING again
once a checkpoint completes; nimbus answers 503 at once while ZooKeeper is away."""
from __future__ import annotations

import os
import re
import socket
import struct
import textwrap
import urllib.parse

import pytest

from conftest import wait_for

TOPOLOGY = """
import os
import time
from bittern import Bolt, Grouping, Spout, Topology


class Numbers(Spout):
    outputs = ["n"]
    def initialize(self, config, context):
        self.i, self.next_at = 0, time.monotonic()
    def init_state(self, state):
        self.state = state
        self.i = state.get("next", 0)
    def pre_save(self, checkpoint_id):
        self.state.put("next", self.i)
    def next_tuple(self):
        if time.monotonic() >= self.next_at:
            self.next_at = time.monotonic() + 0.01
            self.emit([self.i])
            self.i += 1


class Fussy(Bolt):
    '''Cannot save its state while the file test.flag exists.'''
    def initialize(self, config, context):
        self.flag = config["test.flag"]
    def init_state(self, state):
        self.state = state
    def pre_save(self, checkpoint_id):
        if os.path.exists(self.flag):
            raise OSError("the disk is full (test flag)")
    def process(self, tup):
        self.state.put("last", tup.values[0])


class Status(Topology):
    config = {"topology.reliability.mode": "EFFECTIVELY_ONCE",
              "topology.stateful.checkpoint.interval.seconds": 0.5,
              "topology.stateful.checkpoint.timeout.secs": 1.0}
    numbers = Numbers.spec()
    fussy = Fussy.spec(par=2, inputs={numbers: Grouping.SHUFFLE})
"""


def listed(bittern, name):
    rows = [r for r in bittern.json("list", "--json") if r["name"] == name]
    return rows[0] if rows else None


def test_failing_checkpoints_make_a_topology_degraded_until_one_completes(bittern, tmp_path):
    src = tmp_path / "status_topo.py"
    src.write_text(textwrap.dedent(TOPOLOGY))
    flag = tmp_path / "flag"
    bittern("submit", str(src), "--name", "st", "--config", f"test.flag={flag}", check=True)
    try:
        wait_for(lambda: (bittern.json("metrics", "st", "--json").get("checkpoints") or {}).get("completed", 0) >= 1,
                 timeout=30, what="a first complete checkpoint")
        row = listed(bittern, "st")
        assert row["state"] == "RUNNING" and "health" not in row and "reason" not in row, row
        flag.write_text("")
        row = wait_for(lambda: (lambda r: r if r["state"] == "DEGRADED" else None)(listed(bittern, "st")),
                       timeout=30, what="DEGRADED in bittern list")
        # DEGRADED from the third failure in a row; a loaded machine may list it a few later
        m = re.match(r"(\d+) checkpoints in a row failed; last: checkpoint \d+ ", row["reason"])
        assert m and int(m.group(1)) >= 3, row
        assert "abandoned: timed out after 1s: 1 of 3 tasks saved it" in row["reason"], row
        assert row["since"] > 0 and row["health"]["state"] == "DEGRADED"
        text = bittern("list", check=True).stdout.splitlines()
        assert text[0].split() == ["NAME", "STATE", "CONTAINERS", "TASKS", "UPTIME", "REASON"]
        line = [ln for ln in text if ln.startswith("st ")][0]
        assert line.split()[1] == "DEGRADED" and "since" in line and "checkpoints in a row failed" in line
        doc = bittern.json("metrics", "st", "--json")
        assert doc["health"]["state"] == "DEGRADED" and doc["phase"] == "RUNNING"
        assert "DEGRADED since" in bittern("metrics", "st", check=True).stdout
        # one record of the topology master's, its count growing (not one per checkpoint)
        wait_for(lambda: [e for e in bittern.json("errors", "st", "--json", "-n", "50")
                          if e["component"] == "__tmaster" and e["count"] >= 2], timeout=20,
                 what="the topology master's error counted twice")
        errs = bittern.json("errors", "st", "--json", "-n", "50")
        mine = [e for e in errs if e["component"] == "__tmaster"]
        assert len(mine) == 1 and mine[0]["where"] == "checkpoint timeout", mine
        assert any(e["component"] == "fussy" and "the disk is full" in e["error"] for e in errs), errs
        out = bittern("errors", "st", "-n", "50", check=True).stdout
        assert "__tmaster in checkpoint timeout: abandoned: timed out after 1s" in out and " times since " in out
        tm_log = open(os.path.join(bittern.home, "logs", "st", "tmaster.log")).read()
        assert tm_log.count("abandoned: timed out") < mine[0]["count"] + 2  # not a line per failure

        flag.unlink()
        row = wait_for(lambda: (lambda r: r if r["state"] == "RUNNING" else None)(listed(bittern, "st")),
                       timeout=30, what="RUNNING again")
        assert "health" not in row and "reason" not in row and "since" not in row, row
        assert "REASON" not in bittern("list", check=True).stdout
        assert bittern.json("metrics", "st", "--json")["health"] == {"state": "HEALTHY", "reason": None,
                                                                     "since": None}
    finally:
        bittern("kill", "st", check=True)


def hang_up_early(url, path, token):
    """Send a request and reset the connection at once, without reading the answer."""
    u = urllib.parse.urlsplit(url)
    with socket.create_connection((u.hostname, u.port), timeout=5) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())


@pytest.mark.slow
def test_nimbus_answers_503_at_once_while_zookeeper_is_down_and_recovers(cluster, zk_server, tmp_path):
    nimbus = cluster.start_nimbus()
    assert cluster.api("/api/v1/topologies")[0] == 200
    src = tmp_path / "status_topo.py"
    src.write_text(textwrap.dedent(TOPOLOGY))
    zk_server.stop()
    try:
        # the engine's own answer (the client's timeout is a generous 30 s)
        status, doc = wait_for(lambda: (lambda a: a if a[0] == 503 else None)(
            cluster.api("/api/v1/topologies", url=nimbus.url)), timeout=30, what="a 503 from nimbus")
        assert doc["zookeeper"] == "unreachable" and doc["error"].startswith(f"ZooKeeper at {zk_server.hosts} "
                                                                             "is unreachable"), doc
        assert cluster.api("/api/v1/cluster", url=nimbus.url)[0] == 503
        assert cluster.api("/api/v1/topologies/st/metrics", url=nimbus.url)[0] == 503
        r = cluster.cli("submit", str(src), "--name", "st", "--config", "test.flag=/nonexistent", timeout=60)
        assert r.returncode == 1 and r.stdout == "", r
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: nimbus at {nimbus.url}: ") \
            and f"ZooKeeper at {zk_server.hosts} is unreachable" in err[0], r.stderr
        r = cluster.cli("list", timeout=60)
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "ZooKeeper" in r.stderr, r
        for _ in range(20):  # clients that hang up before their answer: no traceback in the log
            hang_up_early(nimbus.url, "/api/v1/topologies", cluster.token)
    finally:
        zk_server.start()
    wait_for(lambda: cluster.api("/api/v1/topologies", url=nimbus.url)[0] == 200, timeout=40,
             what="nimbus answering again")
    rows = cluster.cli("list", "--json", check=True).stdout
    assert rows.strip() == "[]"
    log = open(nimbus.log_path, errors="replace").read()
    assert "Traceback" not in log and "BrokenPipe" not in log.replace("BrokenPipeError)", ""), log[-3000:]
