"""Shared fixtures: a private BITTERN_HOME per test, a CLI runner, and a leak check
that fails any test leaving a process of its topology behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from zkfixture import zk_server  # noqa: F401  (a real ZooKeeper for any test that asks)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPOLOGIES = os.path.join(ROOT, "tests", "topologies")
EXAMPLES = os.path.join(ROOT, "topologies")


def processes_of(home):
    """Live processes whose command line mentions ``home`` (every process of a
    topology does: the supervisor by --home, the others by their plan path)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmd = p.info["cmdline"] or []
            if any(home in part for part in cmd) and p.pid != os.getpid():
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def instance_log(home, topology, component):
    """Everything the instances of ``component`` wrote to their logs (all tasks, all
    incarnations)."""
    import glob
    text = ""
    for path in sorted(glob.glob(os.path.join(home, "logs", topology, f"{component}-*.log"))):
        with open(path, errors="replace") as f:
            text += f.read()
    return text


class Bittern:
    """Runs the ``bittern`` CLI against one home directory."""

    def __init__(self, home, python=sys.executable):
        self.home, self.python = home, python
        self.env = dict(os.environ, BITTERN_HOME=home, PYTHONUNBUFFERED="1")

    def __call__(self, *args, timeout=120, check=False):
        r = subprocess.run([self.python, "-m", "bittern", *map(str, args)], env=self.env,
                           capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        if check and r.returncode != 0:
            raise AssertionError(f"bittern {' '.join(map(str, args))} exited {r.returncode}\n"
                                 f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")
        return r

    def popen(self, *args):
        return subprocess.Popen([self.python, "-m", "bittern", *map(str, args)], env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)

    def json(self, *args, timeout=60):
        r = self(*args, timeout=timeout, check=True)
        return json.loads(r.stdout)

    def processes(self, name):
        doc = self.state("processes", name) or {}
        return doc.get("procs", {})

    def state(self, kind, name):
        path = os.path.join(self.home, "state", kind, f"{name}.json")
        try:
            with open(path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None


@pytest.fixture
def home(tmp_path):
    h = str(tmp_path / "home")
    os.makedirs(h)
    yield h
    leaked = processes_of(h)
    for p in leaked:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    assert not leaked, "test left processes behind: " + ", ".join(
        f"{p.pid} {' '.join(p.info['cmdline'] or [])[:120]}" for p in leaked)


@pytest.fixture
def bittern(home):
    return Bittern(home)


def wait_for(pred, timeout=20.0, interval=0.1, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def read_jsonl(path):
    out = []
    if os.path.isdir(path):
        for f in sorted(os.listdir(path)):
            out.extend(read_jsonl(os.path.join(path, f)))
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


@pytest.fixture
def cluster(zk_server, tmp_path):  # noqa: F811 - (zk_server: the fixture imported above)
    """A ``clusterkit.Cluster`` (nimbus, supervisors) on the test's real ZooKeeper;
    stopping it asserts that no process of the cluster is left."""
    from clusterkit import Cluster
    c = Cluster(zk_server, tmp_path)
    try:
        yield c
    finally:
        c.stop()


def pytest_collection_modifyitems(session, config, items):
    """Files with slow tests first (most first), the rest after, each file's tests in their order.
    This is the order of a run in one process (``-n 0``). Under scripts/test.sh,
    pytest-xdist (--dist loadfile) hands out whole files by their number of tests, most
    first, and this order only breaks its ties; measured, its order keeps both workers
    busy to the end (README, "Two commands"), so it is left to do so."""
    slow = {}
    for item in items:
        if item.get_closest_marker("slow"):
            slow[item.path] = slow.get(item.path, 0) + 1
    order = {id(item): i for i, item in enumerate(items)}
    # (the files with the most slow tests first: a rough measure of the longest)
    items.sort(key=lambda item: (-slow.get(item.path, 0), order[id(item)]))
