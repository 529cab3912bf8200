"""A real ZooKeeper server for the tests (scripts/zookeeper.sh on a free port in a temp
dir), one per test session: any test can request ``zk_server``."""
from __future__ import annotations

import os
import random
import socket
import subprocess

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "zookeeper.sh")
ZK_JAR = "/usr/share/java/zookeeper.jar"


def free_port(lo=20000, hi=32000):
    """A free port below the kernel's ephemeral range (32768-60999), where outgoing
    connections take theirs: a server's port chosen there can be taken before it binds,
    or a client can connect to itself while it waits for the server."""
    for _ in range(500):
        port = random.randrange(lo, hi)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port from {lo} to {hi}")


class ZkServer:
    """``hosts`` for clients; ``stop``/``start``/``restart`` keep the data dir and port,
    so sessions and data survive a restart as they would a real one."""

    def __init__(self, dir, port):
        self.dir, self.port = dir, port
        self.hosts = f"127.0.0.1:{port}"
        self.pid = None

    def _script(self, *args):
        # (start waits up to 120 s for the server to serve: scripts/zookeeper.sh)
        r = subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            raise RuntimeError(f"zookeeper.sh {' '.join(args)} failed:\n{r.stderr}")

    def start(self):
        self._script("start", self.dir, str(self.port))
        with open(os.path.join(self.dir, "zookeeper.pid")) as f:
            self.pid = int(f.read())

    def stop(self):
        """Stop the server and prove its java process is gone."""
        self._script("stop", self.dir)
        if self.pid is not None:
            assert not self.process_alive(), f"ZooKeeper pid {self.pid} survived stop"
        self.pid = None

    def restart(self):
        self.stop()
        self.start()

    def process_alive(self):
        """Our java process is still there (not a zombie, not a recycled pid)."""
        try:
            p = psutil.Process(self.pid)
            return (p.status() != psutil.STATUS_ZOMBIE
                    and os.path.join(self.dir, "zoo.cfg") in p.cmdline())
        except (psutil.NoSuchProcess, TypeError):
            return False


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory):
    if not os.path.exists(ZK_JAR):
        pytest.fail(f"ZooKeeper is not installed ({ZK_JAR}): run scripts/setup.sh as root")
    d = str(tmp_path_factory.mktemp("zk"))
    for attempt in range(3):  # a free port can be taken before the server binds it
        server = ZkServer(d, free_port())
        try:
            server.start()
            break
        except RuntimeError:
            server.stop()
            if attempt == 2:
                raise
    try:
        yield server
    finally:
        server.stop()
