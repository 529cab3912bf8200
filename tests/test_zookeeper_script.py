"""scripts/zookeeper.sh, the private ZooKeeper of cluster mode and of these tests: a
server that cannot serve is reported in one line naming its directory and port, the
script exits non-zero, and no server process is left behind."""
from __future__ import annotations

import socket
import subprocess

from conftest import processes_of
from zkfixture import SCRIPT, free_port


def test_a_server_that_cannot_bind_is_reported_by_dir_and_port_and_leaves_nothing(tmp_path):
    port = free_port()
    squatter = socket.socket()  # takes the port, answers nothing (so it passes for free)
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    d = str(tmp_path / "zk")
    try:
        r = subprocess.run([SCRIPT, "start", d, str(port)], capture_output=True, text=True, timeout=180)
    finally:
        squatter.close()
    assert r.returncode != 0
    first = r.stderr.splitlines()[0]
    assert first == f"zookeeper.sh: server on {d} (port {port}) exited before it served; log tail:", r.stderr
    assert "BindException" in r.stderr  # the server's own words follow
    assert not processes_of(d), "a ZooKeeper process of the failed start is still running"
    r = subprocess.run([SCRIPT, "status", d, str(port)], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
